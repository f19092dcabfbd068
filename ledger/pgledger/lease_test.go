package pgledger_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// fenced opens a fenced ledger on schema for a worker of its own.
func fenced(t *testing.T, conn, schema string, ttl time.Duration) *pgledger.Ledger {
	t.Helper()
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: ttl}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func write(l *pgledger.Ledger, key string, rev uint64) (uint64, bool, error) {
	return l.CompareAndSwap(ctx, key, rev-1, record(key, rev), []mcpsync.OutboxEntry{entry(key, rev)})
}

// A worker whose lease was taken cannot write, though it never noticed (it
// was paused: it did not renew); expiry alone refuses nothing.
func TestLeaseTakenFencesWrites(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	// A lease of a microsecond has expired by the next statement: a worker
	// that never renews.
	paused, taker := fenced(t, conn, schema, time.Microsecond), fenced(t, conn, schema, time.Minute)
	const key = "file:///a"

	_, _, err := write(paused, key, 1)
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder, "no lease, no write")
	epoch, err := paused.Acquire(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), epoch, "a lease nobody held starts at 1")
	_, ok, err := write(paused, key, 1)
	require.NoError(t, err, "its lease expired, but nobody took it")
	require.True(t, ok)

	took, err := taker.Acquire(ctx, key)
	require.NoError(t, err, "an expired lease can be taken")
	assert.Greater(t, took, epoch, "taking it over raises the epoch")

	_, ok, err = write(paused, key, 2)
	var lerr *pgledger.LeaseError
	require.ErrorAs(t, err, &lerr, "the fence refuses the old holder")
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder)
	assert.Equal(t, pgledger.LeaseError{Key: key, Worker: paused.Worker(), Epoch: epoch}, *lerr)
	assert.False(t, ok)
	got, err := taker.Load(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), got.Revision, "nothing written")
	requireNumbered(t, taker, 1)
	assert.NotContains(t, paused.Owned(), key, "a refused write forgets the lease")

	_, ok, err = write(taker, key, 2)
	require.NoError(t, err)
	require.True(t, ok, "the new holder writes")
	requireNumbered(t, taker, 2)
}

// Renew keeps what nobody took and reports what was taken.
func TestLeaseRenewReportsLost(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	paused, taker := fenced(t, conn, schema, time.Microsecond), fenced(t, conn, schema, time.Minute)
	for _, k := range []string{"file:///a", "file:///b"} {
		_, err := paused.Acquire(ctx, k)
		require.NoError(t, err)
	}
	_, err := taker.Acquire(ctx, "file:///b")
	require.NoError(t, err)
	lost, err := paused.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"file:///b"}, lost)
	assert.Equal(t, map[string]uint64{"file:///a": 1}, paused.Owned())
	_, ok, err := write(paused, "file:///a", 1)
	require.NoError(t, err)
	assert.True(t, ok)
}

// A lease held and renewed is refused to others; its holder acquiring it
// again keeps its epoch; a released lease is taken at a higher epoch.
func TestLeaseHeld(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Minute), fenced(t, conn, schema, time.Minute)
	const key = "file:///a"
	epoch, err := a.Acquire(ctx, key)
	require.NoError(t, err)
	_, err = b.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld)
	again, err := a.Acquire(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, epoch, again, "extending a lease keeps its epoch")

	require.NoError(t, a.Release(ctx, key))
	_, _, err = write(a, key, 1)
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder, "released, so fenced")
	took, err := b.Acquire(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, epoch+1, took)
	_, err = a.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld)
}

// A takeover waits for a write of the old holder that is in its
// transaction, and every write after it is refused: the lease check and
// the write are one step.
func TestLeaseTakeoverWaitsForWrite(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	paused, taker := fenced(t, conn, schema, time.Microsecond), fenced(t, conn, schema, time.Minute)
	const key = "file:///a"
	_, err := paused.Acquire(ctx, key)
	require.NoError(t, err)

	// Hold the write inside its transaction, after its lease check.
	holder, watcher := admin(t, paused), admin(t, paused)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT FROM "+schemaTable(schema, "outbox_meta")+" FOR UPDATE")
	require.NoError(t, err)
	var holderPID int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holderPID))
	wrote := make(chan error, 1)
	go func() {
		_, ok, err := write(paused, key, 1)
		if err == nil && !ok {
			err = fmt.Errorf("not stored")
		}
		wrote <- err
	}()
	writer := waitForBackend(t, watcher, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", holderPID)

	took := make(chan error, 1)
	go func() {
		_, err := taker.Acquire(ctx, key)
		took <- err
	}()
	waitForBackend(t, watcher, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", writer)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-wrote, "the write that held the lease commits")
	require.NoError(t, <-took, "then the takeover")
	_, _, err = write(paused, key, 2)
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder)
}

func TestMembers(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Minute), fenced(t, conn, schema, time.Minute)
	for _, l := range []*pgledger.Ledger{a, b} {
		_, err := l.Renew(ctx)
		require.NoError(t, err)
	}
	members, err := a.Members(ctx)
	require.NoError(t, err)
	want := []uuid.UUID{a.Worker(), b.Worker()}
	slices.SortFunc(want, func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	assert.Equal(t, want, members)

	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("file:///docs/%d.md", i)
	}
	mineA, err := a.Assigned(ctx, keys)
	require.NoError(t, err)
	mineB, err := b.Assigned(ctx, keys)
	require.NoError(t, err)
	assert.ElementsMatch(t, keys, append(slices.Clone(mineA), mineB...), "every key to exactly one member")
	assert.NotEmpty(t, mineA)
	assert.NotEmpty(t, mineB)

	require.NoError(t, b.Leave(ctx))
	members, err = a.Members(ctx)
	require.NoError(t, err)
	assert.Equal(t, []uuid.UUID{a.Worker()}, members)
	mineA, err = a.Assigned(ctx, keys)
	require.NoError(t, err)
	assert.Equal(t, keys, mineA, "the keys of a member that left go to those left")
}

// Rendezvous assignment moves few keys when membership changes: a member
// that joins takes about its share, all from the others; one that leaves
// gives away only its own.
func TestAssignMovesFewKeys(t *testing.T) {
	members := make([]uuid.UUID, 6)
	for i := range members {
		members[i] = uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "worker-%d", i))
	}
	const keys = 6000
	assign := func(ms []uuid.UUID) map[string]uuid.UUID {
		out := map[string]uuid.UUID{}
		for i := range keys {
			k := fmt.Sprintf("file:///docs/%d.md", i)
			m, ok := pgledger.Assign(k, ms)
			require.True(t, ok)
			out[k] = m
		}
		return out
	}
	before, after := assign(members[:5]), assign(members)
	moved := 0
	for k, m := range after {
		if m != before[k] {
			moved++
			require.Equal(t, members[5], m, "a key moves only to the member that joined")
		}
	}
	assert.InDelta(t, keys/6, moved, keys/6*0.15, "the new member takes about its share")

	gone := after
	left := assign(slices.Delete(slices.Clone(members), 2, 3))
	for k, m := range left {
		if gone[k] != members[2] {
			require.Equal(t, gone[k], m, "only the keys of the member that left move")
		}
	}
	_, ok := pgledger.Assign("file:///a", nil)
	assert.False(t, ok)
}

// AcquireAll takes, in one statement, what is free, expired or already
// this worker's (keeping its epoch), and leaves out what another worker
// holds; ReleaseAll hands back what it holds at the epochs it took.
func TestLeaseAcquireAllAndReleaseAll(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Minute), fenced(t, conn, schema, time.Minute)
	_, err := b.Acquire(ctx, "file:///held")
	require.NoError(t, err)
	first, err := a.AcquireAll(ctx, []string{"file:///x", "file:///y"})
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{"file:///x": 1, "file:///y": 1}, first)

	got, err := a.AcquireAll(ctx, []string{"file:///x", "file:///held", "file:///z", "file:///z"})
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{"file:///x": 1, "file:///z": 1}, got,
		"its own lease keeps its epoch; another worker's is left out")
	assert.Equal(t, map[string]uint64{"file:///x": 1, "file:///y": 1, "file:///z": 1}, a.Owned())

	require.NoError(t, a.ReleaseAll(ctx, []string{"file:///x", "file:///y", "file:///held"}))
	assert.Equal(t, map[string]uint64{"file:///z": 1}, a.Owned())
	_, _, err = write(a, "file:///x", 1)
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder, "a released lease fences its old holder")

	taken, err := b.AcquireAll(ctx, []string{"file:///x", "file:///y", "file:///z"})
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{"file:///x": 2, "file:///y": 2}, taken,
		"released leases are taken at their epoch plus one; the one still held is not")
	_, held := b.Owned()["file:///held"]
	assert.True(t, held, "releasing a key this worker does not hold touches nothing")

	leases, err := a.Leases(ctx)
	require.NoError(t, err)
	assert.Len(t, leases, 4)
	assert.Equal(t, pgledger.Lease{Owner: b.Worker(), Epoch: 2, ExpiresAt: leases["file:///x"].ExpiresAt, Live: true}, leases["file:///x"])
	assert.Equal(t, a.Worker(), leases["file:///z"].Owner)
	assert.True(t, leases["file:///z"].Live)
	require.NoError(t, a.ReleaseAll(ctx, []string{"file:///z"}))
	leases, err = b.Leases(ctx)
	require.NoError(t, err)
	assert.Equal(t, pgledger.Lease{Owner: a.Worker(), Epoch: 1}, leases["file:///z"], "released: expired at -infinity, not live")
}
