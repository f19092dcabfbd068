package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

// 2025-11-25, a server that fails every resources/unsubscribe of x (a
// steady fault). A caller's Subscribe(x) is cancelled while the server
// answers, twenty times in a row. Each cancel leaves x unwatched and
// queues reconcileServer(conn, x), which sends resources/unsubscribe with
// a backoff (RetryInitial .. RetryMax = 30 s) until the server answers.
// Promise: once the fault is steady the client sends a bounded number of
// requests per revalidation period for x, whatever the number of cancels
// before (one loop: at most 5 min / 15 s = 20; a single cancel already
// starts two, Client.subscribe's and Client.tracked's, so 40 is allowed).
func TestBreak42LegacyReconcileLoopsPileUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b42/loops/x.md"
		r := newRig(t, eras[0], nil)
		r.srv.Set(x, "text/markdown", "v1")
		r.wire.refuseWhen(func(method, uri string, _ int) bool {
			return method == string(mcp.MethodResourcesUnsubscribe) && uri == x
		})
		c, kit := r.c, r.faults()

		const cancels = 20
		for range cancels {
			hold := kit.HoldNext(string(mcp.MethodResourcesSubscribe), x)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := c.Subscribe(ctx, x)
				done <- err
			}()
			<-hold.Arrived()
			cancel()
			require.Error(t, <-done)
			hold.Release()
			quiesce()
		}
		time.Sleep(30 * time.Minute) // the backoffs reach RetryMax
		quiesce()
		before := r.wire.requests(string(mcp.MethodResourcesUnsubscribe))
		time.Sleep(5 * time.Minute)
		quiesce()
		per := r.wire.requests(string(mcp.MethodResourcesUnsubscribe)) - before
		t.Logf("resources/unsubscribe of x: %d in all, %d in the last 5 min", r.wire.requests(string(mcp.MethodResourcesUnsubscribe)), per)
		require.LessOrEqual(t, per, 40,
			"after %d cancelled Subscribes of one URI, a steady unsubscribe fault draws %d requests per revalidation period", cancels, per)
	})
}
