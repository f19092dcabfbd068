package mcpsync_test

// Ledger faults while a subscription is reopened: a write of the close and
// open that a reconnect, a re-established listen stream, a left-out URI or
// a refused re-subscribe needs fails (a ledger briefly, or for an hour,
// unavailable). The failure is visible when it happens (OnError is told a
// *ReopenError, Lookup's Degraded says why), the URI never gets stuck, and
// once the ledger is healthy it comes back: open in the current session,
// notified by the server, serving current content, not degraded.

import (
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

// A re-established listen stream whose old generation cannot be closed
// (its close epoch cannot be reserved, once) leaves that generation open:
// the URI keeps its revalidation reads, so a change is read within the
// staleness bound the subscription publishes, and Lookup never serves a
// copy older than that bound without saying so.
func TestReestablishWhoseCloseEpochFailsKeepsTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.ledger.failReservations(1, ledger.CounterCloseEpoch)
		r.reestablish()
		if r.ledger.failures() != 1 {
			t.Fatalf("the close was to fail once, %d failures", r.ledger.failures())
		}

		r.srv.Set(faultURI, "text/markdown", "v2")
		changed := time.Now()
		for range 12 {
			time.Sleep(time.Minute)
			quiesce()
			entry, err := r.c.Lookup(faultURI)
			if err != nil {
				t.Fatal(err)
			}
			text := entry.Contents[0].Text
			if text != "v2" && entry.Degraded == "" && time.Since(changed) > entry.StalenessBound {
				t.Fatalf("serves %q %v after the change, past its bound %v, without saying so", text, time.Since(changed), entry.StalenessBound)
			}
		}
		if got := r.served(); got != "v2" {
			t.Fatalf("serves %q, the server has v2", got)
		}
	})
}

// Poll mode (a server without the subscribe capability): a Reconnect whose
// reopen meets failing ledger writes is told, and a later poll tick heals
// the URI: open again in the current session, reading the server's current
// content. The opening write fails twice in a row (at the Reconnect, then
// at the first repair), or the activation fails once (leaving the URI
// SUBSCRIBING in the new session). Both eras.
func TestPolledURIWhoseReopenWriteFailsHeals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int
		match func(string, *ledger.Record) bool
		wait  func(r *rig) // for the poll tick that heals it
	}{
		{"opening-write-fails-twice", 2, openingWrite, func(*rig) { minutes(6) }},
		{"activation-fails-once", 1, activatingWrite, (*rig).sixRevalidations},
	} {
		for _, w := range eras {
			t.Run(tc.name+"/"+w.version, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := buildRig(t, w, rigConfig{server: &mcpsynctest.ServerOptions{NoSubscribe: true}, ledger: true})
					sub, err := r.c.Subscribe(t.Context(), faultURI)
					require.NoError(t, err)
					require.Equal(t, mcpsync.ModePoll, sub.Mode)

					r.ledger.failWrites(tc.fails, tc.match)
					require.Error(t, r.c.Reconnect(t.Context()))
					quiesce()
					r.requireToldReopen(faultURI)
					r.srv.Set(faultURI, "text/markdown", "v2")
					tc.wait(r)
					require.Equal(t, tc.fails, r.ledger.failures())
					r.requireHealed(faultURI, "v2")
				})
			})
		}
	}
}

// 2025-11-25. The client's request subscribing a URI again after a late
// unsubscribe is refused, and the reopen that follows meets one failed
// ledger write (each write of the close and the next generation in turn,
// beginning the close first). The failure is visible (OnError, Lookup's
// Degraded), and once the ledger is healthy the URI is open again in the
// current session, polling with a reason (the server still refuses it) or
// notified in push mode, serving current content, not degraded, and the
// client does not keep asking the server (at most one subscribe in a quiet
// ten minutes).
func TestRefusedResubscribeWhoseReopenWriteFailsHeals(t *testing.T) {
	const a = "file:///b44/ledger/x.md"
	matchers := append([]struct {
		name  string
		match func(string, *ledger.Record) bool
	}{{"begin-close", writeTo(mcpsync.StateUnsubscribing)}}, reopenWrites...)
	for _, m := range matchers {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := buildRig(t, eras[0], rigConfig{ledger: true, uris: []string{a}})
				var armed sync.Once
				lateUnsubscribe(t, r, a, refusingSubscribesOf(a, func() {
					armed.Do(func() { r.ledger.failWrites(1, m.match) })
				}))
				t.Logf("ledger failures: %d", r.ledger.failures())
				sub, _ := r.c.Engine().Subscription(a)
				e, _ := r.c.Lookup(a)
				t.Logf("right after: %s %s %q degraded %q", sub.State, sub.Mode, sub.ModeReason, e.Degraded)
				if r.ledger.failures() > 0 {
					r.requireToldReopen(a)
				}
				minutes(10)
				subs := r.requests(string(mcp.MethodResourcesSubscribe))
				minutes(10)
				subs = r.requests(string(mcp.MethodResourcesSubscribe)) - subs
				r.srv.Set(a, "text/markdown", "v2")
				minutes(7)
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

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened. When one ledger write
// of that close and open fails once (the one opening the next generation,
// the one finishing the close, or the activation), the failure is told
// when it happens, and once the ledger is healthy the URI comes back with
// current content (DESIGN: everything right is eventually accepted, or the
// failure is visible; nothing is served stale without saying so).
func TestReestablishWhoseWriteFailsIsToldAndHeals(t *testing.T) {
	for _, m := range reopenWrites {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, eras[1])
				r.subscribe()

				r.reestablishRefusingOnce(m.match)
				r.requireToldReopen(faultURI)

				// The ledger is healthy again; the server's content moves on.
				r.requireHealsAfterAChange(faultURI)
			})
		})
	}
}

// The server leaves x out of the acknowledgement of the stream that adds y,
// so the client reopens x, and the write opening x's next generation fails,
// once. The failure is told; once the ledger and the server are healthy
// again, x comes back with current content.
func TestReopenOfALeftOutURIWhoseWriteFailsIsToldAndHeals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///b33/x.md", "file:///b33/y.md"
		r := newLedgerRig(t, eras[1], x, y)
		sx, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sx.Mode)
		quiesce()

		// The server leaves x out of the acknowledgement of the stream
		// that adds y; the client reopens x, and the write opening its next
		// generation fails, once.
		r.ledger.failWrites(1, openingWriteOf(x))
		r.wire.leaveOut(x)
		_, err = r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "x's reopen was refused by the ledger")
		r.requireToldReopen(x)

		// The ledger and the server are healthy again; x's content moves on.
		r.wire.leaveOut("")
		r.requireHealsAfterAChange(x)
	})
}

// A listen stream the server ends is re-established, and the first write of
// the URI's reopen (the one beginning the close) fails once: OnError is
// told a *ReopenError and Lookup says the copy is degraded. Once the ledger
// is healthy the URI comes back: within six revalidation periods a listen
// stream carries it again (the server notifies it), Lookup is no longer
// degraded, and a change is pushed, not only found by the next
// revalidation.
func TestReopenWhoseBeginCloseFailsIsRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))

		// The write beginning the reopen's close fails, once.
		r.reestablishRefusingOnce(writeTo(mcpsync.StateUnsubscribing))
		r.requireToldReopen(faultURI)

		// The ledger is healthy again; six revalidation periods pass.
		r.sixRevalidations()
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.True(t, r.srv.Subscribed(faultURI),
			"no listen stream carries the URI half an hour later, yet its subscription is %s in %s mode", sub.State, sub.Mode)
		assert.Empty(t, entry.Degraded, "the URI is never repaired: Lookup stays degraded")

		// A change is notified, not only found by the next revalidation.
		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(time.Second)
		quiesce()
		assert.Equal(t, "v2", r.served(), "a change of a push subscription is not notified")
	})
}

// 2026-07-28. The server ends the listen stream; the reopen that follows
// meets one failed write of its close's first step (the generation stays
// ACTIVE in push mode, no stream carries it). Once the ledger is healthy,
// the URI is open in push mode on a stream the server keeps, not degraded,
// and serves current content.
func TestReestablishWhoseBeginCloseFailsEndsPushedOnAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.reestablishRefusingOnce(writeTo(mcpsync.StateUnsubscribing))
		r.requireToldReopen(faultURI)
		r.requireHealsAfterAChange(faultURI)
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		require.True(t, r.srv.Subscribed(faultURI), "push but the server carries it on no stream")
	})
}

// A URI whose reopen stopped half way (one ledger write of the close and
// open failed) and that a later revalidation tick opened again is pushed
// again: a change on the server reaches it by notification within a second,
// not by the next revalidation minutes later. The repaired subscription is
// carried by the listen stream (2026-07-28) or subscribed on the server
// (2025-11-25, after a Reconnect whose activation failed) again.
func TestRepairedURIIsPushedAgain(t *testing.T) {
	eachReopenFault(t, func(t *testing.T, r *rig, reopen func(r *rig, n int)) {
		reopen(r, 1)
		require.Equal(t, 1, r.ledger.failures())
		r.sixRevalidations()
		r.requireHealed(faultURI, "v1")
		r.requirePushed()
	})
}

// A ledger that refuses a reopen's write every time for an hour, then
// recovers: the URI is repaired once it does, and OnError hears one
// *ReopenError per revalidation tick at most, not a burst (DESIGN:
// everything right is eventually accepted; a repeating failure is visible
// without flooding the caller).
func TestRepeatingLedgerFaultHealsWithoutFloodingOnError(t *testing.T) {
	eachReopenFault(t, func(t *testing.T, r *rig, reopen func(r *rig, n int)) {
		reopen(r, 1000)
		r.requireReopensPaced()
		r.ledger.failWrites(0, nil)
		r.requireHealsAfterAChange(faultURI)
	})
}

// eachReopenFault runs test once for each way the reopen of a watched URI
// meets failing ledger writes, in a subtest and a bubble of its own, on a
// ledger rig of that way's era with faultURI subscribed. reopen has the
// ledger refuse the next n writes of its kind, starts the reopen that
// meets them, and waits for it: a listen stream the server ends
// (2026-07-28), re-established, meeting a failing write of each of
// reopenWrites, or a Reconnect, in each era, meeting a failing activation.
func eachReopenFault(t *testing.T, test func(t *testing.T, r *rig, reopen func(r *rig, n int))) {
	type fault struct {
		name   string
		w      wiring
		reopen func(r *rig, n int)
	}
	var faults []fault
	for _, m := range reopenWrites {
		faults = append(faults, fault{"reestablish-" + m.name, eras[1], func(r *rig, n int) {
			r.ledger.failWrites(n, m.match)
			r.reestablish()
		}})
	}
	for _, w := range eras {
		faults = append(faults, fault{"reconnect-activate-" + w.name, w, func(r *rig, n int) {
			r.ledger.failWrites(n, activatingWrite)
			require.Error(r.t, r.c.Reconnect(r.t.Context()))
			quiesce()
		}})
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, f.w)
				r.subscribe()
				test(t, r, f.reopen)
			})
		})
	}
}

// requireReopensPaced waits an hour of failing writes and checks that
// OnError heard at most one *ReopenError per revalidation period (5 min,
// jitter 20%), plus the first failure.
func (r *rig) requireReopensPaced() {
	t := r.t
	t.Helper()
	start := time.Now()
	for range 60 {
		time.Sleep(time.Minute)
		quiesce()
		limit := 2 + int(time.Since(start)/(4*time.Minute))
		if n := r.reopenErrors(); n > limit {
			t.Fatalf("%d *ReopenError in %v: more than one per revalidation tick", n, time.Since(start))
		}
	}
	require.Positive(t, r.reopenErrors(), "the failing reopen was never told")
}

// A listen stream the server ends is re-established, and the write
// finishing the URI's close fails once: the URI is left UNSUBSCRIBING in
// the current session. The caller then unsubscribes it, before any tick
// repairs it. Unsubscribe is documented as closing the generation and being
// idempotent, and it returns no error: after it returned the generation is
// closed (CLOSED or UNSUBSCRIBE_UNKNOWN, not UNSUBSCRIBING), and a later
// Subscribe of the same URI opens a new generation and serves the current
// text, as Subscribe promises.
func TestUnsubscribeDecidesAHalfDoneClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.reestablishRefusingOnce(writeTo(mcpsync.StateClosed))
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateUnsubscribing, sub.State, "the reopen stopped half way")

		// The caller no longer wants the URI.
		_, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		time.Sleep(6 * time.Minute) // a revalidation period and more
		quiesce()
		sub, err = r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.State == mcpsync.StateUnsubscribing {
			t.Errorf("Unsubscribe returned nil, yet the generation is still %s in the current session", sub.State)
		}

		// Then it wants it again.
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		sub, err = r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err, "Subscribe after Unsubscribe (subscription %s, generation %d)", sub.State, sub.SubscriptionGeneration)
		quiesce()
		require.Equal(t, "v2", r.served())
	})
}

// The reopen stopped after the close instead (the write opening the next
// generation keeps failing): the URI is CLOSED in the current session. An
// Unsubscribe of it still tells the server: afterwards the server does not
// notify the URI, and a stream opened later for another URI does not carry
// it either.
func TestUnsubscribeOfAHalfDoneReopenTellsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRigWatching(t, "file:///docs/other.md")

		// The write opening its next generation fails until the caller
		// lets it go: the repair a read of it would start fails too.
		r.ledger.failWrites(1000, openingWriteOf(faultURI))
		r.reestablish()
		require.GreaterOrEqual(t, r.ledger.failures(), 1, "the write opening the next generation was refused")
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateClosed, sub.State, "the reopen stopped half way")

		_, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		if r.srv.Subscribed(faultURI) {
			t.Errorf("Unsubscribe returned nil, yet the server is still asked to notify %s", faultURI)
		}
		// Another Subscribe replaces the stream: it must not carry the URI
		// the caller let go of.
		const third = "file:///docs/third.md"
		r.srv.Set(third, "text/markdown", "v1")
		_, err = r.c.Subscribe(t.Context(), third)
		require.NoError(t, err)
		quiesce()
		if r.srv.Subscribed(faultURI) {
			t.Errorf("a stream opened after Unsubscribe still carries %s", faultURI)
		}
	})
}

// 2026-07-28. A first Subscribe of x whose opening write fails returns the
// error and leaves x unwatched; the server is never told to notify x: a
// later Subscribe of y replaces the listen stream, and the new stream does
// not carry x. Once settled x is not open, and the server does not notify
// it.
func TestFailedFirstSubscribeLeavesNothingOnTheListenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///failed/first/x.md", "file:///failed/first/y.md"
		r := buildRig(t, eras[1], rigConfig{ledger: true, uris: []string{x, y}})
		r.subscribe()
		r.ledger.failWrites(1, writeOf(x, mcpsync.StateSubscribing))
		_, err := r.c.Subscribe(t.Context(), x)
		require.Error(t, err, "the write opening x failed")
		quiesce()
		_, err = r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		quiesce()
		for i, f := range r.wire.listenFilters() {
			t.Logf("listen stream %d carries %v", i+1, f)
		}
		assert.False(t, r.srv.Subscribed(x), "the server notifies %s, which a failed Subscribe left unwatched", x)
		r.requireWhereLeft([]string{faultURI, x, y}, map[string]bool{faultURI: true, y: true}, map[string]bool{x: true})
	})
}
