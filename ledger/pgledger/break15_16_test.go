package pgledger_test

import (
	"context"
	"errors"
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
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	a, b := uuid.New(), uuid.New()
	// K: a URI that A holds while alone, and that goes to B once B joins.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("file:///docs/%d.md", i)
		if m, _ := pgledger.Assign(key, []uuid.UUID{a, b}); m == b {
			break
		}
	}
	// A long TTL: A's own renewals (every TTL/3) play no part in the test.
	open := func(w uuid.UUID) *pgledger.Ledger {
		l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema,
			Leases: &pgledger.LeaseOptions{Worker: w, TTL: time.Minute}})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l
	}
	la, lb := open(a), open(b)

	srv := mcpsynctest.NewServer(nil)
	srv.Set(key, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: la})
	require.NoError(t, err)
	var mu sync.Mutex
	refused, dropped := 0, 0
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(hs.URL, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25",
		CoalesceWindow: -1, PingEvery: -1,
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
			if !owned {
				mu.Lock()
				dropped++
				mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = shard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

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
	require.True(t, waitFor(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refused > 0
	}), "A's read of K is refused by the fence")
	// A's renewal: it is a member again (its heartbeat), as its renew
	// goroutine would make it.
	_, err = db.Exec(ctx, "UPDATE "+schemaTable(schema, "members")+" SET heartbeat_at = now() WHERE worker = $1", a)
	require.NoError(t, err)
	lost, err := la.Renew(ctx)
	require.NoError(t, err)
	t.Logf("A's Renew reports lost: %v (K is no longer in Owned: %v)", lost, la.Owned())

	letGo := waitFor(3*time.Second, func() bool { return !srv.Subscribed(key) })
	mu.Lock()
	refusedBefore := refused
	mu.Unlock()
	srv.Set(key, "text/markdown", "v3")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, letGo && dropped > 0,
		"A never let K go after its lease was taken: still subscribed at the server (%v), OnChange(K, false) calls %d, "+
			"the next change of K is still read by A and refused by the fence %d more time(s)",
		srv.Subscribed(key), dropped, refused-refusedBefore)
}
