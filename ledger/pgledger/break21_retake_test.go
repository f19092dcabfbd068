package pgledger_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
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
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const key = "file:///docs/k.md"

	la, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { la.Close() })
	lb := fenced(t, conn, schema, time.Minute)

	srv := mcpsynctest.NewServer(nil)
	srv.Set(key, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: la})
	require.NoError(t, err)
	var mu sync.Mutex
	refused := 0
	var changes []bool
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(hs.URL, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25",
		CoalesceWindow: -1, PingEvery: -1, RevalidateEvery: 200 * time.Millisecond,
		OnError: func(err error) {
			if errors.Is(err, mcpsync.ErrNotLeaseholder) {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	shard, err := pgledger.NewShard(la, c, &pgledger.ShardOptions{
		Every: 50 * time.Millisecond,
		URIs:  func(context.Context) ([]string, error) { return []string{key}, nil },
		OnChange: func(uri string, owned bool) {
			mu.Lock()
			changes = append(changes, owned)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = shard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(changes)
	}
	lookup := func() string {
		got, err := e.Lookup("user:indexer", key)
		if err != nil || len(got.Contents) == 0 {
			return ""
		}
		return got.Contents[0].Text
	}
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
	require.True(t, waitFor(10*time.Second, func() bool { return count() >= 3 }), "A lets K go and takes it again: OnChange %v", changes)
	_, held := la.Owned()[key]
	require.True(t, held)

	srv.Set(key, "text/markdown", "v3")
	read := waitFor(10*time.Second, func() bool { return lookup() == "v3" })
	sub, _ := e.Subscription(key)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, read,
		"A took K back (lease held, OnChange %v) but never reads it again: subscribed at the server: %v, subscription %s "+
			"generation %d, copy %q after 10 s of revalidation every 200 ms; reads refused before: %d",
		changes, srv.Subscribed(key), sub.State, sub.SubscriptionGeneration, lookup(), refused)
}
