package mcpsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// b44LateUnsub brings x (watched as a, push) to the state where a late
// resources/unsubscribe removed it on the server while the caller watches it
// again in push mode, and releases it once fail is installed: the settling
// queues reconcileServer, whose resources/subscribe meets fail.
func b44LateUnsub(t *testing.T, r *rig, a string, fail func(method, uri string, n int) bool) {
	t.Helper()
	sub, err := r.c.Subscribe(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, mcpsync.ModePush, sub.Mode)
	quiesce()
	kit := r.faults()
	hold := kit.HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), a)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.c.Unsubscribe(ctx, a)
		done <- err
	}()
	<-hold.Arrived()
	cancel()
	<-done
	quiesce()
	sub, err = r.c.Subscribe(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, mcpsync.ModePush, sub.Mode)
	quiesce()
	r.wire.refuseWhen(fail)
	hold.Release()
	quiesce()
}

// 2025-11-25. The reconcile's resources/subscribe of x is refused, and at
// that very moment the caller acts on x (the action waits for x's key,
// which the reconcile holds; the reopen the refusal queues waits too).
// Once settled, x is where the caller left it and the server agrees.
func TestBreak44PassingLegacyReopenRacesCaller(t *testing.T) {
	const a, b = "file:///b44/race/x.md", "file:///b44/race/%78.md"
	cases := []struct {
		name    string
		act     func(r *rig) // run when the reconcile's subscribe goes out
		refuseB bool         // the server refuses b's subscribes too
		watched string       // the spelling watched at the end, "" for none
		reconn  bool
	}{
		{name: "transient", act: nil, watched: a},
		{name: "unsubscribe", act: func(r *rig) { _, _ = r.c.Unsubscribe(context.Background(), a) }, watched: ""},
		{name: "unsubscribe+subscribe-other-spelling", act: func(r *rig) {
			_, _ = r.c.Unsubscribe(context.Background(), a)
			_, _ = r.c.Subscribe(context.Background(), b)
		}, watched: b},
		{name: "unsubscribe+subscribe-other-spelling-refused", act: func(r *rig) {
			_, _ = r.c.Unsubscribe(context.Background(), a)
			_, _ = r.c.Subscribe(context.Background(), b)
		}, refuseB: true, watched: b},
		{name: "unsubscribe+subscribe-same", act: func(r *rig) {
			_, _ = r.c.Unsubscribe(context.Background(), a)
			_, _ = r.c.Subscribe(context.Background(), a)
		}, watched: a},
		{name: "reconnect", act: func(r *rig) { _ = r.c.Reconnect(context.Background()) }, watched: a, reconn: true},
		{name: "subscribe-other-spelling", act: func(r *rig) { _, _ = r.c.Subscribe(context.Background(), b) }, watched: a},
	}
	for _, tc := range cases {
		for _, steady := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/steady=%v", tc.name, steady), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := buildRig(t, eras[0], rigConfig{uris: []string{a, b}})
					var wg sync.WaitGroup
					var once sync.Once
					fail := func(method, uri string, _ int) bool {
						if method != string(mcp.MethodResourcesSubscribe) {
							return false
						}
						if uri == b {
							return tc.refuseB
						}
						if uri != a {
							return false
						}
						first := false
						once.Do(func() {
							first = true
							if tc.act != nil {
								wg.Go(func() { tc.act(r) })
							}
						})
						return steady || first
					}
					b44LateUnsub(t, r, a, fail)
					wg.Wait()
					for range 10 {
						time.Sleep(time.Minute)
						quiesce()
					}
					subs := r.wire.requests(string(mcp.MethodResourcesSubscribe))
					unsubs := r.wire.requests(string(mcp.MethodResourcesUnsubscribe))
					for range 10 {
						time.Sleep(time.Minute)
						quiesce()
					}
					subs = r.wire.requests(string(mcp.MethodResourcesSubscribe)) - subs
					unsubs = r.wire.requests(string(mcp.MethodResourcesUnsubscribe)) - unsubs
					r.srv.Set(a, "text/markdown", "v2")
					r.srv.Set(b, "text/markdown", "v2")
					for range 7 {
						time.Sleep(time.Minute)
						quiesce()
					}
					gen := r.c.Health().SessionGeneration
					sub, err := r.c.Engine().Subscription(a)
					require.NoError(t, err)
					e, lerr := r.c.Lookup(a)
					text := ""
					if lerr == nil && len(e.Contents) > 0 {
						text = e.Contents[0].Text
					}
					open := sub.SessionGeneration == gen && generationOpen(sub.State)
					desc := fmt.Sprintf("key: %s %s %q session %d/%d; server a %v b %v; serves %q degraded %q; in the quiet 10 min: %d subscribes, %d unsubscribes",
						sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, gen, r.srv.Subscribed(a), r.srv.Subscribed(b), text, e.Degraded, subs, unsubs)
					t.Log(desc)
					require.LessOrEqual(t, subs+unsubs, 2, "requests once settled: "+desc)
					require.False(t, tc.watched != a && r.srv.Subscribed(a), "server's a: "+desc)
					require.False(t, tc.watched != b && r.srv.Subscribed(b), "server's b: "+desc)
					if tc.watched == "" {
						require.False(t, open, desc)
						return
					}
					require.True(t, open, desc)
					if sub.Mode == mcpsync.ModePush {
						require.True(t, r.srv.Subscribed(tc.watched), "push, not notified: "+desc)
					} else {
						require.NotEmpty(t, sub.ModeReason, desc)
					}
					require.Equal(t, "v2", text, desc)
					if !steady && !tc.refuseB {
						require.Equal(t, mcpsync.ModePush, sub.Mode, "a refusal once, then the server accepts: "+desc)
					}
				})
			})
		}
	}
}

// 2025-11-25. The reopen a refused re-subscribe queues meets one failed
// ledger write (each write of the close and the next generation in turn).
//
// Fails for begin-close: reopen's closeTold fails at BeginClose, so the
// generation stays ACTIVE in push mode; reopenFailed sets Degraded, but
// nothing ever tries again (repair only acts on a stuck or behind
// generation, rehear only from 2026-07-28, and the reconcile loop ended
// when it queued the reopen), and reopened clears Degraded at the next
// revalidation tick: x stays in push mode with no reason while the server
// notifies nothing, the fault the last commit meant to fix.
// The failure is visible (OnError, Lookup's Degraded), and once the ledger
// is healthy x is open again in the current session, polling with a reason
// (the server still refuses it), serving current content, not degraded,
// and the client does not keep asking the server.
func TestBreak44LegacyReopenLedgerWriteFails(t *testing.T) {
	const a = "file:///b44/ledger/x.md"
	matchers := append([]struct {
		name  string
		match func(string, *mcpsync.Record) bool
	}{{"begin-close", writeTo(mcpsync.StateUnsubscribing)}}, reopenWrites...)
	for _, m := range matchers {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := buildRig(t, eras[0], rigConfig{ledger: true, uris: []string{a}})
				var armed sync.Once
				b44LateUnsub(t, r, a, func(method, uri string, _ int) bool {
					if method == string(mcp.MethodResourcesSubscribe) && uri == a {
						armed.Do(func() { r.ledger.failWrites(1, m.match) })
						return true
					}
					return false
				})
				t.Logf("ledger failures: %d", r.ledger.failures())
				sub, _ := r.c.Engine().Subscription(a)
				e, _ := r.c.Lookup(a)
				t.Logf("right after: %s %s %q degraded %q", sub.State, sub.Mode, sub.ModeReason, e.Degraded)
				if r.ledger.failures() > 0 {
					r.requireToldReopen(a)
				}
				for range 10 {
					time.Sleep(time.Minute)
					quiesce()
				}
				subs := r.wire.requests(string(mcp.MethodResourcesSubscribe))
				for range 10 {
					time.Sleep(time.Minute)
					quiesce()
				}
				subs = r.wire.requests(string(mcp.MethodResourcesSubscribe)) - subs
				r.srv.Set(a, "text/markdown", "v2")
				for range 7 {
					time.Sleep(time.Minute)
					quiesce()
				}
				sub, err := r.c.Engine().Subscription(a)
				require.NoError(t, err)
				t.Logf("settled: %s %s %q gen %d/%d; server %v; subscribes in a quiet 10 min %d",
					sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, sub.SubscriptionGeneration, r.srv.Subscribed(a), subs)
				require.LessOrEqual(t, subs, 1)
				require.Equal(t, 1, r.ledger.failures(), "the write was refused")
				r.requireHealed(a, "v2")
				if sub.Mode == mcpsync.ModePush {
					require.True(t, r.srv.Subscribed(a), "push but not notified")
				} else {
					require.NotEmpty(t, sub.ModeReason)
				}
			})
		})
	}
}

// 2025-11-25. The reconcile's resubscribe is refused at the moment the
// client is closed: Close returns cleanly, and nothing of the client is
// left running (goleak in TestMain).
func TestBreak44PassingLegacyReopenRacesClose(t *testing.T) {
	const a = "file:///b44/close/x.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{uris: []string{a}})
		var wg sync.WaitGroup
		var once sync.Once
		closed := make(chan error, 1)
		b44LateUnsub(t, r, a, func(method, uri string, _ int) bool {
			if method == string(mcp.MethodResourcesSubscribe) && uri == a {
				once.Do(func() { wg.Go(func() { closed <- r.c.Close() }) })
				return true
			}
			return false
		})
		wg.Wait()
		require.NoError(t, <-closed)
		time.Sleep(time.Hour)
		quiesce()
	})
}

// 2025-11-25. The resource is deleted on the server while the late
// unsubscribe is stuck, and the server refuses every subscribe of it; it
// is then created again. Once settled, x serves the new content, in push
// mode with the server notifying it or polling with a reason.
func TestBreak44PassingLegacyReopenOfDeleted(t *testing.T) {
	const a = "file:///b44/deleted/x.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{uris: []string{a}})
		b44LateUnsub(t, r, a, func(method, uri string, _ int) bool {
			if method == string(mcp.MethodResourcesSubscribe) && uri == a {
				r.srv.Delete(a)
				return true
			}
			return false
		})
		for range 10 {
			time.Sleep(time.Minute)
			quiesce()
		}
		sub, _ := r.c.Engine().Subscription(a)
		t.Logf("deleted: %s %s %q", sub.State, sub.Mode, sub.ModeReason)
		r.srv.Recreate(a, "v3")
		for range 10 {
			time.Sleep(time.Minute)
			quiesce()
		}
		sub, err := r.c.Engine().Subscription(a)
		require.NoError(t, err)
		e, lerr := r.c.Lookup(a)
		require.NoError(t, lerr)
		desc := fmt.Sprintf("%s %s %q; server %v; serves %q degraded %q", sub.State, sub.Mode, sub.ModeReason, r.srv.Subscribed(a), e.Contents[0].Text, e.Degraded)
		t.Log(desc)
		require.Equal(t, "v3", e.Contents[0].Text, desc)
		if sub.Mode == mcpsync.ModePush {
			require.True(t, r.srv.Subscribed(a), desc)
		} else {
			require.NotEmpty(t, sub.ModeReason, desc)
		}
	})
}

// 2025-11-25. The same refused re-subscribe while the ledger keeps
// refusing the write that begins the reopen: the reconcile tries again
// with its backoff, and until one succeeds the URI is in push mode with
// nothing notifying it. Degraded must say so through every revalidation
// tick meanwhile (a tick finding the generation open must not take the
// reason back while the server is still being put right), and once the
// ledger answers the URI ends open with current content.
func TestBreak44LegacyDegradedWhileReconcileRetries(t *testing.T) {
	const a = "file:///b44/ledger/y.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{ledger: true, uris: []string{a}})
		beginClose := writeTo(mcpsync.StateUnsubscribing)
		var armed sync.Once
		b44LateUnsub(t, r, a, func(method, uri string, _ int) bool {
			if method == string(mcp.MethodResourcesSubscribe) && uri == a {
				armed.Do(func() { r.ledger.failWrites(1<<20, beginClose) })
				return true
			}
			return false
		})
		for range 12 { // more than two revalidation periods
			time.Sleep(time.Minute)
			quiesce()
			sub, err := r.c.Engine().Subscription(a)
			require.NoError(t, err)
			e, err := r.c.Lookup(a)
			require.NoError(t, err)
			require.False(t, sub.Mode == mcpsync.ModePush && !r.srv.Subscribed(a) && e.Degraded == "",
				"%s in push mode, not subscribed on the server, and Lookup says nothing (ledger failures %d)", a, r.ledger.failures())
		}
		r.ledger.failWrites(0, nil)
		for range 12 {
			time.Sleep(time.Minute)
			quiesce()
		}
		r.srv.Set(a, "text/markdown", "v2")
		for range 7 {
			time.Sleep(time.Minute)
			quiesce()
		}
		r.requireHealed(a, "v2")
	})
}
