package mcpsync_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Bug: Client.reopened clears the Entry.Degraded a failed reopen set
// while no listen stream the server acknowledged carries the URI.
//
// x and y are watched on one 2026-07-28 listen stream. The server ends
// the stream; Client.reestablish reopens x, whose BeginClose write fails
// once: reopenFailed records c.unopened[x] ("could not be opened again")
// and x stays ACTIVE in push mode. y's reopen then sends a listen stream
// carrying [x, y] that the server never acknowledges (the request is stuck
// before the server). relisten gives up after RequestTimeout (y falls
// back to polling) but leaves that stream as conn.listen. At x's next
// revalidation tick, Client.reopened asks Client.unheard, which only
// checks that the stream's *filter* names x (listenStream.carries), not
// that the server acknowledged it: Degraded is cleared, and rehear finds
// nothing to repair. The server carries x on no stream for the rest of
// the session while Lookup says nothing is wrong. Safety: "a watched URI
// is carried, or Degraded says why".
func TestBreak39ReopenedClearsDegradedOnUnackedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.srv.Set(y, "text/markdown", "y1")
		_, err := r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		quiesce()

		r.ledger.failWrites(1, writeOf(faultURI, mcpsync.StateUnsubscribing))
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "x's close was refused once")
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("y's reopen sent no listen stream")
		}
		told := false
		for _, err := range r.errs.list() {
			var re *mcpsync.ReopenError
			told = told || errors.As(err, &re) && re.URI == faultURI
		}
		require.True(t, told, "OnError was told no *ReopenError: %v", r.errs.list())
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
