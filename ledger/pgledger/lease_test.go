package pgledger_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
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
	return l.CompareAndSwap(ctx, key, rev-1, record(key, rev), []ledger.OutboxEntry{entry(key, rev)})
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

// A worker shutting down lets its leases go with a context that already
// ended (or the database call fails): Release reports the error, and a
// retried Release that returns nil has let the lease go, so another worker
// can take it, rather than the lease staying held for its whole TTL.
func TestReleaseThatFailedCanBeRetried(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w, other := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const key = "file:///a"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, w.Release(done, key), "the release did not happen")

	require.NoError(t, w.Release(ctx, key), "retrying the release")
	_, err = other.Acquire(ctx, key)
	require.NoError(t, err, "a Release retried until it returned nil must have let the lease go; it is held for the whole TTL instead")
}

// The same failed Release, not retried: the worker that still holds the
// lease in the database can take it again, rather than being refused as if
// another worker held it.
func TestReleaseThatFailedLeavesTheLeaseToItsOwnWorker(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	const key = "file:///a"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, w.Release(done, key))

	_, err = w.Acquire(ctx, key)
	require.NoError(t, err, "the worker that still holds the lease in the database cannot take it again")
}

// A Ledger is "safe for concurrent use". One worker calls Acquire(K) (a
// round, or any caller extending a lease it holds) while another of its
// goroutines calls Release(K) (a failed subscribe handing K back, a
// shutdown). Whichever order the database applies them in, the two calls
// end in a state some order of them produces: a lease released in the
// database is never still believed held (in Owned), where another worker
// would take it while this one renews it.
//
// Deterministic: the test holds K's row locked, so the acquire waits on it
// first and the release behind it; PostgreSQL grants the row in that order.
func TestAcquireRacingReleaseLeavesNoReleasedLeaseBelievedHeld(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	other := fenced(t, conn, schema, time.Hour)
	const key = "file:///k"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	watcher, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { watcher.Close(context.Background()) })
	leases := schemaTable(schema, "leases")

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+leases+" WHERE key = $1 FOR UPDATE", key)
	require.NoError(t, err)

	waiting := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var c int
			require.NoError(t, watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", schema).Scan(&c))
			if c >= n {
				return
			}
		}
		t.Fatalf("fewer than %d statements wait on the row", n)
	}
	acquired := make(chan error, 1)
	go func() { _, err := w.Acquire(ctx, key); acquired <- err }()
	waiting(1)
	released := make(chan error, 1)
	go func() { released <- w.Release(ctx, key) }()
	waiting(2)
	require.NoError(t, tx.Commit(ctx))
	for _, ch := range []chan error{acquired, released} {
		select {
		case err := <-ch:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a lease call did not return")
		}
	}

	var expired bool
	require.NoError(t, db.QueryRow(ctx, "SELECT expires_at <= now() FROM "+leases+" WHERE key = $1", key).Scan(&expired))
	epoch, believed := w.Owned()[key]
	took, errOther := other.Acquire(ctx, key)
	require.False(t, expired && believed,
		"the lease is released in the database (another worker took it at epoch %d, err %v), yet the worker still "+
			"believes it holds it at epoch %d", took, errOther, epoch)
}

// A Shard renews on a goroutine of its own while its round hands keys over
// (releases of the keys now assigned elsewhere). A Release that lands
// while a Renew is under way (after it noted which leases it holds, before
// it renews them) stays released: the renew does not extend it by a whole
// TTL for a worker that no longer believes it holds it, and the worker the
// key was handed to takes it at once.
//
// Deterministic: the test holds the releasing worker's members row locked,
// so Renew's heartbeat waits inside its transaction after Renew noted what
// it holds; the Release runs meanwhile on another connection.
func TestRenewNeverRevivesALeaseReleasedMeanwhile(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	other := fenced(t, conn, schema, time.Hour)
	const key = "file:///handed-over"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)
	_, err = w.Renew(ctx) // w's members row exists
	require.NoError(t, err)

	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	killer, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { killer.Close(context.Background()) })

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+schemaTable(schema, "members")+" WHERE worker = $1 FOR UPDATE", w.Worker())
	require.NoError(t, err)
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))

	renewed := make(chan error, 1)
	var lost []string
	go func() {
		var err error
		lost, err = w.Renew(ctx)
		renewed <- err
	}()
	// Renew copied Owned and waits on its heartbeat.
	waitForBackend(t, killer, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", holder)

	require.NoError(t, w.Release(ctx, key), "the round hands the key over")
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-renewed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Renew did not return")
	}
	_, believed := w.Owned()[key]
	t.Logf("after Release and the racing Renew: w believes it holds the key: %v; Renew reported lost: %v", believed, lost)

	var expired bool
	require.NoError(t, db.QueryRow(ctx, "SELECT expires_at <= now() FROM "+schemaTable(schema, "leases")+" WHERE key = $1", key).Scan(&expired))

	_, errOther := other.Acquire(ctx, key)
	_, errSelf := w.Acquire(ctx, key)
	require.True(t, expired && errOther == nil,
		"Release returned nil, yet the lease is held again in the database (expired: %v) by a worker that does not "+
			"believe it holds it (in Owned: %v): the worker it was handed to is refused: %v; the releasing worker "+
			"itself is refused too: %v", expired, believed, errOther, errSelf)
}

// Two workers take new keys at once (a Shard builds its chunk from a map,
// so the order of the keys it passes is random): AcquireAll([a, m, b]) on
// one, AcquireAll([b, m, a]) on the other, while a third transaction still
// holds m uncommitted. The docs promise that "every statement that locks
// many lease rows or records locks them in key order, ... so none waits on
// another in a circle", keys nobody holds yet included: neither call fails
// with "deadlock detected" (SQLSTATE 40P01).
//
// Deterministic: the test waits, in pg_stat_activity, for both workers to
// queue on the third transaction before ending it.
func TestAcquireAllOfNewKeysInAnyOrderNeverDeadlocks(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w1 := fenced(t, conn, schema, time.Hour)
	w2 := fenced(t, conn, schema, time.Hour)
	const a, m, b = "file:///a", "file:///m", "file:///b"

	holder, watcher := admin(t, w1), admin(t, w1)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "INSERT INTO "+schemaTable(schema, "leases")+
		" (key, owner, epoch, expires_at) VALUES ($1, $2, 1, now() + interval '1 hour')", m, uuid.New())
	require.NoError(t, err)

	errs := make(chan error, 2)
	go func() { _, err := w1.AcquireAll(ctx, []string{a, m, b}); errs <- err }()
	waitLockWaiters(t, watcher, schema, "", 1)
	go func() { _, err := w2.AcquireAll(ctx, []string{b, m, a}); errs <- err }()
	waitLockWaiters(t, watcher, schema, "", 2)
	require.NoError(t, tx.Rollback(ctx)) // m is free: the third worker gave up

	for range 2 {
		select {
		case err := <-errs:
			require.NoError(t, err, "two workers taking free keys must never deadlock")
		case <-time.After(30 * time.Second):
			t.Fatal("an AcquireAll did not return")
		}
	}
}

// AcquireAll takes the rows that are takeable when it reads them; a row may
// become takeable in between (its holder's liveness session ended, or its
// lease expired) while that holder, still alive, Renews its own rows. Every
// row of the keys is locked in key order, takeable or not, so the two
// never wait on each other in a circle: neither fails with "deadlock
// detected", the renewal does not fail and its keys do not expire.
//
// Deterministic: worker A holds 3, 1, 2 (taken in that order). B's
// AcquireAll([3, 1, z]) reads 1 and 3 as A's live leases and queues on z
// (takeable, held by the test). A's liveness session is ended. A renews: it
// locks 1 and queues on 2 (held by the test). The test lets z go, then 2:
// in the order that would close a circle if AcquireAll locked the rows that
// turned takeable in any other order than key order.
func TestRenewAndAcquireAllNeverDeadlockOnLeasesThatTurnedTakeable(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const k1, k2, k3, z = "file:///1", "file:///2", "file:///3", "file:///z"
	leases := schemaTable(schema, "leases")
	_, err := a.Renew(ctx) // a member, its liveness lock recorded
	require.NoError(t, err)
	for _, k := range []string{k3, k1, k2} {
		_, err = a.Acquire(ctx, k)
		require.NoError(t, err)
	}

	watcher := admin(t, a)
	_, err = watcher.Exec(ctx, "INSERT INTO "+leases+" (key, owner, epoch, expires_at) VALUES ($1, $2, 1, now() - interval '1 hour')", z, uuid.New())
	require.NoError(t, err)
	hold := func(key string) pgx.Tx {
		c := admin(t, a)
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, "SELECT FROM "+leases+" WHERE key = $1 FOR UPDATE", key)
		require.NoError(t, err)
		return tx
	}

	holdZ := hold(z)
	acquired := make(chan error, 1)
	go func() { _, err := b.AcquireAll(ctx, []string{k3, k1, z}); acquired <- err }()
	waitLockWaiters(t, watcher, schema, "ANY($1) ORDER BY key", 1) // B's lock of every row of its keys, on z

	// A's liveness session ends; A lives on and renews.
	var ended int
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(pg_terminate_backend(k.pid)) FROM pg_locks AS k
		JOIN `+schemaTable(schema, "members")+` AS m
		ON k.classid = (m.alive_lock >> 32)::oid AND k.objid = (m.alive_lock & 4294967295)::oid
		WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1 AND m.worker = $1`, a.Worker()).Scan(&ended))
	require.Equal(t, 1, ended)
	hold2 := hold(k2)
	renewed := make(chan error, 1)
	go func() { _, err := a.Renew(ctx); renewed <- err }()
	waitLockWaiters(t, watcher, schema, "AND owner = $2 ORDER BY key", 1) // A's lockOwn, on 1 (B holds it)

	// B already holds every row its acquire updates (1 and 3, taken in key
	// order before z), so no row turns up for it out of order.
	require.NoError(t, holdZ.Rollback(ctx))
	require.NoError(t, hold2.Rollback(ctx))

	for range 2 {
		select {
		case err := <-acquired:
			require.NoError(t, err, "AcquireAll must not deadlock")
		case err := <-renewed:
			require.NoError(t, err, "Renew must not deadlock")
		case <-time.After(30 * time.Second):
			t.Fatal("a lease call did not return")
		}
	}
}
