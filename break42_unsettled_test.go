package mcpsync_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// b42HookLedger calls hook (once) on the first write whose record goes to
// state, for key.
type b42HookLedger struct {
	mcpsync.Ledger
	mu    sync.Mutex
	key   string
	state mcpsync.SubscriptionState
	hook  func()
}

func (l *b42HookLedger) arm(key string, state mcpsync.SubscriptionState, hook func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.key, l.state, l.hook = key, state, hook
}

func (l *b42HookLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *mcpsync.Record, entries []mcpsync.OutboxEntry) (uint64, bool, error) {
	l.mu.Lock()
	var hook func()
	if l.hook != nil && key == l.key && next.State == l.state {
		hook, l.hook = l.hook, nil
	}
	l.mu.Unlock()
	if hook != nil {
		hook()
	}
	return l.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
}

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
		l := &b42HookLedger{Ledger: mcpsync.NewMemoryLedger(nil)}
		eng, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
		require.NoError(t, err)
		r := newRig(t, eras[0], &mcpsync.ClientOptions{Engine: eng})
		r.subscribe()
		quiesce()
		b33Drain(r)
		require.True(t, r.srv.Subscribed(faultURI))

		ctx, cancel := context.WithCancel(t.Context())
		l.arm(faultURI, mcpsync.StateUnsubscribing, cancel)
		sub, err := r.c.Unsubscribe(ctx, faultURI)
		t.Logf("Unsubscribe with its context ending at BeginClose: %s, %v", sub.State, err)
		b33Wait(r)
		first := r.srv.Subscribed(faultURI)

		// A clean Subscribe and Unsubscribe later in the same session.
		_, err = r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		b33Drain(r)
		sub, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("clean Unsubscribe: %s", sub.State)
		time.Sleep(10 * time.Minute)
		quiesce()
		b33Drain(r)
		t.Logf("unsubscribes the server saw: %d", r.srv.UnsubscribeCalls())
		require.False(t, first, "half an hour after the cancelled Unsubscribe the server still notifies %s", faultURI)
		require.False(t, r.srv.Subscribed(faultURI), "after a clean Unsubscribe the server still notifies %s", faultURI)
	})
}
