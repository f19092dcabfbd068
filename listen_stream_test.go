package mcpsync_test

// The 2026-07-28 listen stream: replaced as URIs come and go, ended or
// refused by the server, re-established and retried. A change made while no
// acknowledged stream carried a URI is read once replacements pause; a
// server that refuses or ends streams is polled within the bound with a
// reason, and a steady fault draws a bounded number of listen requests per
// revalidation period.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A change made while no stream carried a URI is read once replacements
// pause, even when the next replacement is acknowledged only after its
// caller gave up:
//
//  1. x is subscribed on stream A.
//  2. Subscribe y replaces A with B (x carried over); while B is held, x
//     changes on the server: no stream carries it, the notification is
//     lost. B is acknowledged.
//  3. Subscribe z (a 3 s deadline) replaces B with C; the server
//     acknowledges C only after 4 s, once z gave up.
//
// A minute later x serves the server's text; revalidation is an hour away,
// so only the read after the gap can bring it.
func TestChangeWhileNoStreamCarriedItIsReadAfterALateAcknowledgement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y, z = "file:///gap/x.md", "file:///gap/y.md", "file:///gap/z.md"
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{x, y, z}})
		r.watch(x)
		minutes(1)

		// Step 2: A -> B, x changes in between.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		done := goCall(context.Background(), r.c.Subscribe, y)
		synctest.Wait()
		require.True(t, arrived(hold), "stream B is held")
		r.srv.Set(x, "text/markdown", "v2") // no stream carries x now
		hold.Release()
		require.NoError(t, (<-done).err)

		// Step 3: B -> C, C acknowledged late; z gives up first.
		hold2 := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		zctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		zdone := make(chan struct{})
		go func() {
			defer close(zdone)
			_, _ = r.c.Subscribe(zctx, z)
		}()
		quiesce() // past the short wait that batches replacements (B was acknowledged just now)
		require.True(t, arrived(hold2), "stream C is held")
		time.Sleep(4 * time.Second) // the read after the gap falls due at +1s, z's ctx ends at +3s
		quiesce()
		hold2.Release()
		<-zdone
		minutes(1)
		r.requireConverged(x, "changed while no stream carried it, then a replacement was acknowledged late")
	})
}

// A change made while only an unacknowledged stream named a URI is read once
// an acknowledged stream carries it again:
//
//  1. x is subscribed on stream A (acknowledged).
//  2. Subscribe y replaces A with B, which the server never acknowledges
//     (held past RequestTimeout): y polls. x changes on the server
//     meanwhile, and its notification reaches nobody.
//  3. Subscribe z replaces B with C, which the server acknowledges.
//
// A minute later x serves the server's text; revalidation is an hour away.
func TestChangeAcrossAnUnacknowledgedStreamIsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y, z = "file:///unacked/x.md", "file:///unacked/y.md", "file:///unacked/z.md"
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second}, uris: []string{x, y, z}})
		r.watch(x)
		minutes(1)

		// Step 2: B is never acknowledged.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		done := make(chan struct{})
		var ysub mcpsync.Subscription
		go func() {
			defer close(done)
			ysub, _ = r.c.Subscribe(context.Background(), y)
		}()
		synctest.Wait()
		require.True(t, arrived(hold), "stream B is held")
		r.srv.Set(x, "text/markdown", "v2") // no acknowledged stream carries x
		<-done
		require.Equal(t, ledger.ModePoll, ysub.Mode, "y's stream was never acknowledged")

		// Step 3: C replaces B and is acknowledged.
		zsub, err := r.c.Subscribe(context.Background(), z)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, zsub.Mode, zsub.ModeReason)
		minutes(1)
		r.requireConverged(x, "changed while its stream was replaced by one never acknowledged")
	})
}

// The server ends the listen stream a SubscribeAll opened, and before the
// client re-establishes it (its backoff) the caller unsubscribes one URI:
// once things settle the unsubscribed URI is not carried, every other one
// is, in push mode, and their changes reach Lookup.
func TestUnsubscribeWhileAnEndedStreamWaitsLeavesTheOthersPushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := numbered("file:///b37/ended/%d.md", 6)
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()
		r.faults().EndListenStreams()
		synctest.Wait()
		sub, err := r.c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		assert.Equal(t, ledger.StateClosed, sub.State)
		time.Sleep(5 * time.Second)
		quiesce()
		assert.False(t, r.srv.Subscribed(uris[0]))
		for _, u := range uris[1:] {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode, u)
			assert.True(t, r.srv.Subscribed(u), u)
			r.srv.Set(u, "text/markdown", "v2")
		}
		quiesce()
		for _, u := range uris[1:] {
			entry, err := r.c.Lookup(u)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text, u)
		}
	})
}

// The server refuses the first subscriptions/listen request once (a
// JSON-RPC error), then accepts every later one. Every URI of a SubscribeAll
// that returned without error ends in push mode, carried by the server, and
// its change reaches Lookup once notifications are handled: the URI whose
// Subscribe sent the refused stream polls only until its stream is tried
// again, even when another URI's Subscribe replaced the refused stream
// first (SubscribeAll of 8) and whatever replaces the stream afterwards.
func TestRefusedListenInSubscribeAllEndsPushed(t *testing.T) {
	eachCase(t, []int{1, 8}, func(n int) string { return fmt.Sprintf("%d URIs", n) }, func(t *testing.T, n int) {
		uris := numbered("file:///b37/refused/%d.md", n)
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		r.faults().FailNext(string(mcp.MethodSubscriptionsListen), "", -32603, "not now")
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		// The URI whose Subscribe sent the refused stream polls; its
		// first poll tick (PollEvery, 30 s, and its jitter) opens it
		// on a stream again.
		minutes(1)
		// Another URI's Subscribe replaces the stream, as any later
		// Subscribe or Unsubscribe does.
		const w = "file:///b37/refused/w.md"
		r.srv.Set(w, "text/markdown", "w")
		r.watch(w)
		quiesce()

		for _, u := range uris {
			r.srv.Set(u, "text/markdown", "v2")
		}
		quiesce()
		var stale []string
		for _, u := range uris {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			entry, err := r.c.Lookup(u)
			require.NoError(t, err)
			if entry.Contents[0].Text != "v2" || sub.Mode != ledger.ModePush || !r.srv.Subscribed(u) {
				stale = append(stale, fmt.Sprintf("%s (%s mode: %q, carried: %v)", u, sub.Mode, sub.ModeReason, r.srv.Subscribed(u)))
			}
		}
		require.Empty(t, stale, "changes that never reached Lookup, or URIs the server does not push")
	})
}

// Notifications of a replaced stream (the old stream id), and of a URI the
// stream does not carry and nobody watches (the current id), make the
// client read nothing and the engine keep nothing.
func TestNotificationsOfAnotherStreamOrAnUnwatchedURIAreIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, b, x = "file:///b40/foreign/a.md", "file:///b40/foreign/b.md", "file:///b40/foreign/x.md"
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{a, b, x}})
		r.watch(a)
		r.watch(b) // replaces a's first stream
		minutes(1)
		ids := r.wire.listenIDs()
		require.Len(t, ids, 2)
		old, cur := ids[0], ids[1]
		r.wire.set(func(w *faultWire) {
			w.rewrite = func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification {
				if m.Method != mcp.MethodNotificationResourceUpdated {
					return []mcp.JSONRPCNotification{m}
				}
				switch m.Params.AdditionalFields["uri"] {
				case a: // only on the replaced stream
					return []mcp.JSONRPCNotification{withStreamID(m, old)}
				case b: // and, on the current one, x, which nobody watches
					xm := m
					xm.Params.AdditionalFields = map[string]any{"uri": x}
					return []mcp.JSONRPCNotification{m, withStreamID(xm, cur)}
				}
				return nil
			}
		})
		readsA, readsX := r.srv.Reads(a), r.srv.Reads(x)
		r.srv.Set(a, "text/markdown", "v2")
		r.srv.Set(b, "text/markdown", "v2")
		minutes(1)
		require.Equal(t, readsA, r.srv.Reads(a), "a notification of a replaced stream was read")
		require.Equal(t, readsX, r.srv.Reads(x), "a notification of a URI nobody watches was read")
		_, err := r.c.Lookup(x)
		require.Error(t, err, "the engine keeps a URI nobody watches")
		got, desc := r.state(b)
		require.Equal(t, "v2", got, desc)
	})
}

// A server that refuses every listen request with a JSON-RPC error: each
// URI polls, saying why, and serves current content within its poll bound
// for an hour; the retries of the stream stay bounded per revalidation
// period.
func TestServerRefusingEveryListenIsPolledWithinTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b40/refuse/a.md", "file:///b40/refuse/b.md", "file:///b40/refuse/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.refuse = listensWhere(anyURIs)
		}})
		for _, u := range uris {
			sub, err := r.c.Subscribe(t.Context(), u)
			require.NoError(t, err)
			require.Equal(t, ledger.ModePoll, sub.Mode)
			require.Contains(t, sub.ModeReason, "subscribe failed")
		}
		time.Sleep(30 * time.Minute) // the backoff reaches RevalidateEvery
		quiesce()
		before := r.listens()
		for i := range 12 { // an hour
			time.Sleep(5 * time.Minute)
			want := fmt.Sprintf("v%d", i)
			for _, u := range uris {
				r.srv.Set(u, "text/markdown", want)
			}
			time.Sleep(40 * time.Second) // PollEvery 30 s + 20% jitter
			quiesce()
			for _, u := range uris {
				got, desc := r.state(u)
				require.Equal(t, want, got, "%s: %s", u, desc)
			}
		}
		listens := r.listens() - before
		t.Logf("%d listen requests in 12 revalidation periods", listens)
		require.LessOrEqual(t, listens, 12*2*len(uris))
	})
}

// x is watched (push). A Subscribe(y) and a SubscribeAll naming y run at
// once, and the next listen stream is refused (once, or every time until
// the fault ends). Whatever the interleaving, once settled y is carried and
// acknowledged (push) or polls with a reason, x stays carried, and both
// serve current content in the current session.
func TestSubscribeAndSubscribeAllOfOneURIRacingARefusedStreamSettle(t *testing.T) {
	const x, y = "file:///b45/rl/x.md", "file:///b45/rl/y.md"
	eachCase(t, []bool{false, true}, func(steady bool) string { return fmt.Sprintf("steady=%v", steady) }, func(t *testing.T, steady bool) {
		r := buildRig(t, eras[1], rigConfig{uris: []string{x, y}})
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sub.Mode)
		quiesce()
		var mu sync.Mutex
		refused := 0
		r.wire.refuseWhen(func(method, _ string, _ int) bool {
			if method != string(mcp.MethodSubscriptionsListen) {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			if steady || refused == 0 {
				refused++
				return true
			}
			return false
		})
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = r.c.Subscribe(context.Background(), y) })
		wg.Go(func() { _, _ = r.c.SubscribeAll(context.Background(), []string{y}) })
		wg.Wait()
		quiesce()
		if steady {
			r.wire.refuseWhen(nil)
		}
		r.srv.Set(x, "text/markdown", "v2")
		r.srv.Set(y, "text/markdown", "v2")
		minutes(40)
		gen := r.c.Health().SessionGeneration
		for _, u := range []string{x, y} {
			s, e, desc := r.look(u)
			t.Log(desc)
			require.True(t, openIn(s, gen), desc)
			if s.Mode == ledger.ModePush {
				require.True(t, r.srv.Subscribed(u), desc)
			} else {
				require.NotEmpty(t, s.ModeReason, desc)
			}
			require.Equal(t, "v2", e.Contents[0].Text, desc)
		}
	})
}

// pushRetryInFlight sets up a (pushed) and x (polled: its stream was
// refused), then has the server accept streams again but acknowledge each
// only after ackDelay (on this connection: a later one acknowledges at
// once), and waits until the stream that tries x again is out.
func pushRetryInFlight(t *testing.T, ackDelay time.Duration) (*rig, string, string) {
	const a, x = "file:///b41/race/a.md", "file:///b41/race/x.md"
	r := buildRig(t, eras[1], rigConfig{uris: []string{a, x}})
	r.watch(a)
	r.wire.set(func(w *faultWire) { w.refuse = listensWhere(func(u []string) bool { return slices.Contains(u, x) }) })
	sx, err := r.c.Subscribe(t.Context(), x)
	require.NoError(t, err)
	require.Equal(t, ledger.ModePoll, sx.Mode)
	quiesce()
	r.wire.set(func(w *faultWire) { w.refuse = nil; w.ackDelay = ackDelay })
	// The late acknowledgements are this connection's server's: a
	// Reconnect reaches a server that acknowledges at once.
	r.setOnDial(func(int, *mcpsynctest.Transport) { r.wire.set(func(w *faultWire) { w.ackDelay = 0 }) })
	n := r.listens()
	for i := 0; r.listens() == n; i++ {
		require.Less(t, i, 120, "no retry of x within two minutes")
		time.Sleep(time.Second)
	}
	t.Logf("retry out: filters %v", r.wire.listenFilters())
	return r, a, x
}

// closeAndWait closes the client and lets the acknowledgements the wire
// still delays run out.
func closeAndWait(t *testing.T, r *rig, d time.Duration) {
	require.NoError(t, r.c.Close())
	time.Sleep(d) // the wire's delayed acknowledgements
	synctest.Wait()
}

// x polls because its stream was refused; the client tries x on a stream
// again, and the server acknowledges that stream late. A caller acting on x
// meanwhile is honoured: a URI unsubscribed or forgotten does not come back
// and the server stops carrying it; a Reconnect brings it back in push mode;
// a Close leaves nothing running. The other URI stays pushed throughout.
func TestCallerActingDuringAPushRetryIsHonoured(t *testing.T) {
	for _, delay := range []time.Duration{10 * time.Second, 40 * time.Second} {
		eachCase(t, []string{"unsubscribe", "forget", "reconnect", "close"}, func(op string) string { return fmt.Sprint(op, "-ack-after-", delay) }, func(t *testing.T, op string) {
			r, a, x := pushRetryInFlight(t, delay)
			done := make(chan error, 1)
			go func() {
				var err error
				switch op {
				case "unsubscribe":
					_, err = r.c.Unsubscribe(context.Background(), x)
				case "forget":
					err = r.c.Forget(context.Background(), x)
				case "reconnect":
					err = r.c.Reconnect(context.Background())
				case "close":
					err = r.c.Close()
				}
				done <- err
			}()
			time.Sleep(2 * delay)
			quiesce()
			require.NoError(t, <-done)
			if op == "close" {
				time.Sleep(delay)
				synctest.Wait()
				return
			}
			time.Sleep(10 * time.Minute)
			quiesce()
			ta, da := r.state(a)
			_, dx := r.state(x)
			t.Logf("a: %s %s; x: %s", ta, da, dx)
			sa, _ := r.c.Engine().Subscription(a)
			require.Equal(t, ledger.ModePush, sa.Mode, da)
			require.True(t, r.srv.Subscribed(a), da)
			sx, _ := r.c.Engine().Subscription(x)
			switch op {
			case "unsubscribe", "forget":
				require.False(t, r.srv.Subscribed(x), dx)
				require.NotEqual(t, ledger.StateActive, sx.State, dx)
				if op == "forget" {
					_, err := r.c.Lookup(x)
					require.Error(t, err, dx)
				}
			case "reconnect":
				require.Equal(t, ledger.ModePush, sx.Mode, dx)
				require.True(t, r.srv.Subscribed(x), dx)
			}
			// a still gets its changes.
			r.srv.Set(a, "text/markdown", "v9")
			time.Sleep(5 * time.Second)
			quiesce()
			got, da := r.state(a)
			require.Equal(t, "v9", got, da)
			closeAndWait(t, r, delay)
		})
	}
}

// A server that refuses its first k listen requests while a SubscribeAll of
// 50 URIs runs, then accepts every one: within two minutes every URI is
// pushed, at a cost of about two listen requests per refusal, and no more
// follow.
func TestTransientListenRefusalInSubscribeAllEndsPushed(t *testing.T) {
	eachCase(t, []int{1, 2, 3, 10}, nil, func(t *testing.T, k int) {
		var uris []string
		for i := range 50 {
			uris = append(uris, fmt.Sprintf("file:///b41/tsa/%02d.md", i))
		}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.refuse = func(req wireRequest) bool { return req.method == string(mcp.MethodSubscriptionsListen) && req.n <= k }
		}})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		quiesce()
		push, lines := r.pushed(uris)
		require.Equal(t, len(uris), push, "%v", lines)
		require.LessOrEqual(t, r.listens(), 2*k+2)
		time.Sleep(20 * time.Minute)
		quiesce()
		require.LessOrEqual(t, r.listens(), 2*k+2)
	})
}

// 20 URIs pushed, then the server refuses every stream and ends the open
// one: each URI polls (about one listen request each), the retries stay
// near one per URI per revalidation period for an hour, and once the server
// accepts streams again every URI is pushed within ten minutes.
func TestListenRefusedForAnHourPollsThenPushesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var uris []string
		for i := range 20 {
			uris = append(uris, fmt.Sprintf("file:///b41/rap/%02d.md", i))
		}
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()
		before := r.listens()
		r.wire.set(func(w *faultWire) { w.refuse = listensWhere(anyURIs) })
		r.faults().EndListenStreams()
		time.Sleep(10 * time.Second)
		quiesce()
		// About one each; how the reopens interleave with the refused
		// streams (a reopen may find another's stream still pending)
		// can add a few, never one per URI more.
		require.LessOrEqual(t, r.listens()-before, 2*len(uris))
		time.Sleep(time.Hour)
		quiesce()
		push, _ := r.pushed(uris)
		require.Zero(t, push)
		require.LessOrEqual(t, r.listens()-before, 12*2*len(uris))
		r.wire.set(func(w *faultWire) { w.refuse = nil })
		time.Sleep(10 * time.Minute)
		quiesce()
		push, lines := r.pushed(uris)
		require.Equal(t, len(uris), push, "%v", lines)
	})
}

// A server that refuses every subscriptions/listen (a steady fault), and a
// SubscribeAll of 40 URIs: each polls with a reason, and the client tries a
// stream again at poll ticks, backing off to RevalidateEvery. Once steady,
// at most two listen requests per URI per revalidation period, and every
// URI serves current content.
func TestSteadyListenRefusalAtScaleStaysPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		uris := numbered("file:///b42/steady/%03d.md", n)
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.refuse = listensWhere(anyURIs)
		}})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		t.Logf("SubscribeAll err: %v", err != nil)
		quiesce()
		time.Sleep(40 * time.Minute)
		quiesce()
		before := r.listens()
		time.Sleep(5 * time.Minute)
		quiesce()
		per := r.listens() - before
		t.Logf("listens: %d in all, %d in the last 5 min", r.listens(), per)
		for _, u := range uris {
			r.srv.Set(u, "text/markdown", "v2")
		}
		time.Sleep(2 * time.Minute)
		quiesce()
		var bad []string
		for _, u := range uris {
			text, desc := r.state(u)
			if text != "v2" {
				bad = append(bad, desc)
			}
		}
		require.Empty(t, bad)
		require.LessOrEqual(t, per, 2*n, "listens per revalidation period under a steady refusal")
	})
}

// A server that refuses, with a JSON-RPC error, every subscriptions/listen
// stream that names one particular URI p, and accepts every other. a is
// subscribed first and is pushed; then p is subscribed. Every change of a,
// 47 s apart over half an hour, is pushed and read within seconds (a keeps
// its stream whatever the server does to p), and the steady refusal of p
// draws at most four listen requests per revalidation period.
func TestRefusalOfOneURIKeepsTheOthersStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, p = "file:///b40/poison/a.md", "file:///b40/poison/p.md"
		r := buildRig(t, eras[1], rigConfig{uris: []string{a, p}, wire: func(w *faultWire) {
			w.refuse = listensWhere(func(uris []string) bool { return slices.Contains(uris, p) })
		}})
		sa, err := r.c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sa.Mode)
		sp, err := r.c.Subscribe(t.Context(), p)
		require.NoError(t, err)
		t.Logf("p: %s (%s)", sp.Mode, sp.ModeReason)
		quiesce()

		before := r.listens()
		var late []string
		for i := range 40 {
			// Changes of a, 47 s apart over half an hour: each must be
			// pushed, and read within a few seconds.
			time.Sleep(47 * time.Second)
			want := fmt.Sprintf("v%d", i+2)
			r.srv.Set(a, "text/markdown", want)
			time.Sleep(5 * time.Second)
			quiesce()
			if got, desc := r.state(a); got != want {
				late = append(late, fmt.Sprintf("change %d (t=%v): serves %q, server has %q; %s", i, time.Duration(i+1)*52*time.Second, got, want, desc))
			}
		}
		listens := r.listens() - before
		f := r.wire.listenFilters()
		t.Logf("%d listen requests in %v; the last four: %v", listens, 40*52*time.Second, f[len(f)-4:])
		require.Empty(t, late, "changes of an accepted URI not pushed while the server refuses another one")
		// 40*52 s is about 7 revalidation periods of 5 minutes.
		require.LessOrEqual(t, listens, 7*4, "a steady refusal of one URI drew a listen storm")
	})
}

// A server that steadily refuses any listen stream naming x, and accepts
// every stream without it. y is watched on an acknowledged stream;
// Subscribe(x) sends a stream naming both, which is refused: x polls. Once
// the fault is steady (ten minutes) the client sends at most ten listen
// requests per revalidation period (5 minutes), rather than one every
// second as a backoff reset by y's acknowledgements would.
func TestSteadilyRefusedURIDrawsNoListenStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b39/poison/x.md"
		const y = "file:///b39/poison/y.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(x, "text/markdown", "x1")
		r.srv.Set(y, "text/markdown", "y1")
		r.wire.refuseListens(func(uris []string) bool { return slices.Contains(uris, x) })
		listen := string(mcp.MethodSubscriptionsListen)

		r.watch(y)
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePoll, sub.Mode, "x's stream was refused")

		// Let the fault become steady: ten minutes.
		minutes(10)
		before, refusedBefore := r.listens(), r.wire.refusals(listen)
		minutes(5)
		n, nr := r.listens()-before, r.wire.refusals(listen)-refusedBefore
		t.Logf("listen requests in the 5 minutes after the first 10: %d (%d refused); total %d", n, nr, r.listens())
		if n > 10 {
			t.Fatalf("%d listen requests (%d refused) in one revalidation period against a server whose refusal never changes", n, nr)
		}
	})
}

// A server that acknowledges every subscriptions/listen stream and then
// ends it at once (100 ms later, an empty result): a steady fault. An
// acknowledgement does not reset the pacing of the streams the server
// ends, so the client sends a bounded number of listen requests per
// revalidation period (a few per URI at most), rather than one a second
// with a re-read of every URI each time.
func TestStreamsEndedRightAfterTheirAcknowledgementDrawNoStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b40/end/a.md", "file:///b40/end/b.md", "file:///b40/end/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()

		r.wire.set(func(w *faultWire) { w.endAfterAck = 100 * time.Millisecond })
		// One more Subscribe puts the fault on the stream that is open now.
		const d = "file:///b40/end/d.md"
		r.srv.Set(d, "text/markdown", "v1")
		r.watch(d)

		before, reads := r.listens(), r.srv.Reads(uris[0])
		const periods = 6 // revalidation periods of 5 minutes
		for range periods * 5 {
			minutes(1)
		}
		listens := r.listens() - before
		t.Logf("%d listen requests and %d reads of %s in %d revalidation periods", listens, r.srv.Reads(uris[0])-reads, uris[0], periods)
		for _, u := range append(uris, d) {
			_, desc := r.state(u)
			t.Logf("%s: %s", u, desc)
		}
		// Generous: a few streams per period, per URI even.
		limit := periods * 4 * (len(uris) + 1)
		require.LessOrEqual(t, listens, limit, fmt.Sprintf("a steady fault drew %d listen requests in %d revalidation periods", listens, periods))
	})
}

// A server that ends every subscriptions/listen stream exactly d after
// acknowledging it (an empty result), or a network that cuts every stream
// then (no answer: the server learns of the end later, and the client
// distrusts the stream that follows until RequestTimeout has passed), a
// steady fault, with ten URIs subscribed. On either side of the time
// after which a stream counts as steady (30 s), and with the steady case
// too, the client sends at most four listen requests, and reads each URI
// at most four times, per revalidation period.
func TestStreamsEndedAtTheSteadyBoundaryDrawNoStorm(t *testing.T) {
	for _, cut := range []bool{false, true} {
		eachCase(t, []time.Duration{29 * time.Second, 30 * time.Second}, func(d time.Duration) string { return fmt.Sprintf("%v/cut=%v", d, cut) }, func(t *testing.T, d time.Duration) {
			var uris []string
			for i := range 10 {
				uris = append(uris, fmt.Sprintf("file:///b41/steady/%02d.md", i))
			}
			r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) { w.endAfterAck, w.cut = d, cut }})
			_, err := r.c.SubscribeAll(t.Context(), uris)
			require.NoError(t, err)
			time.Sleep(15 * time.Minute) // the fault becomes steady
			quiesce()
			before, reads := r.listens(), r.srv.Reads(uris[0])
			const periods = 12
			time.Sleep(periods * 5 * time.Minute)
			quiesce()
			listens, nreads := r.listens()-before, r.srv.Reads(uris[0])-reads
			t.Logf("streams ended %v after their acknowledgement: %d listen requests and %d reads of %s in %d revalidation periods",
				d, listens, nreads, uris[0], periods)
			require.NoError(t, r.c.Close())
			time.Sleep(time.Minute) // the wire's stream timers
			require.LessOrEqual(t, listens, periods*4, "listen requests")
			require.LessOrEqual(t, nreads, periods*4, "reads of one URI")
		})
	}
}

// 2026-07-28, over stdio. A server that never answers a cancelled
// subscriptions/listen request (it ignores notifications/cancelled, or its
// clean-up hangs): every replacement outlives its patience for the old
// stream's end, and that end never comes. A steady fault: the client sends
// a bounded number of listen requests and reads per revalidation period
// (four streams per period at most, as for a server that ends streams,
// and a few reads of each URI), rather than a replacement, and a reopen
// and read of every URI, every RequestTimeout. Real time: the server is a
// process.
func TestServerThatNeverAnswersACancelledListenDrawsNoStorm(t *testing.T) {
	const revalidate = 10 * time.Second
	r := buildRig(t, eras[1], rigConfig{
		opts: mcpsync.ClientOptions{RequestTimeout: time.Second, RevalidateEvery: revalidate, PollEvery: revalidate},
		dial: mcpsync.CommandDialer(mcpsync.Command{
			Name: os.Args[0], Args: []string{"-test.run=^$"},
			Env: append(os.Environ(), deafListenServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
		}),
	})
	for _, u := range deafListenURIs {
		sub, err := r.c.Subscribe(t.Context(), u)
		require.NoError(t, err)
		t.Logf("%s: %s %s", u, sub.State, sub.Mode)
	}
	read := string(mcp.MethodResourcesRead)
	listens, reads := r.requests(string(mcp.MethodSubscriptionsListen)), r.requests(read)
	const periods = 2
	time.Sleep(periods * revalidate)
	listens, reads = r.requests(string(mcp.MethodSubscriptionsListen))-listens, r.requests(read)-reads
	t.Logf("%d listen requests and %d reads in %d revalidation periods", listens, reads, periods)
	assert.LessOrEqual(t, listens, periods*4, "listen requests against a server that never answers a cancelled one")
	assert.LessOrEqual(t, reads, periods*4*len(deafListenURIs), "reads against a server that never answers a cancelled listen")
}

// (2026-07-28) Two Subscribes of x (two callers, or a SubscribeAll naming
// it twice) arrive while the close an Unsubscribe began is still waiting
// for the stream that leaves x out. Once that stream is acknowledged the
// close is finished and x is opened anew; neither Subscribe returns
// without an error before x is open (push or poll): the close of the
// Unsubscribe before them is not theirs. The opening write is held until
// the first of them returned, so that the test does not depend on which
// goroutine runs first.
func TestSubscribesDuringAHalfDoneCloseReturnOpenSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///halfdone/x.md", "file:///halfdone/y.md"
		r := buildRig(t, eras[1], rigConfig{ledger: true, uris: []string{x, y}, opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}})
		r.watch(x, y)
		quiesce()

		// The stream that leaves x out is held: the close waits for it.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		_, _ = r.c.Unsubscribe(gone, x) // its pass runs without the caller
		time.Sleep(time.Second)         // past the patience for the old stream's end
		synctest.Wait()
		require.True(t, arrived(hold), "the stream without x is held")

		first := make(chan struct{})
		var once sync.Once
		r.ledger.beforeWrite(openingWriteOf(x), func() {
			select {
			case <-first:
			case <-time.After(time.Second):
			}
		})
		type result struct {
			sub mcpsync.Subscription
			err error
		}
		results := make(chan result, 2)
		for range 2 {
			go func() {
				sub, err := r.c.Subscribe(context.Background(), x)
				results <- result{sub, err}
				once.Do(func() { close(first) })
			}()
		}
		synctest.Wait()
		hold.Release()
		for range 2 {
			res := <-results
			if res.err != nil {
				continue
			}
			assert.True(t, openState(res.sub.State) && (res.sub.Mode == ledger.ModePush || res.sub.Mode == ledger.ModePoll),
				"Subscribe returned no error with a subscription that is not open: %s %q (generation %d)", res.sub.State, res.sub.Mode, res.sub.SubscriptionGeneration)
		}
	})
}

// 2026-07-28 over a stream transport (stdio, where the wire keeps a
// cancelled listen request open for its answer): a server that
// acknowledges the stream and keeps it open, as it should, for ten
// minutes. The stream is the client's for as long as nothing changes: one
// listen request, and the subscription keeps its generation (a stream
// the client cut itself would reopen and read every URI it carries, and
// leave each unnotified between streams). The server is scripted over
// pipes, so that the wire takes it for a remote one.
func TestListenStreamTheServerKeepsOpenIsNeverReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///kept/x.md"
		var mu sync.Mutex // protects listens
		listens := 0
		serve := func(req map[string]any, send func(any)) {
			id := req["id"]
			switch req["method"] {
			case "server/discover":
				send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{
					"supportedVersions": []string{"2026-07-28"},
					"capabilities":      map[string]any{"resources": map[string]any{"subscribe": true}},
					"_meta":             map[string]any{mcp.MetaKeyServerInfo: map[string]any{"name": "peer", "version": "1"}},
				}})
			case "subscriptions/listen":
				mu.Lock()
				listens++
				mu.Unlock()
				params, _ := req["params"].(map[string]any)
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": map[string]any{
					"notifications": params["notifications"],
					"_meta":         map[string]any{mcp.MetaKeySubscriptionID: id},
				}})
				// Open until the client cancels it: no answer yet.
			case "resources/read":
				send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{
					"contents": []any{map[string]any{"uri": x, "mimeType": "text/markdown", "text": "v1"}}}})
			default:
				if id != nil {
					send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{}})
				}
			}
		}
		c, err := mcpsync.Connect(t.Context(), mcpsync.StreamDialer(scriptedServer(t, serve)), &mcpsync.ClientOptions{
			Subject: alice, ProtocolVersion: "2026-07-28", RevalidateEvery: time.Hour,
		})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		first, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, first.Mode, first.ModeReason)
		minutes(10)
		sub, err := c.Engine().Subscription(x)
		require.NoError(t, err)
		mu.Lock()
		n := listens
		mu.Unlock()
		assert.Equal(t, 1, n, "listen requests sent while the server kept the first stream open (RequestTimeout %v)", 30*time.Second)
		assert.Equal(t, first.SubscriptionGeneration, sub.SubscriptionGeneration, "generations opened meanwhile")
	})
}
