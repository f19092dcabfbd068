package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2025-11-25. x is watched in push mode. An Unsubscribe(x) is given up
// while its resources/unsubscribe is stuck before the server; a
// Subscribe(x) then opens x again (push). The stuck unsubscribe reaches
// the server late and removes x; its settling queues reconcileServer,
// which sends resources/subscribe again, and the server now refuses
// every subscribe of x (a steady fault, as a Subscribe would meet it).
//
// A Subscribe that meets that fault polls with a reason ("subscribe
// failed: ..."). Here x stays in push mode for good while the server
// notifies nothing: a watched URI neither subscribed nor polled with a
// reason, whose changes reach the caller only at revalidation ticks.
func TestBreak43LegacyLateUnsubscribeResubscribeRefusedStaysPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b43/resub/x.md"
		r := buildRig(t, eras[0], rigConfig{uris: []string{x}})
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		quiesce()
		require.True(t, r.srv.Subscribed(x))

		kit := r.faults()
		hold := kit.HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), x)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := r.c.Unsubscribe(ctx, x)
			done <- err
		}()
		<-hold.Arrived()
		cancel()
		t.Logf("cancelled Unsubscribe: %v", <-done)
		quiesce()

		sub, err = r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		t.Logf("Subscribe again: %s %s", sub.State, sub.Mode)
		quiesce()

		r.wire.refuseWhen(func(method, uri string, _ int) bool {
			return method == string(mcp.MethodResourcesSubscribe) && uri == x
		})
		hold.Release()
		quiesce()
		t.Logf("after the late unsubscribe: server subscribed %v", r.srv.Subscribed(x))

		for range 20 {
			time.Sleep(time.Minute)
			quiesce()
		}
		before := r.wire.requests(string(mcp.MethodResourcesSubscribe))
		r.srv.Set(x, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()
		sub, err = r.c.Engine().Subscription(x)
		require.NoError(t, err)
		e, lerr := r.c.Lookup(x)
		require.NoError(t, lerr)
		t.Logf("x: %s %s reason %q; server subscribed %v; serves %q degraded %q; subscribes sent %d (%d in the last minute)",
			sub.State, sub.Mode, sub.ModeReason, r.srv.Subscribed(x), e.Contents[0].Text, e.Degraded,
			r.wire.requests(string(mcp.MethodResourcesSubscribe)), r.wire.requests(string(mcp.MethodResourcesSubscribe))-before)
		if sub.Mode == mcpsync.ModePush {
			require.True(t, r.srv.Subscribed(x),
				"x is in push mode (reason %q) but the server does not notify it, 21 minutes after the re-subscribe started failing", sub.ModeReason)
		} else {
			require.NotEmpty(t, sub.ModeReason, "polled without a reason")
		}
	})
}
