package interop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

const alice = "user:alice"

// bound is the longest any single step may take: a guard against hangs, not
// a timing assertion. The slowest step waits for a server's own periodic
// notification (every 10 s in server-everything 2025.9.25).
const bound = 25 * time.Second

// stdioServer starts a server process per connection over stdio and keeps the
// newest transport, so a test can call a server tool on the same session.
type stdioServer struct {
	command string
	env     []string
	args    []string

	mu sync.Mutex // protects tr
	tr *transport.Stdio
}

func (s *stdioServer) dial(context.Context) (transport.Interface, error) {
	tr := transport.NewStdio(s.command, s.env, s.args...)
	s.mu.Lock()
	s.tr = tr
	s.mu.Unlock()
	return tr, nil
}

var rawID atomic.Int64

// callTool calls a server tool on the current session, beside the client:
// mcpsync has no tool API, and the call must reach the same server process.
// Its ids are strings, so they never collide with mcp-go's numeric ones.
func (s *stdioServer) callTool(t *testing.T, name string, args map[string]any) {
	t.Helper()
	s.mu.Lock()
	tr := s.tr
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	resp, err := tr.SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION,
		ID:      mcp.NewRequestId(fmt.Sprintf("interop-%d", rawID.Add(1))),
		Method:  string(mcp.MethodToolsCall),
		Params:  map[string]any{"name": name, "arguments": args},
	})
	require.NoError(t, err)
	require.Nil(t, resp.Error, "tools/call %s", name)
}

// connect opens a client whose fenced reads are reported on outcomes, and
// closes it when the test ends.
func connect(t *testing.T, dial mcpsync.Dialer, opts mcpsync.ClientOptions) (*mcpsync.Client, chan mcpsync.Outcome) {
	t.Helper()
	outcomes := make(chan mcpsync.Outcome, 256)
	opts.Subject, opts.Seed = alice, 1
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = bound
	}
	// Timers must not add reads the test did not ask for.
	if opts.RevalidateEvery == 0 {
		opts.RevalidateEvery = time.Hour
	}
	if opts.PollEvery == 0 {
		opts.PollEvery = time.Hour
	}
	opts.OnOutcome = func(o mcpsync.Outcome) { outcomes <- o }
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	c, err := mcpsync.Connect(ctx, dial, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, outcomes
}

// await returns the first outcome that ok accepts, skipping others, and
// fails the test if none arrives within bound.
func await(t *testing.T, outcomes <-chan mcpsync.Outcome, what string, ok func(mcpsync.Outcome) bool) mcpsync.Outcome {
	t.Helper()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		select {
		case o := <-outcomes:
			if ok(o) {
				return o
			}
		case <-timeout.C:
			t.Fatalf("no fenced read %s within %v", what, bound)
			return mcpsync.Outcome{}
		}
	}
}

// decided matches an accepted outcome of the given decision and trigger
// ("" matches any trigger).
func decided(d mcpsync.Decision, trig ledger.Trigger) func(mcpsync.Outcome) bool {
	return func(o mcpsync.Outcome) bool {
		return o.Accepted && o.Version.Decision == d && (trig == "" || o.Version.Trigger == trig)
	}
}

func rpcCode(err error) int {
	var rpc *mcpsync.RPCError
	if errors.As(err, &rpc) {
		return rpc.Code
	}
	return 0
}
