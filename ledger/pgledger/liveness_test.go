package pgledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A worker whose process ends without letting go (its ledger closed
// without Leave or Release, as a killed process's sessions end) is no
// member the moment PostgreSQL ends its sessions, and its leases are
// taken at once, long before their TTL.
func TestDeadWorkerIsGoneBeforeItsLeasesExpire(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a := fenced(t, conn, schema, time.Hour)
	b, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: time.Hour}})
	require.NoError(t, err)
	const key = "file:///docs/a.md"
	epoch, err := b.Acquire(ctx, key)
	require.NoError(t, err)
	for _, l := range []*pgledger.Ledger{a, b} {
		_, err := l.Renew(ctx)
		require.NoError(t, err)
	}
	members, err := a.Members(ctx)
	require.NoError(t, err)
	require.Len(t, members, 2)
	_, err = a.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld, "a live worker's lease is not taken")

	require.NoError(t, b.Close()) // no Leave, no Release: as if killed
	// Its session ends as its backend exits, a moment after Close: in
	// seconds, not in the lease's hour.
	eventually(t, 30*time.Second, "the dead worker is no member", func() bool {
		members, err = a.Members(ctx)
		require.NoError(t, err)
		return len(members) == 1
	})
	assert.Equal(t, []uuid.UUID{a.Worker()}, members)
	leases, err := a.Leases(ctx)
	require.NoError(t, err)
	assert.False(t, leases[key].Live, "the dead worker's lease is up for taking")
	taken, err := a.Acquire(ctx, key)
	require.NoError(t, err, "taken an hour before it expires")
	assert.Equal(t, epoch+1, taken)
}

// A worker whose liveness session was ended while it lives loses its
// leases to the others, and its writes are refused by their epochs; at
// its next Renew it is a member again.
func TestWorkerWhoseSessionEndedComesBack(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const key = "file:///docs/a.md"
	_, err := b.Acquire(ctx, key)
	require.NoError(t, err)
	for _, l := range []*pgledger.Ledger{a, b} {
		_, err := l.Renew(ctx)
		require.NoError(t, err)
	}
	killer := admin(t, a)
	held := func() int {
		var n int
		require.NoError(t, killer.QueryRow(ctx, `SELECT count(*) FROM pg_locks AS k
			JOIN `+schemaTable(schema, "members")+` AS m
			ON k.classid = (m.alive_lock >> 32)::oid AND k.objid = (m.alive_lock & 4294967295)::oid
			WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1`).Scan(&n))
		return n
	}
	require.Equal(t, 2, held(), "both workers hold their liveness locks")
	_, err = killer.Exec(ctx, `SELECT pg_terminate_backend(k.pid) FROM pg_locks AS k
		JOIN `+schemaTable(schema, "members")+` AS m
		ON k.classid = (m.alive_lock >> 32)::oid AND k.objid = (m.alive_lock & 4294967295)::oid
		WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1`)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "both liveness sessions ended", func() bool { return held() == 0 })
	_, err = a.Renew(ctx) // a locks anew; b has not yet
	require.NoError(t, err)
	_, err = a.Acquire(ctx, key)
	require.NoError(t, err, "b looked dead")
	_, _, err = write(b, key, 1)
	require.ErrorIs(t, err, pgledger.ErrNotLeaseholder, "b's write is refused by a's epoch")

	assert.NotContains(t, b.Owned(), key, "b let the lease go")
	_, err = b.Renew(ctx)
	require.NoError(t, err)
	members, err := a.Members(ctx)
	require.NoError(t, err)
	assert.Contains(t, members, b.Worker(), "b is a member again")
}

// endsAfterCheck is a context whose deadline passes right after Renew
// first looks at it: the caller's timeout ends while Renew is under way,
// as any per-call timeout (or Shard.Run's stop) may.
type endsAfterCheck struct {
	context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func (c *endsAfterCheck) Err() error {
	err := c.Context.Err()
	c.once.Do(c.cancel)
	return err
}

// A live worker holds a lease with an hour left and renews it. One Renew is
// given up on (its context ends) while it pings the liveness connection.
// A failed ping caused by the caller's context is no lost session: the
// worker stays live (its membership names a lock it holds), and no other
// worker takes its lease an hour early, so its writes are not refused
// with ErrNotLeaseholder though its process and its sessions are fine.
func TestRenewGivenUpOnKeepsTheWorkerLive(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w, other := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const key = "file:///docs/a.md"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)
	for _, l := range []*pgledger.Ledger{w, other} {
		_, err := l.Renew(ctx)
		require.NoError(t, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = w.Renew(&endsAfterCheck{Context: rctx, cancel: cancel})
	require.ErrorIs(t, err, context.Canceled, "the Renew given up on fails, as it may")

	members, err := other.Members(ctx)
	require.NoError(t, err)
	assert.Contains(t, members, w.Worker(), "a worker whose Renew was given up on is alive: its process and sessions are fine")
	_, err = other.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld, "the lease has an hour left and its holder lives")
}

// A worker keeps its identity across restarts (LeaseOptions.Worker, read
// from its configuration): its process was killed, and the new one opens
// the ledger under the same UUID, never two at once. The new process
// acquires a key (a fresh one, at epoch 1, an hour's TTL) before its first
// Renew, as Acquire allows (Assigned: "until its first Renew a worker is
// not a member, yet it is live"). The restarted worker counts as live from
// Open on: no other worker takes its brand-new lease, and its first writes
// are not refused.
func TestRestartedWorkerKeepsLeasesTakenBeforeItsFirstRenew(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	id := uuid.New()
	open := func() *pgledger.Ledger {
		l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema,
			Leases: &pgledger.LeaseOptions{Worker: id, TTL: time.Hour}})
		require.NoError(t, err)
		return l
	}
	before := open()
	_, err := before.Renew(ctx)
	require.NoError(t, err)
	require.NoError(t, before.Close()) // killed: its sessions end

	after := open() // the restarted process, same identity
	t.Cleanup(func() { require.NoError(t, after.Close()) })
	other := fenced(t, conn, schema, time.Hour)
	_, err = other.Renew(ctx)
	require.NoError(t, err)

	const key = "file:///docs/a.md"
	epoch, err := after.Acquire(ctx, key)
	require.NoError(t, err)
	require.Equal(t, uint64(1), epoch)

	leases, err := other.Leases(ctx)
	require.NoError(t, err)
	assert.True(t, leases[key].Live, "a lease just taken by a live worker, with an hour left, is live")
	took, err := other.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld, "another worker took the live worker's lease at epoch %d", took)
}
