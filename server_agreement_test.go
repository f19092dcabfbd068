package mcpsync_test

// What the server is told agrees with what the caller wants: once things
// settle, the server notifies every watched URI in push mode and no URI
// nobody watches. A request that failed, came back late or was given up on
// is put right on the live session, with paced retries, whatever the
// caller does meanwhile.

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
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// 2025-11-25. A subscribe the client gave up on (it timed out: poll mode)
// makes the Unsubscribe that follows wait for it; once the abandoned
// subscribe reaches the server, the unsubscribe waiting for it goes out,
// held. The caller then Subscribes the URI again before that unsubscribe
// lands. The late unsubscribe must not leave the new subscription in push
// mode with nothing notifying it: a minute after the server changes the
// text (revalidation is an hour away), the URI serves it.
func TestLateUnsubscribeNeverUndoesALaterSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 2 * time.Second})
		kit := r.faults()
		subHold := kit.HoldNextRequest(string(mcp.MethodResourcesSubscribe), "")
		first := goCall(context.Background(), r.c.Subscribe, faultURI)
		synctest.Wait()
		require.True(t, arrived(subHold))
		time.Sleep(3 * time.Second) // the client gives up on the subscribe: poll mode
		require.NoError(t, (<-first).err)
		quiesce()

		unsubHold := kit.HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), "")
		gone, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("Unsubscribe: %s generation %d", gone.State, gone.SubscriptionGeneration)

		subHold.Release() // the abandoned subscribe reaches the server, then the unsubscribe waiting for it goes out
		synctest.Wait()
		require.True(t, arrived(unsubHold), "the unsubscribe that waited for the subscribe is on its way")

		again, err := r.c.Subscribe(t.Context(), faultURI) // the caller changes its mind
		require.NoError(t, err)
		t.Logf("Subscribe again: %s generation %d mode %s", again.State, again.SubscriptionGeneration, again.Mode)
		unsubHold.Release()
		quiesce()

		r.srv.Set(faultURI, "text/markdown", "v2")
		minutes(1)
		r.requireConverged(faultURI, "late unsubscribe of an earlier generation")
	})
}

// 2025-11-25. An unsubscribe that fails once (the server answers an error,
// the network blips) leaves the generation UNSUBSCRIBE_UNKNOWN, which the
// design reconciles on the same session or ends with the session. On a
// session that stays up it is reconciled: half an hour later the
// generation is CLOSED and the server no longer notifies the URI.
func TestFailedUnsubscribeIsRetriedOnALiveSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{RevalidateEvery: time.Hour})
		r.subscribeSettled(faultURI)
		r.faults().FailNext(string(mcp.MethodResourcesUnsubscribe), faultURI, -32603, "internal error")
		gone, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("Unsubscribe: %s", gone.State)
		r.faults().Heal() // the last fault
		time.Sleep(30 * time.Minute)
		quiesce()
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.State != ledger.StateClosed || r.srv.Subscribed(faultURI) {
			t.Fatalf("a failed unsubscribe is never reconciled on a live session: %s", r.describe(faultURI))
		}
	})
}

// lateUnsubscribe brings a (2025-11-25, watched, push) to the state where a
// late resources/unsubscribe removed it on the server while the caller
// watches it again in push mode, and releases that unsubscribe once fail is
// installed: the client then subscribes a on the server again, and that
// request meets fail.
func lateUnsubscribe(t *testing.T, r *rig, a string, fail func(method, uri string, n int) bool) {
	t.Helper()
	hold := heldLateUnsubscribe(t, r, a)
	r.wire.refuseWhen(fail)
	hold.Release()
	quiesce()
}

// heldLateUnsubscribe has a (2025-11-25) watched in push mode, notified by
// the server; then an Unsubscribe of it given up while its
// resources/unsubscribe is held before the server; then a watched again in
// push mode. Releasing the hold it returns lets that unsubscribe reach the
// server late.
func heldLateUnsubscribe(t *testing.T, r *rig, a string) *mcpsynctest.Hold {
	t.Helper()
	sub, err := r.c.Subscribe(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, ledger.ModePush, sub.Mode)
	quiesce()
	require.True(t, r.srv.Subscribed(a))
	hold := r.faults().HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), a)
	cancelWhileHeld(t, hold, r.c.Unsubscribe, a)
	quiesce()
	sub, err = r.c.Subscribe(t.Context(), a)
	require.NoError(t, err)
	require.Equal(t, ledger.ModePush, sub.Mode)
	quiesce()
	return hold
}

// refusingSubscribesOf refuses every resources/subscribe of uri, calling
// first (if set) as each is refused: a fault for lateUnsubscribe.
func refusingSubscribesOf(uri string, first func()) func(method, u string, n int) bool {
	return func(method, u string, _ int) bool {
		if method != string(mcp.MethodResourcesSubscribe) || u != uri {
			return false
		}
		if first != nil {
			first()
		}
		return true
	}
}

// 2025-11-25. The client's request subscribing x again after a late
// unsubscribe is refused (once, or steadily), and at that very moment the
// caller acts on x: unsubscribes it, subscribes another spelling, both, the
// same spelling again, or reconnects. Once settled, x is where the caller
// left it and the server agrees: only the watched spelling is notified, the
// key is open (push with the server notifying it, or polling with a
// reason) and serves current content, and in a quiet ten minutes the client
// sends at most two subscribe or unsubscribe requests.
func TestRefusedResubscribeRacingTheCallerEndsWhereTheCallerLeftIt(t *testing.T) {
	const a, b = "file:///b44/race/x.md", "file:///b44/race/%78.md"
	cases := []struct {
		name    string
		act     func(r *rig) // run when the subscribe putting the server right goes out
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
		eachCase(t, []bool{true, false}, func(steady bool) string { return fmt.Sprintf("%s/steady=%v", tc.name, steady) }, func(t *testing.T, steady bool) {
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
			lateUnsubscribe(t, r, a, fail)
			wg.Wait()
			minutes(10)
			subs := r.requests(string(mcp.MethodResourcesSubscribe))
			unsubs := r.requests(string(mcp.MethodResourcesUnsubscribe))
			minutes(10)
			subs = r.requests(string(mcp.MethodResourcesSubscribe)) - subs
			unsubs = r.requests(string(mcp.MethodResourcesUnsubscribe)) - unsubs
			r.srv.Set(a, "text/markdown", "v2")
			r.srv.Set(b, "text/markdown", "v2")
			minutes(7)
			gen := r.c.Health().SessionGeneration
			sub, err := r.c.Engine().Subscription(a)
			require.NoError(t, err)
			e, lerr := r.c.Lookup(a)
			text := ""
			if lerr == nil && len(e.Contents) > 0 {
				text = e.Contents[0].Text
			}
			open := openIn(sub, gen)
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
			if sub.Mode == ledger.ModePush {
				require.True(t, r.srv.Subscribed(tc.watched), "push, not notified: "+desc)
			} else {
				require.NotEmpty(t, sub.ModeReason, desc)
			}
			require.Equal(t, "v2", text, desc)
			if !steady && !tc.refuseB {
				require.Equal(t, ledger.ModePush, sub.Mode, "a refusal once, then the server accepts: "+desc)
			}
		})
	}
}

// 2025-11-25. The resource is deleted on the server while the late
// unsubscribe is stuck, and the server refuses every subscribe of it; it is
// then created again. Once settled, x serves the new content, in push mode
// with the server notifying it or polling with a reason.
func TestRefusedResubscribeOfADeletedURIServesItOnceRecreated(t *testing.T) {
	const a = "file:///b44/deleted/x.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{uris: []string{a}})
		lateUnsubscribe(t, r, a, refusingSubscribesOf(a, func() { r.srv.Delete(a) }))
		minutes(10)
		sub, _ := r.c.Engine().Subscription(a)
		t.Logf("deleted: %s %s %q", sub.State, sub.Mode, sub.ModeReason)
		r.srv.Recreate(a, "v3")
		minutes(10)
		sub, err := r.c.Engine().Subscription(a)
		require.NoError(t, err)
		e, lerr := r.c.Lookup(a)
		require.NoError(t, lerr)
		desc := fmt.Sprintf("%s %s %q; server %v; serves %q degraded %q", sub.State, sub.Mode, sub.ModeReason, r.srv.Subscribed(a), e.Contents[0].Text, e.Degraded)
		t.Log(desc)
		require.Equal(t, "v3", e.Contents[0].Text, desc)
		if sub.Mode == ledger.ModePush {
			require.True(t, r.srv.Subscribed(a), desc)
		} else {
			require.NotEmpty(t, sub.ModeReason, desc)
		}
	})
}

// subscribeFailingActivation subscribes faultURI with the ledger refusing,
// once, the write that activates it, and checks that Subscribe failed.
func (r *rig) subscribeFailingActivation() {
	r.t.Helper()
	r.ledger.failWrites(1, writeOf(faultURI, ledger.StateActive))
	_, err := r.c.Subscribe(r.t.Context(), faultURI)
	require.Error(r.t, err, "the activation write failed")
	require.Equal(r.t, 1, r.ledger.failures())
	quiesce()
}

// 2025-11-25. A Subscribe whose activation write fails after the server
// acknowledged its resources/subscribe fails and drops its watch; the
// server is told: half an hour later it does not notify a URI nobody
// watches (DESIGN: a URI nobody watches after a failed Subscribe is not
// left subscribed on the server).
func TestFailedActivationUnsubscribesTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[0])
		r.subscribeFailingActivation()
		r.sixRevalidations() // half an hour, the ledger healthy
		require.False(t, r.srv.Subscribed(faultURI),
			"the server still notifies %s, whose Subscribe failed and which nobody watches (unsubscribes sent: %d)",
			faultURI, r.srv.UnsubscribeCalls())
	})
}

// 2026-07-28. A Subscribe whose activation write fails after its listen
// stream was acknowledged fails and drops its watch. The stream open now
// does not go on carrying the URI, even when no later Subscribe or
// Unsubscribe replaces it (a client that watches a fixed set): half an hour
// later the server notifies the watched URI and not the failed one.
func TestFailedActivationLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(other, "text/markdown", "v1")
		r.watch(other) // a watch that stays
		quiesce()
		r.subscribeFailingActivation()
		r.sixRevalidations() // half an hour, the ledger healthy
		require.True(t, r.srv.Subscribed(other))
		require.False(t, r.srv.Subscribed(faultURI),
			"a listen stream still carries %s half an hour after its Subscribe failed; nobody watches it", faultURI)
	})
}

// 2026-07-28. A Subscribe whose activation write fails after its listen
// stream was acknowledged fails, and drops its watch: no caller wants the
// URI. The next replacement of the stream leaves it out, so the server stops
// notifying a URI nobody watches.
func TestFailedActivationLeavesTheURIOffTheNextStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(other, "text/markdown", "v1")
		r.subscribeFailingActivation()

		// Another Subscribe replaces the stream.
		r.watch(other)
		quiesce()
		require.True(t, r.srv.Subscribed(other))
		require.False(t, r.srv.Subscribed(faultURI), "a stream still carries a URI whose Subscribe failed")
	})
}

// 2025-11-25, a server that fails every resources/unsubscribe of x (a
// steady fault). A caller's Subscribe(x) is cancelled while the server
// answers, twenty times in a row, each leaving x unwatched on a server
// that recorded it, so the client keeps asking the server to unsubscribe x
// with its backoff. Once the fault is steady the client sends a bounded
// number of requests per revalidation period for x, whatever the number of
// cancels before: at most 40 (one retry loop at RetryMax = 30 s draws 10,
// and no more than a few may run at once).
func TestCancelledSubscribesOfOneURIDrawAPacedUnsubscribe(t *testing.T) {
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
			done := goCall(ctx, c.Subscribe, x)
			<-hold.Arrived()
			cancel()
			require.Error(t, (<-done).err)
			hold.Release()
			quiesce()
		}
		time.Sleep(30 * time.Minute) // the backoffs reach RetryMax
		quiesce()
		before := r.requests(string(mcp.MethodResourcesUnsubscribe))
		time.Sleep(5 * time.Minute)
		quiesce()
		per := r.requests(string(mcp.MethodResourcesUnsubscribe)) - before
		t.Logf("resources/unsubscribe of x: %d in all, %d in the last 5 min", r.requests(string(mcp.MethodResourcesUnsubscribe)), per)
		require.LessOrEqual(t, per, 40,
			"after %d cancelled Subscribes of one URI, a steady unsubscribe fault draws %d requests per revalidation period", cancels, per)
	})
}

// 2025-11-25. For each of 200 URIs a Subscribe is cancelled while the
// server's answer to its resources/subscribe (recorded by the server) is
// held, and the answer is released at the same moment, so the caller's
// giving up and the late answer each ask for the server to be put right at
// once. Ten minutes later no URI whose Subscribe failed is still subscribed
// on the server.
func TestCancelledSubscribesAnsweredAtOnceAreUnsubscribed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		uris := numbered("file:///b43/exit/%03d.md", n)
		r := buildRig(t, eras[0], rigConfig{uris: uris})
		kit := r.faults()
		var wg sync.WaitGroup
		var mu sync.Mutex
		cancelled := map[string]bool{}
		for _, u := range uris {
			hold := kit.HoldNext(string(mcp.MethodResourcesSubscribe), u)
			ctx, cancel := context.WithCancel(t.Context())
			wg.Go(func() {
				if _, err := r.c.Subscribe(ctx, u); err != nil {
					mu.Lock()
					cancelled[u] = true
					mu.Unlock()
				}
			})
			wg.Go(func() {
				<-hold.Arrived()
				go cancel()
				hold.Release()
			})
		}
		wg.Wait()
		minutes(10)
		var left []string
		for _, u := range uris {
			if cancelled[u] && r.srv.Subscribed(u) {
				sub, _ := r.c.Engine().Subscription(u)
				left = append(left, fmt.Sprintf("%s (%s %s)", u, sub.State, sub.Mode))
			}
		}
		t.Logf("%d Subscribes cancelled; unsubscribes sent: %d", len(cancelled), r.requests(string(mcp.MethodResourcesUnsubscribe)))
		require.Empty(t, left, "unwatched URIs the server still notifies, 10 minutes after their Subscribes were cancelled")
	})
}

// 2025-11-25. x is watched in push mode. An Unsubscribe(x) is given up
// while its resources/unsubscribe is stuck before the server; a
// Subscribe(x) then opens x again (push). The stuck unsubscribe reaches the
// server late and removes x, and the client subscribes x on the server
// again, which the server now refuses every time (a steady fault, as a
// Subscribe would meet it). x does not stay in push mode while the server
// notifies nothing: 21 minutes on, it is notified by the server, or it
// polls with a reason, as a Subscribe that meets that fault does.
func TestRefusedResubscribeAfterALateUnsubscribePollsSayingWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b43/resub/x.md"
		r := buildRig(t, eras[0], rigConfig{uris: []string{x}})
		lateUnsubscribe(t, r, x, refusingSubscribesOf(x, nil))
		t.Logf("after the late unsubscribe: server subscribed %v", r.srv.Subscribed(x))

		minutes(20)
		before := r.requests(string(mcp.MethodResourcesSubscribe))
		r.srv.Set(x, "text/markdown", "v2")
		minutes(1)
		sub, _, desc := r.look(x)
		t.Logf("%s; subscribes sent %d (%d in the last minute)",
			desc, r.requests(string(mcp.MethodResourcesSubscribe)), r.requests(string(mcp.MethodResourcesSubscribe))-before)
		if sub.Mode == ledger.ModePush {
			require.True(t, r.srv.Subscribed(x),
				"x is in push mode (reason %q) but the server does not notify it, 21 minutes after the re-subscribe started failing", sub.ModeReason)
		} else {
			require.NotEmpty(t, sub.ModeReason, "polled without a reason")
		}
	})
}
