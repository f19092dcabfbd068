package pgledger_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// takeN is how many URIs BenchmarkShardTake's worker takes: a survivor's
// share of a killed worker's in BenchmarkTakeover.
const takeN = 170

// BenchmarkShardTake is the part of a takeover a worker does alone: one
// Shard, on a fresh fenced ledger, takes takeN URIs of an HTTP MCP server
// (lease, subscription generation, server subscribe, first read, accept).
// Its baseline subscribes to and reads the same URIs with a bare mcp-go
// client, as many at once, keeping nothing.
func BenchmarkShardTake(b *testing.B) {
	conn, _ := pgtest.Schema(b)
	_, uris, hs := docsServer(b, takeN)
	b.Run("baseline=mcp-go", func(b *testing.B) {
		for b.Loop() {
			ctx := b.Context()
			c, err := client.NewStreamableHttpClient(hs.URL)
			require.NoError(b, err)
			require.NoError(b, c.Start(ctx))
			_, err = c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: "2025-11-25"}})
			require.NoError(b, err)
			sem := make(chan struct{}, 16)
			var wg sync.WaitGroup
			for _, u := range uris {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					sub := mcp.SubscribeRequest{}
					sub.Params.URI = u
					read := mcp.ReadResourceRequest{}
					read.Params.URI = u
					if err := c.Subscribe(ctx, sub); err != nil {
						b.Error(err)
					}
					if _, err := c.ReadResource(ctx, read); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			c.Close()
		}
	})
	b.Run("shard", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			total += shardTake(b, conn, hs.URL, uris)
		}
		b.ReportMetric(float64(total.Microseconds())/float64(b.N)/takeN, "µs/uri")
	})
}

// shardTake starts a Shard on a fresh schema and returns how long it took
// to take every one of uris; the set-up and the tear-down are not timed.
func shardTake(b *testing.B, conn, url string, uris []string) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	_, schema := pgtest.Schema(b)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: shardTTL}})
	require.NoError(b, err)
	defer l.Close()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(b, err)
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(url, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25",
		CoalesceWindow: -1, ReconnectReads: 1e6, PingEvery: -1, RevalidateEvery: shardRevalidate,
	})
	require.NoError(b, err)
	defer c.Close()
	var took atomic.Int64
	done := make(chan struct{})
	shard, err := pgledger.NewShard(l, c, &pgledger.ShardOptions{
		Every: shardEvery,
		URIs:  func(context.Context) ([]string, error) { return uris, nil },
		OnChange: func(_ string, owned bool) {
			if owned && took.Add(1) == int64(len(uris)) {
				close(done)
			}
		},
	})
	require.NoError(b, err)
	stopped := make(chan struct{})
	b.StartTimer()
	start := time.Now()
	go func() { defer close(stopped); _ = shard.Run(ctx) }()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-stopped
	return elapsed
}
