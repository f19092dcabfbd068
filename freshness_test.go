package mcpsync_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// An entry says when the server last confirmed it and how stale it may get;
// asked to, Lookup refuses it past that bound instead of serving it.
func TestLookupRefusesPastTheStalenessBound(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	_, err := e.PublishStalenessBound(docURI, time.Minute)
	require.NoError(t, err)
	acceptRead(t, e, ledger.TriggerInitial, "v1")
	validated := clock.t

	clock.t = clock.t.Add(59 * time.Second)
	entry, err := e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, validated, entry.ValidatedAt)
	assert.Equal(t, time.Minute, entry.StalenessBound)

	clock.t = clock.t.Add(2 * time.Second)
	_, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale, "served past its bound")
	entry, err = e.Lookup(alice, docURI)
	require.NoError(t, err, "without RequireFresh the entry is served, with its age")
	assert.Equal(t, validated, entry.ValidatedAt)

	// An unchanged read confirms the version again.
	acceptRead(t, e, ledger.TriggerRevalidate, "v1")
	entry, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, clock.t, entry.ValidatedAt)

	// Nothing keeps a closed subscription fresh.
	resubscribe(t, e)
	_, err = e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale)
}

// The bound counts from when the read was issued, not from when its answer
// came: the server read the text at some moment in between, so an answer
// that took 50 s to arrive under a 1-minute bound is fresh for 10 s more,
// not 60. A later read that confirms the same version moves ValidatedAt on,
// and one that was issued earlier than the confirmation held never moves it
// back.
func TestStrictLookupCountsTheBoundFromWhenTheReadWasIssued(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	_, err := e.PublishStalenessBound(docURI, time.Minute)
	require.NoError(t, err)
	slow := issue(t, e, ledger.TriggerInitial)
	issued := clock.t
	clock.t = clock.t.Add(50 * time.Second) // the answer is slow
	_, err = e.AcceptResourceVersion(slow, text(docURI, "v1"))
	require.NoError(t, err)
	entry, err := e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, issued, entry.ValidatedAt, "confirmed as of the read's issue")

	clock.t = clock.t.Add(11 * time.Second) // 61 s after the read was issued
	_, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale, "the answer's latency stretched the bound")

	// Progress: the next read confirms it again, as of its own issue.
	again := issue(t, e, ledger.TriggerRevalidate)
	reissued := clock.t
	clock.t = clock.t.Add(time.Second)
	_, err = e.AcceptResourceVersion(again, text(docURI, "v1"))
	require.NoError(t, err)
	entry, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, reissued, entry.ValidatedAt)
}

// Freshness is ValidatedAt plus the published bound, whatever the
// connection does: while a lost session heals (0.5 s down, then a
// re-subscribe the server takes its time to answer), strict Lookups keep
// serving a copy confirmed moments ago, and Degraded says what is going on;
// past the bound, with the server gone for good, they refuse with ErrStale.
func TestStrictLookupAnswersThroughAReconnectUntilTheBound(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{
			RevalidateEvery: 5 * time.Minute, Jitter: 0.2, PingEvery: 100 * time.Millisecond, PingTimeout: 100 * time.Millisecond,
			Reconnect: mcpsync.ReconnectPolicy{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond},
		})
		r.subscribe()
		quiesce()
		before, err := r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.NoError(t, err)
		require.Positive(t, before.StalenessBound)

		// The session is lost; the server is back 0.5 s later, and
		// holds the re-subscribe a while before it reaches the server.
		dialed := make(chan *mcpsynctest.Hold, 1)
		r.setOnDial(func(_ int, kit *mcpsynctest.Transport) {
			select {
			case dialed <- kit.HoldNextRequest(subscribeMethod(w.version), ""):
			default:
			}
		})
		r.loseSession()
		for range 5 {
			quiesce()
			entry, err := r.c.Lookup(faultURI, mcpsync.RequireFresh())
			require.NoError(t, err, "a copy confirmed %v ago with a bound of %v", time.Since(before.ValidatedAt), before.StalenessBound)
			assert.NotEmpty(t, entry.Degraded, "the lost session is not said")
			assert.Equal(t, before.StalenessBound, entry.StalenessBound, "the published bound is no longer in force")
		}
		r.setDown(false)
		var h *mcpsynctest.Hold
		select {
		case h = <-dialed:
		case <-time.After(time.Minute):
			t.Fatal("the client did not dial again")
		}
		select {
		case <-h.Arrived():
		case <-time.After(time.Minute):
			t.Fatal("the client did not subscribe again")
		}
		entry, err := r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.NoError(t, err, "refused while the server answers the re-subscribe")
		assert.Equal(t, before.StalenessBound, entry.StalenessBound)
		h.Release()
		quiesce()
		entry, err = r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.NoError(t, err)
		assert.Empty(t, entry.Degraded, "healed, yet degraded")

		// The server goes away for good: strict Lookups answer until
		// ValidatedAt + bound, and refuse after it.
		validated := entry.ValidatedAt
		r.loseSession()
		time.Sleep(time.Until(validated.Add(entry.StalenessBound)) - time.Second)
		quiesce()
		entry, err = r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.NoError(t, err, "refused within the bound")
		assert.NotEmpty(t, entry.Degraded)
		time.Sleep(2 * time.Second)
		_, err = r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.ErrorIs(t, err, mcpsync.ErrStale, "served past its bound")
	})
}

// A quiet server that answers every read, a little slowly, keeps a strict
// Lookup answering: the client's own revalidation reads, at most one
// jittered interval apart, confirm the copy before the bound it published
// passes, whatever the read's latency. Counting the bound from a read's
// issue, the published bound (interval plus jitter) must leave room for the
// next read's answer, or a healthy copy goes stale for a moment whenever
// the jitter draws long.
func TestStrictLookupNeverRefusesACopyAQuietServerKeepsConfirming(t *testing.T) {
	const latency = 200 * time.Millisecond
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{
			opts: mcpsync.ClientOptions{RevalidateEvery: 10 * time.Second, Jitter: 0.1},
			wire: func(fw *faultWire) {
				fw.park = func(req wireRequest) <-chan struct{} {
					if req.method != string(mcp.MethodResourcesRead) {
						return nil
					}
					ch := make(chan struct{})
					time.AfterFunc(latency, func() { close(ch) })
					return ch
				}
			},
		})
		r.watch(faultURI)
		refused, since := 0, time.Now()
		var first error
		for time.Since(since) < 10*time.Minute {
			time.Sleep(50 * time.Millisecond)
			if _, err := r.c.Lookup(faultURI, mcpsync.RequireFresh()); err != nil {
				refused++
				if first == nil {
					first = err
				}
			}
		}
		assert.Zero(t, refused, "strict lookups refused over 10 minutes of a quiet server answering in %v: first %v", latency, first)
	})
}

// A URI unsubscribed and subscribed again before its pass ran (the
// Unsubscribe's wait given up at once) stays open on the generation it
// had, and is revalidated as every watched URI is: its copy is confirmed
// within each bound it publishes, though the server never notifies it.
func TestAURIWatchedAgainBeforeItsCloseIsRevalidated(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // the two calls before the key's pass
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: 10 * time.Second}})
		r.watch(faultURI)
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := r.c.Unsubscribe(gone, faultURI)
		require.ErrorIs(t, err, context.Canceled)
		sub, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		r.faults().DropNext(faultURI, 1000)
		reads := r.srv.Reads(faultURI)
		for range 6 {
			time.Sleep(10 * time.Second)
			quiesce()
			_, err := r.c.Lookup(faultURI, mcpsync.RequireFresh())
			require.NoError(t, err, "generation %d: %s", sub.SubscriptionGeneration, r.describe(faultURI))
		}
		assert.GreaterOrEqual(t, r.srv.Reads(faultURI)-reads, 5, "revalidated every interval")
	})
}
