package mcpsync_test

// Entry.Degraded says why a copy is not being kept fresh right now: set
// while no subscription of the current session keeps a watched URI fresh
// (a failed reopen, a server not yet put right), kept while that lasts,
// and cleared once the URI is open and carried again, whatever path healed
// it.

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
)

// 2025-11-25. A late resources/unsubscribe removed a watched URI on the
// server; the client's request subscribing it again is refused, and the
// ledger keeps refusing the write of the reopen that follows, so
// the client keeps trying with its backoff. Until one succeeds the URI is
// in push mode with nothing notifying it: Degraded says so through every
// revalidation tick meanwhile (a tick finding the generation open does not
// take the reason back while the server is still being put right), and
// once the ledger answers the URI ends open with current content.
func TestDegradedKeptWhileTheServerIsPutRight(t *testing.T) {
	const a = "file:///b44/ledger/y.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{ledger: true, uris: []string{a}})
		var armed sync.Once
		lateUnsubscribe(t, r, a, refusingSubscribesOf(a, func() {
			armed.Do(func() { r.ledger.failWrites(1<<20, openingWriteOf(a)) })
		}))
		for range 12 { // more than two revalidation periods
			minutes(1)
			sub, e, _ := r.look(a)
			require.False(t, sub.Mode == ledger.ModePush && !r.srv.Subscribed(a) && e.Degraded == "",
				"%s in push mode, not subscribed on the server, and Lookup says nothing (ledger failures %d)", a, r.ledger.failures())
		}
		require.Positive(t, r.ledger.failures(), "the reopen's write was never refused")
		r.ledger.failWrites(0, nil)
		minutes(12)
		r.srv.Set(a, "text/markdown", "v2")
		minutes(7)
		r.requireHealed(a, "v2")
	})
}

// Two URIs are watched on one 2026-07-28 listen stream, x first. The server
// ends the stream and the client reopens each URI it carried; x's reopen
// write fails (once) and is told, and y's reopen opens a new
// stream, which carries x too: the server notifies x again. Degraded is
// cleared once x is carried again, whatever path carried it: half an hour
// later x is open, carried, current, and not degraded.
func TestDegradedClearedOnceAnotherReopenCarriesTheURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRigWatching(t, "file:///docs/zz-other.md")

		r.reestablishRefusingOnce(openingWriteOf(faultURI))
		// The failure was told when it happened. Degraded may already be
		// clear again here: the stream y's reopen opened carries x, and
		// x was read again after the gap.
		require.True(t, r.toldReopen(faultURI), "OnError was told no *ReopenError: %v", r.errs.list())
		require.True(t, r.srv.Subscribed(faultURI), "y's reopen put x back on a stream")

		r.srv.Set(faultURI, "text/markdown", "v2")
		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(faultURI))
		r.requireHealed(faultURI, "v2")
	})
}

// x and y are watched on one 2026-07-28 listen stream. The server ends the
// stream; x's reopen write fails (once), which is told and
// makes x degraded. y's reopen then sends a listen stream naming both that
// the server never acknowledges (stuck before the server). A stream the
// server never acknowledged does not count as carrying x: half an hour
// later x is notified by the server on some stream, or Lookup still says it
// is degraded (DESIGN: a watched URI is carried, or Degraded says why).
func TestDegradedKeptWhileOnlyAnUnacknowledgedStreamCarriesTheURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRigWatching(t, "file:///docs/zz-other.md")

		r.ledger.failWrites(1, openingWriteOf(faultURI))
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		r.reestablish()
		require.Equal(t, 1, r.ledger.failures(), "x's reopen was refused once")
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("y's reopen sent no listen stream")
		}
		require.True(t, r.toldReopen(faultURI), "OnError was told no *ReopenError: %v", r.errs.list())
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		require.NotEmpty(t, entry.Degraded, "just after the failed reopen")

		r.sixRevalidations() // half an hour; the stream stays unacknowledged
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		entry, err = r.c.Lookup(faultURI)
		require.NoError(t, err)
		if !r.srv.Subscribed(faultURI) && entry.Degraded == "" {
			t.Fatalf("%s is %s in %s mode, carried by no stream the server has (subscribed: %v), and Lookup's Degraded is empty",
				faultURI, sub.State, sub.Mode, r.srv.Subscribed(faultURI))
		}
	})
}

// A failed reopen is made visible: OnError is told a *ReopenError, and
// Lookup's Degraded says the copy is not kept fresh. A read of the URI's
// old generation is in flight when the server ends the listen stream; the
// reopen closes the old generation and opens the next one, whose
// activation fails: the URI is SUBSCRIBING in the current session. Then
// the slow answer comes back and the fence refuses it (its generation is
// closed): an answer the fence refused keeps nothing fresh, so Degraded
// stays set.
func TestRefusedAnswerKeepsTheDegradedOfAStuckURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		hold := r.faults().HoldNext("resources/read", faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2") // a notification, then a read, held
		quiesce()
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("the read never reached the server")
		}

		r.reestablishRefusingOnce(activatingWrite)
		r.requireToldReopen(faultURI)

		hold.Release() // the old generation's answer comes back
		quiesce()

		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.StateSubscribing, sub.State, "still stuck: nothing activated it yet")
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		if entry.Degraded == "" {
			t.Fatalf("Lookup serves %q of a %s subscription (no open subscription keeps it, the server has v2) with an empty Degraded",
				entry.Contents[0].Text, sub.State)
		}
	})
}
