package mcpsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b36GiveUp is a transport that honours a caller who gives up: once armed
// with the caller's cancel, the next resources/subscribe reaches the
// server, and as the caller's context ends the request returns
// context.Canceled, as a real transport does when the answer and the
// cancellation cross.
type b36GiveUp struct {
	transport.Interface
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (g *b36GiveUp) arm(cancel context.CancelFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancel = cancel
}

func (g *b36GiveUp) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	g.mu.Lock()
	cancel := g.cancel
	if req.Method == string(mcp.MethodResourcesSubscribe) {
		g.cancel = nil
	} else {
		cancel = nil
	}
	g.mu.Unlock()
	resp, err := g.Interface.SendRequest(ctx, req)
	if cancel == nil {
		return resp, err
	}
	cancel() // the caller gives up as the server records the subscription
	return nil, context.Canceled
}

// A Subscribe whose context ends while the server is being asked to
// notify the URI now fails with the context's error, and the URI is not
// watched: nothing keeps it subscribed. On 2025-11-25 the server may have
// recorded the resources/subscribe the client gave up on; the promise
// (Client.tracked, Client.reconcileServer) is that such a request is put
// right once it settles: an unwatched URI is unsubscribed, so the server
// does not go on notifying a URI no caller subscribed.
//
// It is not when the transport's return wins the race with the caller's
// cancellation. The resources/subscribe reached the server, which
// recorded it; the caller's context ends and the transport returns
// context.Canceled at the same moment. wire.Transport.sendInner's inner
// goroutine then swaps the request's state to answered before its select
// sees ctx.Done, so the request is settled as answered, not abandoned
// (settled(false)) and Client.tracked queues no reconcile;
// Client.subscribe, seeing ctx done, returns ctx.Err(), and Subscribe
// drops the watch. No resources/unsubscribe is ever sent: the server keeps
// the URI subscribed, notifying it, for the rest of the session. (Before
// the context error was returned, the URI stayed watched in poll mode, and
// its Unsubscribe told the server.) The same happens, by the scheduler's
// choice, when the response is only held and the caller cancels (with
// mcpsynctest's HoldNext about every other time under the race detector).
func TestBreak36LegacyCancelledSubscribeLeftOnServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		g := &b36GiveUp{Interface: srv.NewInProcessTransport()}
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return g, nil
		}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25", Seed: 1})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		var left []string
		for i := range 10 {
			x := fmt.Sprintf("file:///b36/legacycancel/%d.md", i)
			srv.Set(x, "text/markdown", "x1")
			ctx, cancel := context.WithCancel(t.Context())
			g.arm(cancel)
			_, err := c.Subscribe(ctx, x)
			require.ErrorIs(t, err, context.Canceled)
			quiesce()
			time.Sleep(time.Minute) // any reconcile, with its retries
			quiesce()
			if srv.Subscribed(x) {
				left = append(left, x)
			}
		}
		require.Empty(t, left, "%d of 10 cancelled Subscribes left the server subscribed to a URI nobody watches (unsubscribes sent: %d)",
			len(left), srv.UnsubscribeCalls())
	})
}
