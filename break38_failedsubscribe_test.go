package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Bug: a 2025-11-25 Subscribe whose activation write fails after the
// server acknowledged its resources/subscribe drops its watch and leaves
// the URI subscribed on the server for the rest of the session.
//
// The fix for the 2026-07-28 flavour (Subscribe takes the URI off the
// listen stream, conn.setWanted(uri, false)) has no legacy counterpart:
// Client.Subscribe drops the watch (dropWatch, "never opened: no intent
// left behind"), but nothing sends resources/unsubscribe, nor queues a
// reconcileServer as the cancelled path does. Half an hour later, the
// server still notifies a URI nobody watches. Safety: "a URI nobody
// watches (after a failed Subscribe) is not left subscribed on the server".
func TestBreak38LegacyFailedActivationLeftSubscribedOnServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[0])
		r.ledger.failWrites(1, writeOf(faultURI, mcpsync.StateActive))
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.Error(t, err, "the activation write failed")
		require.Equal(t, 1, r.ledger.failures())
		quiesce()
		r.sixRevalidations() // half an hour, the ledger healthy
		require.False(t, r.srv.Subscribed(faultURI),
			"the server still notifies %s, whose Subscribe failed and which nobody watches (unsubscribes sent: %d)",
			faultURI, r.srv.UnsubscribeCalls())
	})
}

// Bug: a 2026-07-28 Subscribe whose activation write fails after its
// listen stream was acknowledged takes the URI off the *next* stream only
// (conn.setWanted(uri, false)); the stream open now goes on carrying it.
// With no later Subscribe or Unsubscribe to replace the stream (a client
// that watches a fixed set), nothing ever does: the revalidation tick's
// repair (rehear/unheard) looks only at watched URIs, so half an hour later
// the server still notifies a URI nobody watches. The break36 test that
// covers the fix passes only because it subscribes another URI afterwards.
func TestBreak38ModernFailedActivationStreamKeepsCarrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(other, "text/markdown", "v1")
		_, err := r.c.Subscribe(t.Context(), other) // a watch that stays
		require.NoError(t, err)
		quiesce()
		r.ledger.failWrites(1, writeOf(faultURI, mcpsync.StateActive))
		_, err = r.c.Subscribe(t.Context(), faultURI)
		require.Error(t, err, "the activation write failed")
		require.Equal(t, 1, r.ledger.failures())
		quiesce()
		r.sixRevalidations() // half an hour, the ledger healthy
		require.True(t, r.srv.Subscribed(other))
		require.False(t, r.srv.Subscribed(faultURI),
			"a listen stream still carries %s half an hour after its Subscribe failed; nobody watches it", faultURI)
	})
}

// Bug: a 2026-07-28 Subscribe cancelled while its listen stream awaits the
// server (the request held before the server sees it) fails with
// context.Canceled and is not watched, but the stream it sent stays the
// connection's stream (conn.listen): relisten returns ctx.Err() without
// cancelling it, and serverSubscribe only drops the URI from the *next*
// stream's want list. Once the request goes through, the server carries the
// URI; with no later Subscribe to replace the stream, it carries it for
// good (checked half an hour later).
func TestBreak38ModernCancelledSubscribeStreamKeepsCarrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b38/cancel/x.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(x, "text/markdown", "x1")
		r.subscribe()
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(ctx, x)
			done <- err
		}()
		synctest.Wait()
		select {
		case <-hold.Arrived():
		case err := <-done:
			t.Fatalf("Subscribe returned %v before the server was asked", err)
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		hold.Release()
		quiesce()
		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(faultURI))
		require.False(t, r.srv.Subscribed(x),
			"half an hour after its Subscribe was cancelled, a listen stream still carries %s, which nobody watches", x)
	})
}
