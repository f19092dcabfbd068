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

// A take whose subscribe fails hands the lease back; when that release
// fails too (the connection was terminated), the worker holds the lease of
// a URI it never subscribed. Its Shard must subscribe it at a later round,
// not pass it over as already its own: otherwise the URI stays unread, its
// lease renewed for ever.
func TestShardSubscribesALeaseItHoldsButNeverRead(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	const key = "file:///docs/held.md"
	r := newShardRig(t, conn, schema, pgledger.LeaseOptions{TTL: time.Minute}, key, mcpsync.ClientOptions{PingEvery: -1})

	// The state a failed subscribe and a failed release leave behind.
	_, err := r.ledger.Acquire(r.ctx, key)
	require.NoError(t, err)

	r.run(t)
	// The server counts its read before the worker accepts it: wait for
	// the worker's copy.
	require.True(t, waitFor(10*time.Second, func() bool { return r.srv.Subscribed(key) && r.text() == "v1" }),
		"the URI whose lease the worker held was never subscribed nor read")
}

// A user runs workers with Shards on one fenced PostgreSQL ledger. Worker A
// is paused past its TTL (its membership and its lease of K expire) and
// worker B, to which K is now assigned, takes K's lease. When A runs again,
// a notification of K arrives before A's next Renew, and A's read of K is
// refused by the fence (ErrNotLeaseholder). A's Shard still lets K go: it
// unsubscribes K at the server and tells OnChange(K, false), rather than
// keeping K subscribed and reading it, every read refused, for ever.
// DESIGN.md: "A worker that was paused past its TTL finds, when it resumes,
// its writes refused and its leases gone, and lets them go."
func TestShardLetsGoAURIWhoseLeaseWasLostByARefusedRead(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := uuid.New(), uuid.New()
	// K: a URI that A holds while alone, and that goes to B once B joins.
	key := keyAssignedTo(b, a, b)
	// A long TTL: A's own renewals (every TTL/3) play no part in the test.
	r := newShardRig(t, conn, schema, pgledger.LeaseOptions{Worker: a, TTL: time.Minute}, key,
		mcpsync.ClientOptions{CoalesceWindow: -1, PingEvery: -1})
	lb, err := pgledger.Open(r.ctx, conn, &pgledger.Options{Schema: schema,
		Leases: &pgledger.LeaseOptions{Worker: b, TTL: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { lb.Close() })
	r.run(t)
	ctx, srv, la := r.ctx, r.srv, r.ledger
	dropped := func() int {
		n := 0
		for _, owned := range r.changed() {
			if !owned {
				n++
			}
		}
		return n
	}

	require.True(t, waitFor(10*time.Second, func() bool {
		_, ok := la.Owned()[key]
		return ok && srv.Subscribed(key) && srv.Reads(key) > 0
	}), "A takes %s", key)

	// A is paused past its TTL: its membership and its lease expire.
	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	_, err = db.Exec(ctx, "UPDATE "+schemaTable(schema, "members")+" SET heartbeat_at = now() - interval '1 hour' WHERE worker = $1", a)
	require.NoError(t, err)
	_, err = db.Exec(ctx, "UPDATE "+schemaTable(schema, "leases")+" SET expires_at = now() - interval '1 hour' WHERE key = $1", key)
	require.NoError(t, err)
	// B joins and takes K, which is assigned to it.
	_, err = lb.Renew(ctx)
	require.NoError(t, err)
	_, err = lb.Acquire(ctx, key)
	require.NoError(t, err)

	// A runs again: K changes before A's next renewal.
	srv.Set(key, "text/markdown", "v2")
	require.True(t, waitFor(10*time.Second, func() bool { return r.refusals() > 0 }), "A's read of K is refused by the fence")
	// A's renewal: it is a member again (its heartbeat), as its renew
	// goroutine would make it.
	_, err = db.Exec(ctx, "UPDATE "+schemaTable(schema, "members")+" SET heartbeat_at = now() WHERE worker = $1", a)
	require.NoError(t, err)
	lost, err := la.Renew(ctx)
	require.NoError(t, err)
	t.Logf("A's Renew reports lost: %v (K is no longer in Owned: %v)", lost, la.Owned())

	// Let go at the server, then told: the Shard's OnChange follows its
	// Unsubscribe's return.
	letGo := waitFor(3*time.Second, func() bool { return !srv.Subscribed(key) && dropped() > 0 })
	require.True(t, letGo,
		"A never let K go after its lease was taken: still subscribed at the server (%v), OnChange(K, false) calls %d, "+
			"its reads of K refused by the fence %d time(s) in all",
		srv.Subscribed(key), dropped(), r.refusals())
}

// A key that moves away and comes back quickly. Worker A's Shard holds K
// (subscribed, read). Worker B joins and K is assigned to B, so A lets K
// go; B goes away before it takes K (it died, or left), so K is assigned to
// A again and A takes it back (epoch raised). A URI assigned to a live
// worker is eventually subscribed and read by it: a change of K on the
// server is read by A within seconds, rather than K staying unread with its
// lease renewed for ever (DESIGN.md: "taking a lease raises the epoch and
// opens a new subscription generation").
func TestKeyMovedAwayAndBackIsReadAgain(t *testing.T) {
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

// The same, reached without the Shard's own release. Worker A's Shard holds
// K (subscribed, read). A is paused past K's lease; worker B takes K but
// its Client's Subscribe fails (its server connection is down, say), so B
// hands the lease straight back without writing anything. A runs again: K
// changes, A's read is refused by the fence, A lets K go and, K being
// assigned to A, takes it back (epoch raised). K's next change is read by
// A: a Client whose Subscribe failed elsewhere never leaves a URI unread
// for ever.
func TestKeyRetakenAfterAFailedTakeElsewhereIsReadAgain(t *testing.T) {
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
