package mcpsync_test

// Ledger faults while a subscription is reopened: a write of the close and
// open that a reconnect, a re-established listen stream, a left-out URI or
// a refused re-subscribe needs fails (a ledger briefly, or for an hour,
// unavailable). The failure is visible when it happens (OnError is told a
// *ReopenError, Lookup's Degraded says why), the URI never gets stuck, and
// once the ledger is healthy it comes back: open in the current session,
// notified by the server, serving current content, not degraded.

import (
	"errors"
	"fmt"
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
// (the write closing it and opening the next fails, once) leaves that
// generation open: the URI keeps its revalidation reads, so a change is
// read within the staleness bound the subscription publishes, and Lookup
// never serves a copy older than that bound without saying so.
func TestReestablishWhoseCloseFailsKeepsTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.ledger.failWrites(1, openingWrite)
		r.reestablish()
		if r.ledger.failures() != 1 {
			t.Fatalf("the close was to fail once, %d failures", r.ledger.failures())
		}

		r.srv.Set(faultURI, "text/markdown", "v2")
		changed := time.Now()
		for range 12 {
			minutes(1)
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
					require.Equal(t, ledger.ModePoll, sub.Mode)

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
// ledger write (the one closing the generation and opening the next, or
// the activation). The failure is visible (OnError, Lookup's
// Degraded), and once the ledger is healthy the URI is open again in the
// current session, polling with a reason (the server still refuses it) or
// notified in push mode, serving current content, not degraded, and the
// client does not keep asking the server (at most one subscribe in a quiet
// ten minutes).
func TestRefusedResubscribeWhoseReopenWriteFailsHeals(t *testing.T) {
	const a = "file:///b44/ledger/x.md"
	eachCase(t, reopenWrites, func(m reopenWrite) string { return m.name }, func(t *testing.T, m reopenWrite) {
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
		if sub.Mode == ledger.ModePush {
			require.True(t, r.srv.Subscribed(a), "push but not notified")
		} else {
			require.NotEmpty(t, sub.ModeReason)
		}
	})
}

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened. When one ledger write
// of that close and open fails once (the one closing the generation and
// opening the next, or the activation), the failure is told
// when it happens, and once the ledger is healthy the URI comes back with
// current content (DESIGN: everything right is eventually accepted, or the
// failure is visible; nothing is served stale without saying so).
func TestReestablishWhoseWriteFailsIsToldAndHeals(t *testing.T) {
	eachCase(t, reopenWrites, func(m reopenWrite) string { return m.name }, func(t *testing.T, m reopenWrite) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.reestablishRefusingOnce(m.match)
		r.requireToldReopen(faultURI)

		// The ledger is healthy again; the server's content moves on.
		r.requireHealsAfterAChange(faultURI)
	})
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
		require.Equal(t, ledger.ModePush, sx.Mode)
		quiesce()

		// The server leaves x out of the acknowledgement of the stream
		// that adds y; the client reopens x, and the write opening its next
		// generation fails, once.
		r.ledger.failWrites(1, openingWriteOf(x))
		r.wire.leaveOut(x)
		r.watch(y)
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "x's reopen was refused by the ledger")
		r.requireToldReopen(x)

		// The ledger and the server are healthy again; x's content moves on.
		r.wire.leaveOut("")
		r.requireHealsAfterAChange(x)
	})
}

// A reopen of a watched URI (its generation closed, the next one opened)
// leaves the URI resumable at every write: a process killed right after
// the reopen's first write, or its second, leaves the ledger holding the
// URI open, so a fresh engine and client on that ledger resume it, read it
// in their session and serve the server's content. Never does a crash
// leave a watched URI closed, which a restart would silently stop
// watching. Each way a reopen comes: the server ends the 2026-07-28 listen
// stream carrying the URI; the server refuses, after a late
// resources/unsubscribe, the request subscribing it again (2025-11-25); the
// URI's lease comes back after an Unsubscribe let it go, and the caller
// subscribes it again.
func TestReopenKilledBetweenWritesLeavesTheURIResumable(t *testing.T) {
	const refused = "file:///reopen/killed/refused.md"
	cases := []struct {
		name   string
		uri    string
		reopen func(t *testing.T, n int) *rig // arms the crash after the reopen's nth write
	}{
		{"stream-ended", faultURI, func(t *testing.T, n int) *rig {
			r := newLedgerRig(t, eras[1])
			sub := r.subscribe()
			r.ledger.crashAfter(n, reopenOf(faultURI, sub.SubscriptionGeneration))
			r.reestablish()
			return r
		}},
		{"resubscribe-refused", refused, func(t *testing.T, n int) *rig {
			r := buildRig(t, eras[0], rigConfig{ledger: true, uris: []string{refused}})
			var armed sync.Once
			lateUnsubscribe(t, r, refused, refusingSubscribesOf(refused, func() {
				armed.Do(func() {
					sub, err := r.c.Engine().Subscription(refused)
					require.NoError(t, err)
					r.ledger.crashAfter(n, reopenOf(refused, sub.SubscriptionGeneration))
				})
			}))
			return r
		}},
		{"lease-came-back", faultURI, func(t *testing.T, n int) *rig {
			l := newLeasedLedger()
			r := buildRig(t, eras[0], rigConfig{ledger: true, store: l})
			sub := r.subscribe()
			l.setForeign(faultURI, true) // another worker took it
			_, err := r.c.Unsubscribe(t.Context(), faultURI)
			require.NoError(t, err)
			l.setForeign(faultURI, false) // and it came back
			r.ledger.crashAfter(n, reopenOf(faultURI, sub.SubscriptionGeneration))
			_, err = r.c.Subscribe(t.Context(), faultURI)
			t.Logf("Subscribe as the ledger stops: %v", err)
			quiesce()
			return r
		}},
	}
	for _, tc := range cases {
		eachCase(t, []int{1, 2}, func(n int) string { return fmt.Sprintf("%s/after-write-%d", tc.name, n) }, func(t *testing.T, n int) {
			r := tc.reopen(t, n)
			r.requireResumedOnItsLedger(tc.uri, "v1")
		})
	}
}

// A listen stream the server ends is re-established, and the write of the
// URI's reopen (closing its generation and opening the next) fails once:
// OnError is told a *ReopenError and Lookup says the copy is degraded. Once the ledger
// is healthy the URI comes back: within six revalidation periods a listen
// stream carries it again (the server notifies it), Lookup is no longer
// degraded, and a change is pushed, not only found by the next
// revalidation.
func TestReopenWhoseWriteFailsIsRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))

		// The reopen's write fails, once.
		r.reestablishRefusingOnce(openingWrite)
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

// 2026-07-28. The server ends the listen stream; the write of the reopen
// that follows fails once (the generation stays ACTIVE in push mode, no
// stream carries it). Once the ledger is healthy, the URI is open in push
// mode on a stream the server keeps, not degraded, and serves current
// content.
func TestReestablishWhoseReopenWriteFailsEndsPushedOnAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.reestablishRefusingOnce(openingWrite)
		r.requireToldReopen(faultURI)
		r.requireHealsAfterAChange(faultURI)
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sub.Mode)
		require.True(t, r.srv.Subscribed(faultURI), "push but the server carries it on no stream")
	})
}

// A URI whose reopen stopped (one ledger write of the close and open, or
// of the activation, failed) and that a later revalidation tick opened again is pushed
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
	eachCase(t, faults, func(f fault) string { return f.name }, func(t *testing.T, f fault) {
		r := newLedgerRig(t, f.w)
		r.subscribe()
		test(t, r, f.reopen)
	})
}

// requireReopensPaced waits an hour of failing writes and checks that
// OnError heard at most one *ReopenError per revalidation period (5 min,
// jitter 20%), plus the first failure.
func (r *rig) requireReopensPaced() {
	t := r.t
	t.Helper()
	start := time.Now()
	for range 60 {
		minutes(1)
		limit := 2 + int(time.Since(start)/(4*time.Minute))
		if n := r.reopenErrors(); n > limit {
			t.Fatalf("%d *ReopenError in %v: more than one per revalidation tick", n, time.Since(start))
		}
	}
	require.Positive(t, r.reopenErrors(), "the failing reopen was never told")
}

// A listen stream the server ends is re-established, and the write of the
// URI's reopen fails once: the URI is left in its old generation, open in
// the current session (never half closed: the close and the next
// generation are one write). The caller then unsubscribes it, before any
// tick repairs it. Unsubscribe is documented as closing the generation and
// being idempotent, and it returns no error: after it returned the
// generation is closed (CLOSED or UNSUBSCRIBE_UNKNOWN, not UNSUBSCRIBING),
// and a later Subscribe of the same URI opens a new generation and serves
// the current text, as Subscribe promises.
func TestUnsubscribeClosesAURIWhoseReopenFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		before := r.subscribe()

		r.reestablishRefusingOnce(openingWrite)
		r.requireOldGenerationOpen(faultURI, before.SubscriptionGeneration)

		// The caller no longer wants the URI.
		_, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		time.Sleep(6 * time.Minute) // a revalidation period and more
		quiesce()
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.State == ledger.StateUnsubscribing {
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

// The reopen's write keeps failing instead (the one closing the
// generation and opening the next): the URI stays in its old generation,
// which no acknowledged stream carries. An Unsubscribe of it still tells
// the server: afterwards the server does not notify the URI, and a stream
// opened later for another URI does not carry it either.
func TestUnsubscribeOfAURIWhoseReopenFailsTellsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRigWatching(t, "file:///docs/other.md")
		before, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)

		// The write opening its next generation fails until the caller
		// lets it go: the repair a read of it would start fails too.
		r.ledger.failWrites(1000, openingWriteOf(faultURI))
		r.reestablish()
		require.GreaterOrEqual(t, r.ledger.failures(), 1, "the write opening the next generation was refused")
		r.requireOldGenerationOpen(faultURI, before.SubscriptionGeneration)

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
		r.watch(third)
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
		r.ledger.failWrites(1, writeOf(x, ledger.StateSubscribing))
		_, err := r.c.Subscribe(t.Context(), x)
		require.Error(t, err, "the write opening x failed")
		quiesce()
		r.watch(y)
		quiesce()
		for i, f := range r.wire.listenFilters() {
			t.Logf("listen stream %d carries %v", i+1, f)
		}
		assert.False(t, r.srv.Subscribed(x), "the server notifies %s, which a failed Subscribe left unwatched", x)
		r.requireWhereLeft([]string{faultURI, x, y}, map[string]bool{faultURI: true, y: true}, map[string]bool{x: true})
	})
}

// A notification the engine cannot take (the write of its pulse fails) is
// not lost: OnError is told, Lookup says the copy is degraded while the
// pulse is owed, and the key's passes hand it over again, so the change is
// read within the retry policy's backoff, not at the next revalidation an
// hour later. Both eras.
func TestNotificationWhoseWriteFailsIsStillRead(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := owingRig(t, w)

		r.ledger.failWrites(3, writeOf(faultURI, ledger.StateUpdateSeen))
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.Equal(t, "v1", entry.Contents[0].Text)
		assert.NotEmpty(t, entry.Degraded, "while the pulse is owed, the copy says it may be stale")
		assert.NotEmpty(t, r.errs.list(), "the failed write is told")

		time.Sleep(10 * time.Second)
		quiesce()
		require.Equal(t, 3, r.ledger.failures(), "the pulse's write was to fail three times")
		entry, err = r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text, "the change is read within the retry's backoff")
		assert.Empty(t, entry.Degraded)
	})
}

// owingRig is a rig on a fault ledger, subscribed to faultURI, whose client
// revalidates hourly and retries within seconds: a change read within
// seconds of a failed write was read because a read was owed.
func owingRig(t *testing.T, w wiring) *rig {
	t.Helper()
	return subscribedLedgerRig(t, w, retryingWithin(time.Hour))
}

// subscribedLedgerRig is a rig on a fault ledger whose client has opts,
// subscribed to faultURI once its first read passed.
func subscribedLedgerRig(t *testing.T, w wiring, opts mcpsync.ClientOptions) *rig {
	t.Helper()
	r := buildRig(t, w, rigConfig{ledger: true, opts: opts})
	r.subscribe()
	quiesce()
	return r
}

// retryingWithin are the options of a client that revalidates every
// period and retries a failed pass within seconds.
func retryingWithin(every time.Duration) mcpsync.ClientOptions {
	return mcpsync.ClientOptions{RevalidateEvery: every, RetryInitial: time.Second, RetryMax: 2 * time.Second}
}

// record returns what the rig's ledger holds of uri now.
func (r *rig) record(uri string) *ledger.Record {
	r.t.Helper()
	cur, err := r.ledger.Load(r.t.Context(), uri)
	require.NoError(r.t, err)
	return cur
}

// requireNeverSilentlyStale looks faultURI up n times, step apart, and
// fails the first time it serves other than want without Degraded saying
// why: why is what the server has, and why the copy may be stale.
func (r *rig) requireNeverSilentlyStale(want string, n int, step time.Duration, why string) {
	r.t.Helper()
	for range n {
		entry, err := r.c.Lookup(faultURI)
		require.NoError(r.t, err)
		if text := entry.Contents[0].Text; text != want {
			require.NotEmpty(r.t, entry.Degraded, "serves %q at %v, %s, without saying so", text, time.Now().Format(time.TimeOnly), why)
		}
		time.Sleep(step)
		quiesce()
	}
}

// pulsesOf picks the writes that record a notification of uri beyond the
// ones its record counts now: while they fail, nothing else of uri does.
func pulsesOf(r *rig, uri string) func(string, *ledger.Record) bool {
	r.t.Helper()
	seq := r.record(uri).LastNotificationSeq
	return func(key string, next *ledger.Record) bool { return key == uri && next.LastNotificationSeq > seq }
}

// A read already out when a notification's pulse cannot be written was
// answered before the change it announces: its answer settles nothing the
// pulse owes. While the pulse is owed (its write keeps failing), Lookup says
// the copy is degraded, whatever that earlier read brought back. Both eras.
func TestDegradedStaysWhileAPulseIsOwedThoughAnEarlierReadAnswers(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := subscribedLedgerRig(t, w, mcpsync.ClientOptions{RevalidateEvery: time.Hour})

		// v2's read is answered and held; v3 is notified meanwhile,
		// and its pulse cannot be written.
		h := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		<-h.Arrived()
		r.ledger.failWrites(1000, pulsesOf(r, faultURI))
		r.srv.Set(faultURI, "text/markdown", "v3")
		quiesce()
		require.NotZero(t, r.ledger.failures(), "v3's pulse was to fail")
		h.Release()
		quiesce()

		r.requireNeverSilentlyStale("v3", 3, time.Minute, "the server has v3 and its pulse is owed")
	})
}

// A pulse written while a read is out earns one follow-up read when that
// read ends. A follow-up whose own write fails (the ledger is down for a
// moment) is not lost: the change is read within the retry policy's
// backoff, and until then Lookup says the copy is degraded. Both eras.
func TestFollowUpReadWhoseWriteFailsIsStillRead(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := owingRig(t, w)

		h := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		<-h.Arrived()
		r.srv.Set(faultURI, "text/markdown", "v3") // pulse written: a follow-up is owed
		quiesce()
		r.ledger.failWrites(1, writeOf(faultURI, ledger.StateReadPending))
		h.Release()
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the follow-up's write was to fail once")

		r.requireNeverSilentlyStale("v3", 10, time.Second, "the server has v3")
		assert.Equal(t, "v3", r.served(), "the change is read within the retry's backoff")
	})
}

// A pulse owed (its write failed) is settled by any read of the key sent
// after it: once a reconnect's read or a revalidation read brought the
// change, nothing is owed, and Lookup does not call the current copy
// degraded for as long as the ledger keeps failing the write. Both eras.
func TestAnOwedPulseIsSettledByALaterReadOfTheKey(t *testing.T) {
	cases := []struct {
		name string
		read func(r *rig)
	}{
		{"reconnect", func(r *rig) { require.NoError(r.t, r.c.Reconnect(r.t.Context())) }},
		{"revalidation", func(r *rig) { minutes(13) }}, // RevalidateEvery 10 min, ±20%
	}
	for _, w := range eras {
		for _, tc := range cases {
			t.Run(w.version+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := subscribedLedgerRig(t, w, mcpsync.ClientOptions{RevalidateEvery: 10 * time.Minute})

					r.ledger.failWrites(100000, pulsesOf(r, faultURI))
					r.srv.Set(faultURI, "text/markdown", "v2")
					quiesce()
					tc.read(r)
					quiesce()
					require.Equal(t, "v2", r.served(), "the %s read brings the change", tc.name)

					for range 6 {
						entry, err := r.c.Lookup(faultURI)
						require.NoError(t, err)
						require.Equal(t, "v2", entry.Contents[0].Text)
						require.Empty(t, entry.Degraded, "the copy is current, read after the notification (%d pulse writes failed)", r.ledger.failures())
						minutes(1)
					}
				})
			})
		}
	}
}

// A ledger that refuses a key's pulses for minutes, while its server
// notifies every second, is told to OnError when the pulse becomes owed:
// the notifications that find it owed coalesce into it, and are not each
// told again. Both eras.
func TestAnOwedPulseIsToldOnceNotOncePerNotification(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := subscribedLedgerRig(t, w, mcpsync.ClientOptions{RevalidateEvery: time.Hour})

		r.ledger.failWrites(100000, pulsesOf(r, faultURI))
		for i := range 300 {
			r.srv.Set(faultURI, "text/markdown", fmt.Sprintf("v%d", i+2))
			time.Sleep(time.Second)
			quiesce()
		}
		told := 0
		for _, err := range r.errs.list() {
			if re, ok := errors.AsType[*mcpsync.ReadError](err); ok && re.URI == faultURI && re.Trigger == ledger.TriggerNotification {
				told++
			}
		}
		assert.LessOrEqual(t, told, 5, "OnError told %d times in five minutes of one owed pulse", told)
	})
}

// An owed read (a notification's pulse could not be written) is settled by
// a later read the server answers only once that answer is the copy's: a
// read whose accepting write the ledger refuses brought nothing in, so the
// copy still misses the change, and Lookup says so until a read brings it.
// Both eras.
func TestAnOwedReadIsNotSettledByAnAnswerTheLedgerRefused(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := owingRig(t, w)

		// The pulse of v2's notification fails once, then the write
		// accepting the answer of the read asked for again.
		cur := r.record(faultURI)
		pulseFailed, acceptFailed := false, false
		r.ledger.failWrites(2, func(key string, next *ledger.Record) bool {
			switch {
			case key != faultURI:
				return false
			case !pulseFailed && next.LastNotificationSeq > cur.LastNotificationSeq:
				pulseFailed = true
				return true
			case pulseFailed && !acceptFailed && next.Watermark > cur.Watermark:
				acceptFailed = true
				return true
			}
			return false
		})
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		require.NotEmpty(t, r.errs.list(), "the failed pulse is told")

		time.Sleep(10 * time.Second) // the retry policy's backoff, and more
		quiesce()
		require.Equal(t, 2, r.ledger.failures(), "the pulse and the accepting write were to fail")
		r.requireNeverSilentlyStale("v2", 10, time.Minute, "the server has v2 and no read of it was accepted")
	})
}

// A notification's read the server does not answer (an error response) is
// asked for again after the retry policy's backoff; a re-ask whose own
// write fails (the ledger is down for a moment) is not lost with it: the
// change is read within the backoff, not at the revalidation an hour
// later. Both eras.
func TestUnansweredReadWhoseRetryWriteFailsIsStillRead(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := owingRig(t, w)

		// The notification's read is answered with an error; the
		// write issuing the read that asks again fails, once.
		cur := r.record(faultURI)
		issued := 0
		r.ledger.failWrites(1, func(key string, next *ledger.Record) bool {
			if key != faultURI || next.LastIssued <= cur.LastIssued+uint64(issued) {
				return false
			}
			issued++
			return issued == 2
		})
		r.faults().FailNext(string(mcp.MethodResourcesRead), faultURI, -32603, "server busy")
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()

		time.Sleep(10 * time.Second) // the retry policy's backoff, and more
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the re-ask's write was to fail once")
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text, "the change is read within the retry's backoff (Degraded %q)", entry.Degraded)
	})
}

// A ledger that refuses the writes accepting a URI's reads for a while
// (each notification's read is answered, and its answer not recorded)
// leaves no URI stuck: once the ledger is healthy again, a change is read
// within the hour (twelve revalidation periods), whatever the reads that
// failed left behind (their tickets are not to fill the read cap). Both eras.
func TestReadsWhoseAcceptFailsLeaveTheURIReadable(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := subscribedLedgerRig(t, w, retryingWithin(5*time.Minute))

		cur := r.record(faultURI)
		r.ledger.failWrites(20, func(key string, next *ledger.Record) bool {
			return key == faultURI && next.Watermark > cur.Watermark
		})
		for i := range 20 {
			r.srv.Set(faultURI, "text/markdown", fmt.Sprintf("v%d", i+2))
			time.Sleep(time.Second)
			quiesce()
		}
		t.Logf("%d accepting writes refused", r.ledger.failures())
		r.ledger.failWrites(0, nil)

		r.srv.Set(faultURI, "text/markdown", "healed")
		minutes(60) // twelve revalidation periods
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		sub, _ := r.c.Engine().Subscription(faultURI)
		require.Equal(t, "healed", entry.Contents[0].Text,
			"the URI never reads again once the ledger is healthy (subscription %s, Degraded %q)", sub.State, entry.Degraded)
	})
}

// A notification that arrives while a revalidation read of its URI is
// being issued coalesces into that read; when the read's own write then
// fails (the ledger is down for a moment), the notification is not lost
// with it: within the retry policy's backoff the change is read, or Lookup
// says the copy may miss it. Both eras.
func TestNotificationCoalescedIntoAReadWhoseWriteFailsIsNotLost(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := subscribedLedgerRig(t, w, retryingWithin(10*time.Minute))

		// The write issuing the next revalidation read fails; just
		// before it, the server changes the resource and notifies it.
		cur := r.record(faultURI)
		revalidation := func(key string, next *ledger.Record) bool {
			return key == faultURI && next.LastIssued > cur.LastIssued && len(next.Tickets) > 0 &&
				next.Tickets[len(next.Tickets)-1].Trigger == ledger.TriggerRevalidate
		}
		notified := false
		r.ledger.beforeWrite(revalidation, func() {
			r.srv.Set(faultURI, "text/markdown", "v2")
			synctest.Wait() // the notification is handled
			notified = true
		})
		r.ledger.failWrites(1, revalidation)
		for range 15 {
			if notified {
				break
			}
			minutes(1)
		}
		require.True(t, notified, "no revalidation read within 15 minutes")
		require.Equal(t, 1, r.ledger.failures(), "the revalidation read's write was to fail")

		time.Sleep(10 * time.Second) // the retry policy's backoff, and more
		quiesce()
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		if text := entry.Contents[0].Text; text != "v2" && entry.Degraded == "" {
			t.Fatalf("serves %q, the server notified v2 %v ago, without saying so", text, 10*time.Second)
		}
	})
}
