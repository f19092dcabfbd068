package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

// 2025-11-25. A Subscribe of spelling A of a URI is cancelled while its
// resources/subscribe is stuck before the server; a Subscribe of spelling
// B (the same key, internal/uri) then opens the URI. The stuck request
// reaches the server, which records A; its settling queues
// reconcileServer(conn, A). The caller then Unsubscribes the URI. Once
// everything settled, the server must notify neither spelling: nobody
// watches the URI.
func TestBreak42LegacyReconcileOtherSpellingLeftOnServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, b = "file:///b42/sp/a.md", "file:///b42/sp/%61.md"
		r := newRig(t, eras[0], nil)
		r.srv.Set(a, "text/markdown", "v1")
		r.srv.Set(b, "text/markdown", "v1")
		hold := r.faults().HoldNextRequest(string(mcp.MethodResourcesSubscribe), a)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(ctx, a)
			done <- err
		}()
		<-hold.Arrived()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		quiesce()

		sub, err := r.c.Subscribe(t.Context(), b)
		require.NoError(t, err)
		t.Logf("B: %s %s", sub.State, sub.Mode)
		quiesce()
		hold.Release()
		quiesce()
		t.Logf("while B watched: server subscribed A %v, B %v; subscribe calls %d", r.srv.Subscribed(a), r.srv.Subscribed(b), r.srv.SubscribeCalls())

		_, err = r.c.Unsubscribe(t.Context(), b)
		require.NoError(t, err)
		r.sixRevalidations()
		require.False(t, r.srv.Subscribed(b), "B")
		require.False(t, r.srv.Subscribed(a),
			"half an hour after the URI's Unsubscribe, the server still notifies spelling %s, which nobody watches", a)
	})
}
