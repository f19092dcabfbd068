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

// A user runs workers with Shards on one fenced PostgreSQL ledger. Worker A
// is paused past its TTL (its membership and its lease of K expire) and
// worker B, to which K is now assigned, takes K's lease. When A runs again,
// a notification of K arrives before A's next Renew: A's read of K is
// refused by the fence (ErrNotLeaseholder), and that refusal makes the
// ledger forget A's lease of K locally. From then on Renew never reports K
// as lost (it is no longer in Owned), and the round only lets go of keys in
// Owned, so A's Shard never lets K go: A's client keeps K subscribed at the
// server and reads it on every change, each read refused, for ever.
// DESIGN.md: "A worker that was paused past its TTL finds, when it
// resumes, its writes refused and its leases gone, and lets them go."
func TestBreak15ShardNeverLetsGoAURIWhoseLeaseWasLostByARefusedRead(t *testing.T) {
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

	letGo := waitFor(3*time.Second, func() bool { return !srv.Subscribed(key) })
	require.True(t, letGo && dropped() > 0,
		"A never let K go after its lease was taken: still subscribed at the server (%v), OnChange(K, false) calls %d, "+
			"its reads of K refused by the fence %d time(s) in all",
		srv.Subscribed(key), dropped(), r.refusals())
}
