package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// "A reopen that failed before the close left the URI open in push mode
// with no stream carrying it; the next revalidation tick opens it again on
// a stream", and "a URI outside the refresh fraction is repaired at its
// ticks too": a subscription outside the fraction "stays subscribed,
// discovered and fenced", only unread.
//
// Outside the fraction that repair never comes. A 2026-07-28 stream the
// server ends is re-established (Client.reestablish -> Client.reopen); the
// write beginning the URI's close fails once (a ledger briefly
// unavailable), which leaves the generation open in ModePush with no
// listen stream carrying it. The new check (Client.unheard) runs only in
// Client.request after skipRefresh, and a tick outside the fraction
// returns at skipRefresh into Client.repair, whose needsReopen looks only
// for a generation of an older session or one not open. Half an hour
// later, with the ledger healthy and the connection UP, the server has no
// subscription of the URI: the caller's watch is ModePush on paper, and
// no stream will ever carry it while the fraction leaves it out.
func TestBreak36OutsideFractionUnheardNeverRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))
		require.NoError(t, r.c.SetRefreshFraction(0)) // the rollout is rolled back
		require.False(t, r.c.RefreshEnabled(faultURI))

		// The write beginning the reopen's close fails, once.
		r.ledger.failWrites(1, writeTo(mcpsync.StateUnsubscribing))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write beginning the close was refused")
		r.requireToldReopen(faultURI)

		r.sixRevalidations() // half an hour, the ledger healthy
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.True(t, r.srv.Subscribed(faultURI),
			"a watched URI outside the refresh fraction is carried by no listen stream half an hour later, "+
				"yet its subscription is %s in %s mode (session %d, client session %d), health %s",
			sub.State, sub.Mode, sub.SessionGeneration, r.c.Health().SessionGeneration, r.c.Health().State)
	})
}
