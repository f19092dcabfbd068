package mcpsync_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

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
		r := newRig(t, eras[0], nil)
		c, srv := r.c, r.srv

		var left []string
		for i := range 10 {
			x := fmt.Sprintf("file:///b36/legacycancel/%d.md", i)
			srv.Set(x, "text/markdown", "x1")
			ctx, cancel := context.WithCancel(t.Context())
			r.wire.cancelAsAnswered(string(mcp.MethodResourcesSubscribe), cancel)
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
