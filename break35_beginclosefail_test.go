package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened (Client.reopen). The
// close starts with Engine.BeginClose. When that first write of the reopen
// fails once (a ledger briefly unavailable), OnError is told a
// *ReopenError and Lookup says the copy is degraded, and ReopenError
// promises that "the URI's next revalidation tries again" until the
// subscription is open again.
//
// The promise checked: once the ledger is healthy, the URI comes back: a
// listen stream carries it again (the server notifies it), a change is
// served, and Lookup is no longer degraded.
//
// None of that happens. A failed BeginClose leaves the generation as it
// was (open, ModePush, no close epoch), so the repair of its ticks
// (Client.repair -> Client.needsReopen) finds nothing to reopen: it only
// looks for a generation of an older session, or one SUBSCRIBING,
// UNSUBSCRIBING, CLOSED or UNSUBSCRIBE_UNKNOWN. The ticks' reads are
// granted, so nothing else repairs it. No listen stream is opened again
// (the re-established one was never sent), the subscription keeps saying
// ModePush, and c.unopened, cleared only by an activation or by dropping
// the watch, keeps Lookup degraded for the rest of the session.
func TestBreak35ReopenBeginCloseFailsNeverRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))

		// The write beginning the reopen's close fails, once.
		r.ledger.failWrites(1, writeTo(mcpsync.StateUnsubscribing))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write beginning the close was refused")
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
