package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A failed reopen is made visible: OnError is told a *ReopenError, and
// Lookup's Degraded says the copy is not kept fresh "until a read of the URI
// is answered" (Client.reopenFailed). The promise behind it is the one of
// Entry.Degraded: it says why the copy is not being kept fresh right now;
// nothing is served stale without saying so.
//
// A read of the URI's old generation is in flight when the server ends the
// listen stream (the server has answered; the answer is slow to come
// back). The reopen closes the old generation and the write opening the
// next one fails: the URI is CLOSED in the current session, and Degraded
// says why. Then the slow answer arrives. The fence refuses it (its
// generation is closed), so it keeps nothing fresh, and the URI is exactly
// as stuck as before; yet Client.read calls Client.answered for every
// answer before the fence decides, which deletes c.failing[key]. From then
// until the next revalidation tick (five minutes here), Lookup serves the
// old copy of a URI no subscription keeps with an empty Degraded. Fails on
// the current code.
func TestBreak34RefusedAnswerClearsDegradedOfStuckURI(t *testing.T) {
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

		r.ledger.failWrites(1, openingWrite)
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write opening the next generation was refused")
		r.requireToldReopen(faultURI)

		hold.Release() // the old generation's answer comes back
		quiesce()

		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateClosed, sub.State, "still stuck: nothing reopened it yet")
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		if entry.Degraded == "" {
			t.Fatalf("Lookup serves %q of a %s subscription (no open subscription keeps it, the server has v2) with an empty Degraded",
				entry.Contents[0].Text, sub.State)
		}
	})
}
