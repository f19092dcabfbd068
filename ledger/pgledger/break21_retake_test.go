package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// The same hole as TestBreak21KeyMovedAwayAndBackIsNeverReadAgain, reached
// without the Shard's own release, so that reordering the release and the
// unsubscribe would not close it. Worker A's Shard holds K (subscribed,
// read). A is paused past K's lease; worker B takes K (AcquireAll) but its
// Client's Subscribe fails (its server connection is down, say), so B's
// take hands the lease straight back (Release) without writing anything.
// A runs again: K changes, A's read is refused by the fence, and A's round
// lets K go: its Unsubscribe finds no lease (BeginClose refused, Fenced),
// so K's record stays ACTIVE in A's session with no close epoch while the
// client drops its watch and unsubscribes at the server. K is assigned to
// A (B is not a member), so A's next round acquires K again (epoch raised)
// and Subscribes: the engine says "already subscribed", the client starts
// no watch, subscribes nothing and reads nothing, and the Shard counts K as
// taken and renews its lease for ever. K's next change is never read.
// Property violated: a URI assigned to a live worker is eventually
// subscribed and read by it; a Client whose Subscribe fails must not leave
// a URI unread for ever.
func TestBreak21KeyRetakenAfterAFailedTakeElsewhereIsNeverReadAgain(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	const key = "file:///docs/k.md"
	r := newShardRig(t, conn, schema, pgledger.LeaseOptions{TTL: time.Minute}, key,
		mcpsync.ClientOptions{CoalesceWindow: -1, PingEvery: -1, RevalidateEvery: 200 * time.Millisecond})
	lb := fenced(t, conn, schema, time.Minute)
	r.run(t)
	ctx, srv, e, la := r.ctx, r.srv, r.engine, r.ledger
	count := func() int { return len(r.changed()) }
	lookup := r.text
	require.True(t, waitFor(10*time.Second, func() bool { return count() == 1 && lookup() == "v1" }), "A takes and reads K")

	// A paused past K's lease; B takes it, its subscribe fails, it hands
	// the lease back.
	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	require.True(t, waitFor(10*time.Second, func() bool {
		_, err := db.Exec(ctx, "UPDATE "+schemaTable(schema, "leases")+" SET expires_at = now() - interval '1 hour' WHERE key = $1", key)
		require.NoError(t, err)
		_, err = lb.Acquire(ctx, key)
		return err == nil
	}), "B takes K")
	require.NoError(t, lb.Release(ctx, key))

	// A runs again: K changes, A's read is refused, A lets K go and takes
	// it back.
	srv.Set(key, "text/markdown", "v2")
	require.True(t, waitFor(10*time.Second, func() bool { return count() >= 3 }), "A lets K go and takes it again: OnChange %v", r.changed())
	_, held := la.Owned()[key]
	require.True(t, held)

	srv.Set(key, "text/markdown", "v3")
	read := waitFor(10*time.Second, func() bool { return lookup() == "v3" })
	sub, _ := e.Subscription(key)
	require.True(t, read,
		"A took K back (lease held, OnChange %v) but never reads it again: subscribed at the server: %v, subscription %s "+
			"generation %d, copy %q after 10 s of revalidation every 200 ms; reads refused before: %d",
		r.changed(), srv.Subscribed(key), sub.State, sub.SubscriptionGeneration, lookup(), r.refusals())
}
