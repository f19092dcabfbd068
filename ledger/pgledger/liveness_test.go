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
