package mcpsync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b39Poison is the fault kit plus one steady fault: every
// subscriptions/listen request whose filter names refuse is answered with
// a JSON-RPC error (a server that refuses a stream naming a resource it
// will not watch); every other listen request goes through. It counts the
// listen requests the client sends.
type b39Poison struct {
	*mcpsynctest.Transport
	refuse  string
	listens *atomic.Int64
	refused *atomic.Int64
}

func (p *b39Poison) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method == string(mcp.MethodSubscriptionsListen) {
		p.listens.Add(1)
		b, _ := json.Marshal(req.Params)
		if bytes.Contains(b, []byte(`"`+p.refuse+`"`)) {
			p.refused.Add(1)
			return &transport.JSONRPCResponse{
				JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID,
				Error: &mcp.JSONRPCErrorDetails{Code: -32602, Message: "will not watch " + p.refuse},
			}, nil
		}
	}
	return p.Transport.SendRequest(ctx, req)
}

// Bug (progress: no request storm): a 2026-07-28 server that steadily
// refuses any listen stream naming x, and accepts every stream without it,
// gets a new listen request about every second, for ever.
//
// y is watched on an acknowledged stream; Subscribe(x) sends a stream
// [y, x], which replaces (cancels) y's stream and is refused: x falls back
// to polling, and the refused stream's end goes to Client.reestablish.
// After its backoff it reopens every URI the refused stream carried: y's
// reopen opens [y], which the server acknowledges, and an acknowledgement
// resets conn.ends (the backoff "starts afresh once a stream is
// acknowledged"); x's reopen sends [y, x] again, refused again, which
// cancels y's new stream and ends in reestablish again, with a backoff of
// one second since it was just reset. The cycle never stops: each turn
// costs two listen requests, a new generation and a read of y, and y is
// without a stream half of the time. The test counts listen requests over
// one revalidation period (5 minutes) once the fault is steady.
func TestBreak39RefusedURIChurnsListenStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b39/poison/x.md"
		const y = "file:///b39/poison/y.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(x, "text/markdown", "x1")
		srv.Set(y, "text/markdown", "y1")
		var listens, refused atomic.Int64
		var errs b33Errors
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
			return &b39Poison{Transport: kit, refuse: x, listens: &listens, refused: &refused}, nil
		}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2026-07-28", Seed: 1, OnError: errs.add})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		_, err = c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		sub, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePoll, sub.Mode, "x's stream was refused")

		// Let the fault become steady: ten minutes.
		for range 10 {
			time.Sleep(time.Minute)
			quiesce()
		}
		before, refusedBefore := listens.Load(), refused.Load()
		for range 5 {
			time.Sleep(time.Minute)
			quiesce()
		}
		n, nr := listens.Load()-before, refused.Load()-refusedBefore
		t.Logf("listen requests in the 5 minutes after the first 10: %d (%d refused); total %d", n, nr, listens.Load())
		if n > 10 {
			t.Fatalf("%d listen requests (%d refused) in one revalidation period against a server whose refusal never changes", n, nr)
		}
	})
}
