package pgledger_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
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
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	a, b := uuid.New(), uuid.New()
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("file:///docs/%d.md", i)
		if m, _ := pgledger.Assign(key, []uuid.UUID{a, b}); m == b {
			break
		}
	}
	la, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema,
		Leases: &pgledger.LeaseOptions{Worker: a, TTL: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { la.Close() })

	srv := mcpsynctest.NewServer(nil)
	srv.Set(key, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: la})
	require.NoError(t, err)
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(hs.URL, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25",
		CoalesceWindow: -1, PingEvery: -1, RevalidateEvery: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	var mu sync.Mutex
	var changes []bool
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

	require.True(t, waitFor(10*time.Second, func() bool {
		got, err := e.Lookup("user:indexer", key)
		return count() == 1 && srv.Subscribed(key) && err == nil && got.Contents[0].Text == "v1"
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
	_, held := la.Owned()[key]
	require.True(t, held, "A holds K's lease again")

	srv.Set(key, "text/markdown", "v2")
	read := waitFor(10*time.Second, func() bool {
		got, err := e.Lookup("user:indexer", key)
		return err == nil && got.Contents[0].Text == "v2"
	})
	sub, _ := e.Subscription(key)
	got, _ := e.Lookup("user:indexer", key)
	text := ""
	if got.Contents != nil {
		text = got.Contents[0].Text
	}
	require.True(t, read,
		"A took K back (lease held, OnChange(K, true)) but never reads it again: subscribed at the server: %v, "+
			"subscription state %s generation %d, copy still %q after 10 s of revalidation every 200 ms",
		srv.Subscribed(key), sub.State, sub.SubscriptionGeneration, text)
}
