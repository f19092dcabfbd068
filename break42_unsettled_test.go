package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2025-11-25. The caller of Unsubscribe(x) gives up just as the close
// begins (its context ends while BeginClose writes the ledger), before
// the resources/unsubscribe goes out. Client.tracked counts the request
// as unsettled (conn.unsettled[x]++) and expects wire.Transport to call
// it back once the transport is done with it. But mcp-go's
// Client.sendRequest (v1.2.1) returns at once for a context already ended,
// without calling the transport, so the callback never comes: x stays
// "unsettled" on that connection for ever.
//
// reconcileServerOnce then returns at conn.deferUntilSettled ("another
// request is still out; its settling comes back here"), so the server is
// never told; and every later Unsubscribe of x on the session does the
// same (Unsubscribe's deferUntilSettled branch): a clean Subscribe(x)
// then Unsubscribe(x) with a live context leaves x subscribed too.
func TestBreak42LegacyUnsubscribeCancelledBeforeSendPoisonsURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{ledger: true})
		r.subscribe()
		quiesce()
		require.True(t, r.srv.Subscribed(faultURI))

		ctx, cancel := context.WithCancel(t.Context())
		r.ledger.beforeWrite(writeOf(faultURI, mcpsync.StateUnsubscribing), cancel)
		sub, err := r.c.Unsubscribe(ctx, faultURI)
		t.Logf("Unsubscribe with its context ending at BeginClose: %s, %v", sub.State, err)
		r.sixRevalidations()
		first := r.srv.Subscribed(faultURI)

		// A clean Subscribe and Unsubscribe later in the same session.
		_, err = r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		sub, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("clean Unsubscribe: %s", sub.State)
		time.Sleep(10 * time.Minute)
		quiesce()
		t.Logf("unsubscribes the server saw: %d", r.srv.UnsubscribeCalls())
		require.False(t, first, "half an hour after the cancelled Unsubscribe the server still notifies %s", faultURI)
		require.False(t, r.srv.Subscribed(faultURI), "after a clean Unsubscribe the server still notifies %s", faultURI)
	})
}
