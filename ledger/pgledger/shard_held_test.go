package pgledger_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A take whose subscribe fails hands the lease back; when that release
// fails too (the connection was terminated), the worker holds the lease of
// a URI it never subscribed. Its Shard must subscribe it at a later round,
// not pass it over as already its own: otherwise the URI stays unread, its
// lease renewed for ever.
func TestShardSubscribesALeaseItHoldsButNeverRead(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const key = "file:///docs/held.md"
	srv := mcpsynctest.NewServer(nil)
	srv.Set(key, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(hs.URL, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25", PingEvery: -1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	// The state a failed subscribe and a failed release leave behind.
	_, err = l.Acquire(ctx, key)
	require.NoError(t, err)

	shard, err := pgledger.NewShard(l, c, &pgledger.ShardOptions{
		Every: 50 * time.Millisecond,
		URIs:  func(context.Context) ([]string, error) { return []string{key}, nil },
	})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = shard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	require.True(t, waitFor(10*time.Second, func() bool { return srv.Subscribed(key) && srv.Reads(key) > 0 }),
		"the URI whose lease the worker held was never subscribed nor read")
	got, err := e.Lookup("user:indexer", key)
	require.NoError(t, err)
	require.Equal(t, "v1", got.Contents[0].Text)
}
