package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A key that moves away and comes back quickly. Worker A's Shard holds K
// (subscribed, read). Worker B joins (its membership row appears) and K is
// now assigned to B, so A's round releases K (ReleaseAll) BEFORE
// unsubscribing it. The unsubscribe then finds the lease gone: the engine's
// BeginClose is refused (ErrNotLeaseholder), so the client only tells the
// server to stop and drops its watch, while K's record stays ACTIVE in A's
// session generation with no close epoch. B goes away before it takes K
// (it died, or left), so K is assigned to A again: A's round acquires K
// (epoch raised) and calls Subscribe, which the engine answers "already
// subscribed" (same session, open, no close epoch): the client neither
// subscribes at the server nor starts a revalidation watch nor reads. The
// Shard counts K as taken (OnChange(K, true)) and renews its lease for
// ever, but K is never read again: a change on the server is never seen.
// Property violated: a URI assigned to a live worker is eventually
// subscribed and read by it (no URI stays unread with its lease renewed
// for ever); also DESIGN.md "taking a lease raises the epoch and opens a
// new subscription generation".
func TestBreak21KeyMovedAwayAndBackIsNeverReadAgain(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := uuid.New(), uuid.New()
	key := keyAssignedTo(b, a, b)
	r := newShardRig(t, conn, schema, pgledger.LeaseOptions{Worker: a, TTL: time.Minute}, key,
		mcpsync.ClientOptions{CoalesceWindow: -1, PingEvery: -1, RevalidateEvery: 200 * time.Millisecond})
	r.run(t)
	ctx, srv, e := r.ctx, r.srv, r.engine
	count := func() int { return len(r.changed()) }

	require.True(t, waitFor(10*time.Second, func() bool {
		return count() == 1 && srv.Subscribed(key) && r.text() == "v1"
	}), "A takes and reads K")

	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	members := schemaTable(schema, "members")
	// B joins: K moves to B, and A lets it go.
	_, err = db.Exec(ctx, "INSERT INTO "+members+" (worker, heartbeat_at) VALUES ($1, now())", b)
	require.NoError(t, err)
	require.True(t, waitFor(10*time.Second, func() bool { return count() == 2 }), "A lets K go to B")
	// B goes away before it takes K: K comes back to A.
	_, err = db.Exec(ctx, "DELETE FROM "+members+" WHERE worker = $1", b)
	require.NoError(t, err)
	require.True(t, waitFor(10*time.Second, func() bool { return count() == 3 }), "A takes K again")
	_, held := r.ledger.Owned()[key]
	require.True(t, held, "A holds K's lease again")

	srv.Set(key, "text/markdown", "v2")
	read := waitFor(10*time.Second, func() bool { return r.text() == "v2" })
	sub, _ := e.Subscription(key)
	require.True(t, read,
		"A took K back (lease held, OnChange(K, true)) but never reads it again: subscribed at the server: %v, "+
			"subscription state %s generation %d, copy still %q after 10 s of revalidation every 200 ms",
		srv.Subscribed(key), sub.State, sub.SubscriptionGeneration, r.text())
}
