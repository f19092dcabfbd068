package mcpsync_test

// Cancellation: a caller's context bounds the caller's wait, never what the
// client leaves behind. A Subscribe, SubscribeAll or Unsubscribe whose
// context ends midway says which URIs it did not do, and once things
// settle the server notifies exactly the URIs that are watched, in push
// mode.

import (
	"context"
	"fmt"
	"strings"
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

// A SubscribeAll cancelled midway, with two of its requests parked (one
// before the server sees it, one after the server answered), then
// released: once settled, the server notifies exactly the URIs that are
// open in push mode, in both eras.
func TestSubscribeAllCancelledMidwaySettlesTheServer(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		method := subscribeMethod(w.version)
		uris := numbered("file:///b39/all/%02d.md", 12)
		r := buildRig(t, w, rigConfig{uris: uris})
		srv, kit := r.srv, r.faults()
		u3, u5 := uris[3], uris[5]
		if method == string(mcp.MethodSubscriptionsListen) {
			u3, u5 = "", ""
		}
		h1 := kit.HoldNextRequest(method, u3)
		h2 := kit.HoldNext(method, u5)
		ctx, cancel := context.WithCancel(t.Context())
		done := goCall(ctx, r.c.SubscribeAll, uris)
		synctest.Wait()
		cancel()
		synctest.Wait()
		h1.Release()
		h2.Release()
		<-done
		quiesce()
		minutes(6)
		open := 0
		for _, u := range uris {
			if srv.Subscribed(u) {
				open++
			}
		}
		t.Logf("%d of %d URIs subscribed on the server after the cancel", open, len(uris))
		r.requireServerMatchesPush(uris)
	})
}

// A Subscribe whose context ends while the server is being asked to notify
// the URI (a subscriptions/listen stream waiting to be sent) fails with the
// context's error, and leaves nothing behind that a caller sees: once
// another Subscribe replaces the listen stream the server no longer
// notifies the URI, a later Subscribe of it opens it in push mode with its
// first version, its change is served, and its Unsubscribe takes it off the
// server. 2026-07-28; TestCancelledSubscribeAnsweredAsItEndsIsUnsubscribed
// is the 2025-11-25 counterpart.
func TestCancelledSubscribeLeavesNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///b36/cancel/x.md", "file:///b36/cancel/y.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(y, "text/markdown", "y1")
		r.cancelSubscribeWhileItsStreamIsHeld(x)

		r.watch(y) // replaces the listen stream
		quiesce()
		assert.False(t, r.srv.Subscribed(x), "the server still notifies a URI whose Subscribe was cancelled")
		assert.True(t, r.srv.Subscribed(y))

		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		assert.Equal(t, ledger.ModePush, sub.Mode)
		quiesce()
		assert.True(t, r.srv.Subscribed(x))
		r.srv.Set(x, "text/markdown", "x2")
		quiesce()
		entry, err := r.c.Lookup(x)
		require.NoError(t, err)
		assert.Equal(t, "x2", entry.Contents[0].Text)

		closed, err := r.c.Unsubscribe(t.Context(), x)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateClosed, closed.State)
		quiesce()
		assert.False(t, r.srv.Subscribed(x))
		assert.True(t, r.srv.Subscribed(y))
	})
}

// 2025-11-25. A Subscribe whose context ends as the server answers: the
// resources/subscribe reached the server, which recorded it, and the
// transport returns context.Canceled at the same moment the caller gives
// up. The Subscribe fails with the context's error and the URI is not
// watched; the server, told to stop, does not go on notifying a URI no
// caller subscribed (ten times over, a minute each).
func TestCancelledSubscribeAnsweredAsItEndsIsUnsubscribed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], nil)
		c, srv := r.c, r.srv

		var left []string
		for i := range 10 {
			x := fmt.Sprintf("file:///b36/legacycancel/%d.md", i)
			srv.Set(x, "text/markdown", "x1")
			ctx, cancel := context.WithCancel(t.Context())
			r.wire.cancelAsAnswered(string(mcp.MethodResourcesSubscribe), cancel)
			_, err := c.Subscribe(ctx, x)
			require.ErrorIs(t, err, context.Canceled)
			quiesce()
			time.Sleep(time.Minute) // any reconcile, with its retries
			quiesce()
			if srv.Subscribed(x) {
				left = append(left, x)
			}
		}
		require.Empty(t, left, "%d of 10 cancelled Subscribes left the server subscribed to a URI nobody watches (unsubscribes sent: %d)",
			len(left), srv.UnsubscribeCalls())
	})
}

// 2026-07-28. A Subscribe cancelled while its listen stream awaits the
// server (the request held before the server sees it) fails with
// context.Canceled and the URI is not watched. Once the request goes
// through, nothing is left carrying the URI even with no later Subscribe
// to replace the stream: half an hour later the server does not notify it.
func TestCancelledSubscribeLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b38/cancel/x.md"
		r := newRig(t, eras[1], nil)
		r.cancelSubscribeWhileItsStreamIsHeld(x)
		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(faultURI))
		require.False(t, r.srv.Subscribed(x),
			"half an hour after its Subscribe was cancelled, a listen stream still carries %s, which nobody watches", x)
	})
}

// SubscribeAll returns "the errors of those that failed, joined, each
// naming its URI", and a URI it reports no error for is subscribed as
// Subscribe promises: its first read answered (a version), on a server that
// can subscribe, in push mode. The caller's context is cancelled midway,
// while the first listen stream, which carries every URI, waits for its
// acknowledgement: every URI not subscribed is named in the error, and
// none comes back as a subscription that silently polls.
func TestSubscribeAllCancelledMidwayReportsWhatItDidNotSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := numbered("file:///b35/cancel/%d.md", 8)
		r, res, hold := cancelSubscribeAllWhileItsStreamIsHeld(t, uris)
		defer func() {
			hold.Release()
			quiesce()
		}()

		msg := ""
		if res.err != nil {
			msg = res.err.Error()
		}
		for i, uri := range uris {
			if strings.Contains(msg, uri) {
				continue // said why
			}
			sub := res.val[i]
			entry, err := r.c.Lookup(uri)
			assert.True(t, sub.Mode == ledger.ModePush && err == nil && len(entry.Contents) > 0,
				"%s: no error, yet subscription %s in %s mode (%q) with no first version at return", uri, sub.State, sub.Mode, sub.ModeReason)
		}
	})
}

// A SubscribeAll whose context is cancelled while its first listen stream
// (which carries every URI) waits to be sent fails every URI with
// context.Canceled, and none of them is watched. Left alone, with no other
// Subscribe or Unsubscribe to come along, the stream it sent does not go on
// carrying them: after every revalidation and repair tick of half an hour,
// none is open and the server notifies none (DESIGN: a URI nobody watches
// is not carried on the stream after things settle).
func TestCancelledSubscribeAllLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := numbered("file:///b37/cancel/%d.md", 4)
		r, res, hold := cancelSubscribeAllWhileItsStreamIsHeld(t, uris)
		require.ErrorIs(t, res.err, context.Canceled)
		hold.Release()
		quiesce()

		time.Sleep(30 * time.Minute) // every revalidation and repair tick there is
		quiesce()

		for _, u := range uris {
			if sub, err := r.c.Engine().Subscription(u); err == nil {
				require.NotEqual(t, ledger.StateActive, sub.State, "%s was opened", u)
			}
		}
		var carried []string
		for _, u := range uris {
			if r.srv.Subscribed(u) {
				carried = append(carried, u)
			}
		}
		require.Empty(t, carried, "after a cancelled SubscribeAll settled, the listen stream still carries %d URIs nobody watches", len(carried))
	})
}

// 2026-07-28. x and faultURI are watched. A Subscribe of z replaces the
// stream, and its subscriptions/listen request (naming faultURI, x and z)
// is slow to reach the server; an Unsubscribe(x) waits behind it and its
// caller gives up. x's generation is closed, and the stream that goes out
// naming x does not stay the last word: half an hour later, with no later
// Subscribe or Unsubscribe, the server does not notify x (DESIGN: a URI
// nobody watches is not carried on the listen stream).
func TestCancelledUnsubscribeLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, z = "file:///b38/unsub/x.md", "file:///b38/unsub/z.md"
		r := buildRig(t, eras[1], rigConfig{uris: []string{x, z}})
		r.subscribe()
		r.watch(x)
		quiesce()

		unsubscribeBehindAHeldStream(t, r, x, z)
		sub, err := r.c.Engine().Subscription(x)
		require.NoError(t, err)
		require.NotEqual(t, ledger.StateActive, sub.State, "x's generation is closed")

		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(z))
		require.False(t, r.srv.Subscribed(x),
			"half an hour after its Unsubscribe (state %s), a listen stream still carries %s, which nobody watches", sub.State, x)
	})
}

// The same for an Unsubscribe of a URI whose reopen failed (its write,
// closing the generation and opening the next, refused once: the old
// generation stays open): the stream it waited behind goes out naming the
// URI, and half an hour later the server does not notify it.
func TestCancelledUnsubscribeOfAURIWhoseReopenFailedLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const z = "file:///b38/unsub/z.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(z, "text/markdown", "z1")
		before := r.subscribe()
		r.reestablishRefusingOnce(openingWrite)
		r.requireOldGenerationOpen(faultURI, before.SubscriptionGeneration)

		unsubscribeBehindAHeldStream(t, r, faultURI, z)

		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(z))
		require.False(t, r.srv.Subscribed(faultURI), "a listen stream still carries %s, which nobody watches", faultURI)
	})
}

// 2025-11-25. The caller of Unsubscribe(x) gives up just as the close
// begins (its context ends while the ledger writes the close's first
// step), before the resources/unsubscribe goes out; mcp-go's client sends
// nothing for a context already ended (v1.2.1), so the request never
// reaches the transport. The server is still told: half an hour later it
// does not notify x, and a clean Subscribe(x) then Unsubscribe(x) later in
// the same session leaves x unsubscribed too.
func TestUnsubscribeCancelledBeforeItsRequestStillTellsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{ledger: true})
		r.subscribe()
		quiesce()
		require.True(t, r.srv.Subscribed(faultURI))

		ctx, cancel := context.WithCancel(t.Context())
		r.ledger.beforeWrite(writeOf(faultURI, ledger.StateUnsubscribing), cancel)
		sub, err := r.c.Unsubscribe(ctx, faultURI)
		t.Logf("Unsubscribe with its context ending at BeginClose: %s, %v", sub.State, err)
		r.sixRevalidations()
		first := r.srv.Subscribed(faultURI)

		// A clean Subscribe and Unsubscribe later in the same session.
		r.watch(faultURI)
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

// A Subscribe of a URI nobody watched that fails (its caller gives up)
// leaves nothing watched, even when a Reconnect lands while it waits: x's
// pass is slow (the ledger write opening x's generation takes a while), a
// Reconnect replaces the session meanwhile, then the caller's context ends.
// Subscribe fails with context.Canceled; once settled x is not open in the
// current session and the server does not notify it. Both eras.
func TestCancelledSubscribeRacingAReconnectLeavesNothingWatched(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const x = "file:///cancel/reconnect/x.md"
		r, opening, slow := slowOpeningRig(t, w, x)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := goCall(ctx, r.c.Subscribe, x)
		<-opening

		reconnected := make(chan error, 1)
		go func() { reconnected <- r.c.Reconnect(context.Background()) }()
		synctest.Wait() // the new session is up; its pass over x waits for x's first
		cancel()
		require.ErrorIs(t, (<-done).err, context.Canceled)
		close(slow)
		t.Logf("reconnect: %v", <-reconnected)

		r.requireLeftUnwatched(x)
	})
}

// slowOpeningRig is a rig on a fault ledger, its server holding x, whose
// ledger write opening x's generation waits until slow is closed; opening
// is closed once it waits.
func slowOpeningRig(t *testing.T, w wiring, x string) (r *rig, opening, slow chan struct{}) {
	t.Helper()
	r = buildRig(t, w, rigConfig{ledger: true, uris: []string{x}})
	opening, slow = r.ledger.slowWrite(writeOf(x, ledger.StateSubscribing))
	return r, opening, slow
}

// requireLeftUnwatched gives the client six revalidation periods, then
// checks that x, which no caller watches, is not open and not notified.
func (r *rig) requireLeftUnwatched(x string) {
	r.t.Helper()
	r.sixRevalidations()
	r.requireWhereLeft([]string{x}, nil, map[string]bool{x: true})
}

// Subscribes of a URI nobody watched that all fail (every caller gives up
// while the first pass is slow: the ledger write opening the generation
// takes a while) leave nothing watched, whether they come from two callers
// or from one SubscribeAll naming the URI twice, and whether they spell it
// alike or differently: each call returns context.Canceled, and once
// settled the URI is not open in the current session and the server does
// not notify it. Both eras.
func TestSubscribesOfOneURIThatAllFailLeaveNothingWatched(t *testing.T) {
	const x, xAlias = "file:///cancel/twice/x.md", "file:///cancel/twice/%78.md"
	type subscribes struct {
		name      string
		spellings []string
		together  bool // one SubscribeAll rather than one Subscribe each
	}
	cases := []subscribes{
		{"two callers, one spelling", []string{x, x}, false},
		{"two callers, two spellings", []string{x, xAlias}, false},
		{"one SubscribeAll, two spellings", []string{x, xAlias}, true},
	}
	eachEraAnd(t, cases, func(tc subscribes) string { return tc.name }, func(t *testing.T, w wiring, tc subscribes) {
		r, opening, slow := slowOpeningRig(t, w, x)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errs := make(chan error, len(tc.spellings))
		if tc.together {
			go func() {
				_, err := r.c.SubscribeAll(ctx, tc.spellings)
				errs <- err
			}()
		} else {
			for _, u := range tc.spellings {
				go func() {
					_, err := r.c.Subscribe(ctx, u)
					errs <- err
				}()
			}
		}
		<-opening
		synctest.Wait() // every call waits for its pass
		cancel()
		calls := 1
		if !tc.together {
			calls = len(tc.spellings)
		}
		for range calls {
			require.ErrorIs(t, <-errs, context.Canceled)
		}
		close(slow)

		r.requireLeftUnwatched(x)
	})
}

// cancelSubscribeWhileItsStreamIsHeld (2026-07-28) has the server hold uri
// (text "x1") and the client watch faultURI, then a Subscribe(uri) give up
// while the listen stream naming uri is held before the server: it fails
// with context.Canceled. Then the stream goes out, and things settle.
func (r *rig) cancelSubscribeWhileItsStreamIsHeld(uri string) {
	t := r.t
	t.Helper()
	r.srv.Set(uri, "text/markdown", "x1")
	r.subscribe()
	hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
	res, _ := cancelWhileHeld(t, hold, r.c.Subscribe, uri)
	require.ErrorIs(t, res.err, context.Canceled)
	hold.Release()
	quiesce()
}

// cancelSubscribeAllWhileItsStreamIsHeld (2026-07-28) has a SubscribeAll
// of uris (on the server with text "v1") give up while its first listen
// stream, which carries every URI and goes out at once, is held before the
// server. It returns the rig, what SubscribeAll returned and the held
// stream.
func cancelSubscribeAllWhileItsStreamIsHeld(t *testing.T, uris []string) (*rig, returned[[]mcpsync.Subscription], *mcpsynctest.Hold) {
	t.Helper()
	r := buildRig(t, eras[1], rigConfig{uris: uris})
	hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
	res, took := cancelWhileHeld(t, hold, r.c.SubscribeAll, uris)
	require.Zero(t, took, "the first listen stream goes out at once")
	return r, res, hold
}

// unsubscribeBehindAHeldStream has a Subscribe(z) replace the listen stream
// with its request held before the server, then an Unsubscribe(gone) wait
// behind it and its caller give up; then the held stream goes out, and
// the Subscribe returns.
func unsubscribeBehindAHeldStream(t *testing.T, r *rig, gone, z string) {
	t.Helper()
	hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
	subDone := goCall(t.Context(), r.c.Subscribe, z)
	synctest.Wait()
	<-hold.Arrived()

	ctx, cancel := context.WithCancel(t.Context())
	unsubDone := goCall(ctx, r.c.Unsubscribe, gone)
	synctest.Wait()
	cancel()
	<-unsubDone
	hold.Release()
	require.NoError(t, (<-subDone).err)
	quiesce()
}
