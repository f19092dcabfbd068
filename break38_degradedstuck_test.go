package mcpsync_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Bug: Entry.Degraded stays set for good on a URI that healed by another
// path than its own reopen.
//
// Two URIs are watched on one 2026-07-28 listen stream, x first. The
// server ends the stream; Client.reestablish reopens each URI it carried.
// x's reopen fails at its first write (BeginClose, once): reopenFailed
// records "its subscription could not be opened again" in c.unopened, and x
// stays ACTIVE in push mode, still wanted. y's reopen then opens a new
// stream, which carries every wanted URI, x included: the server notifies x
// again and its generation is open. Nothing ever deletes c.unopened[x]
// (only Client.subscribe after an activation, or dropWatch, does), and
// rehear finds x carried, so never reopens it. Half an hour later x is open,
// carried, current, and Lookup still says it is degraded: Degraded is no
// longer "why it is not kept fresh", so a caller that acts on it (falls
// back to its own path, pages someone) does so for ever.
func TestBreak38DegradedNeverClearedWhenAnotherReopenCarriesURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.srv.Set(y, "text/markdown", "y1")
		_, err := r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		quiesce()

		r.ledger.failWrites(1, writeOf(faultURI, mcpsync.StateUnsubscribing))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "x's close was refused once")
		// The failure was told when it happened. Degraded may already be
		// clear again here: the stream y's reopen opened carries x, and
		// x was read again after the gap.
		told := false
		for _, err := range r.errs.list() {
			var re *mcpsync.ReopenError
			told = told || errors.As(err, &re) && re.URI == faultURI
		}
		require.True(t, told, "OnError was told no *ReopenError: %v", r.errs.list())
		require.True(t, r.srv.Subscribed(faultURI), "y's reopen put x back on a stream")

		r.srv.Set(faultURI, "text/markdown", "v2")
		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(faultURI))
		r.requireHealed(faultURI, "v2")
	})
}
