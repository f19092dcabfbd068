package pgledger_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A worker keeps its identity across restarts (LeaseOptions.Worker, read
// from its configuration): its process was killed, and the new one opens
// the ledger under the same UUID - never two at once. The new process
// acquires a key (a fresh one, at epoch 1, an hour's TTL) before its first
// Renew, as Acquire allows: Assigned itself says "until its first Renew a
// worker is not a member, yet it is live". But Open takes the new
// liveness lock without recording it, so the membership row still names
// the dead process's lock, which nobody holds: gone() lists the live
// worker, and another worker takes its brand-new lease at once. What a
// user sees: right after a restart, Acquire succeeds and the key is gone
// to another worker a moment later, the restarted worker's first writes
// refused with ErrNotLeaseholder, though it is alive and its lease has an
// hour left.
func TestBreak23RestartedWorkerLosesLeasesTakenBeforeItsFirstRenew(t *testing.T) {
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
