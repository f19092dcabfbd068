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
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// shardRig is one worker of a fenced ledger, in the test's process: its
// ledger, engine and client, connected to an HTTP MCP server that serves
// key at "v1", and a Shard (rounds every 50 ms) that keeps key. It counts
// the lease refusals the client reports and every OnChange of the Shard.
type shardRig struct {
	ledger *pgledger.Ledger
	engine *mcpsync.Engine
	srv    *mcpsynctest.Server
	key    string
	ctx    context.Context
	stop   context.CancelFunc
	shard  *pgledger.Shard

	mu      sync.Mutex // protects refused and changes
	refused int
	changes []bool // OnChange's owned, in order
}

// newShardRig opens the worker's ledger with lease and connects its client
// with opts (Engine, Subject, NoResume, ProtocolVersion and OnError are
// set here); run starts its Shard.
func newShardRig(t *testing.T, conn, schema string, lease pgledger.LeaseOptions, key string, opts mcpsync.ClientOptions) *shardRig {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	r := &shardRig{key: key, ctx: ctx, stop: cancel, srv: mcpsynctest.NewServer(nil)}
	var err error
	r.ledger, err = pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &lease})
	require.NoError(t, err)
	t.Cleanup(func() { r.ledger.Close() })
	r.srv.Set(key, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(r.srv.MCPServer()))
	t.Cleanup(hs.Close)
	r.engine, err = mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: r.ledger})
	require.NoError(t, err)
	opts.Engine, opts.Subject, opts.NoResume, opts.ProtocolVersion = r.engine, "user:indexer", true, "2025-11-25"
	opts.OnError = func(err error) {
		if errors.Is(err, ledger.ErrNotLeaseholder) {
			r.mu.Lock()
			r.refused++
			r.mu.Unlock()
		}
	}
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(hs.URL, nil), &opts)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	r.shard, err = pgledger.NewShard(r.ledger, c, &pgledger.ShardOptions{
		Every: 50 * time.Millisecond,
		URIs:  func(context.Context) ([]string, error) { return []string{key}, nil },
		OnChange: func(_ string, owned bool) {
			r.mu.Lock()
			r.changes = append(r.changes, owned)
			r.mu.Unlock()
		},
	})
	require.NoError(t, err)
	return r
}

// run starts the Shard until the test ends.
func (r *shardRig) run(t *testing.T) {
	done := make(chan struct{})
	go func() { defer close(done); _ = r.shard.Run(r.ctx) }()
	t.Cleanup(func() { r.stop(); <-done })
}

// refusals returns how many lease refusals the client reported.
func (r *shardRig) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// changed returns the Shard's OnChange calls so far: owned, in order.
func (r *shardRig) changed() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.changes...)
}

// text returns the key's text as the worker's engine serves it, "" when
// it serves none.
func (r *shardRig) text() string {
	got, err := r.engine.Lookup("user:indexer", r.key)
	if err != nil || len(got.Contents) == 0 {
		return ""
	}
	return got.Contents[0].Text
}

// keyAssignedTo returns the first of file:///docs/0.md, 1.md, … that
// Assign gives to want among members.
func keyAssignedTo(want uuid.UUID, members ...uuid.UUID) string {
	for i := 0; ; i++ {
		key := fmt.Sprintf("file:///docs/%d.md", i)
		if m, _ := pgledger.Assign(key, members); m == want {
			return key
		}
	}
}
