package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened (Client.reestablish,
// then Client.reopen); a listen acknowledgement that leaves out a URI the
// previous stream carried takes the same path (Client.handle's left list).
// When one ledger write of that close-and-open fails once (a ledger
// briefly unavailable), the promise is still that the URI comes back to an
// open subscription with current content once the fault clears, or at
// least that the failure is visible: "everything right is eventually
// accepted, or the failure is visible", "nothing is ever served stale
// without saying so", and no URI gets stuck.
//
// It is neither, whichever write fails: the one opening the next generation
// (left CLOSED), the one finishing the close (left UNSUBSCRIBING) or the
// activation (left SUBSCRIBING). reopen ignores the error settle returns,
// so nothing is told to OnError; the generation stays in that state in the
// current session while the caller still watches the URI; the watch's
// periodic revalidation asks the engine for a read, which it refuses, and
// the client's repair (request -> behind -> resubscribe) only covers a
// subscription left in an older session, not one of the current session
// that is not open. The server's newer content is never read, and Lookup
// goes on serving the old version with an empty Degraded, half an hour
// (six revalidation periods) later, with the ledger long healthy again and
// the connection UP. Fails on the current code.

func TestBreak33ReestablishWriteFailsLeavesURIStuckSilently(t *testing.T) {
	for _, m := range reopenWrites {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, eras[1])
				r.subscribe()

				r.ledger.failWrites(1, m.match) // one write of the reopen fails, once
				r.faults().EndListenStreams()
				time.Sleep(2 * time.Second) // the client's backoff before reopening
				quiesce()
				require.Equal(t, 1, r.ledger.failures(), "the write was refused")
				r.requireToldReopen(faultURI)

				// The ledger is healthy again; the server's content moves on.
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}

func TestBreak33LeftOutOfAckWriteFailsLeavesURIStuckSilently(t *testing.T) {
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
		r.srv.Set(x, "text/markdown", "v2")
		r.sixRevalidations()
		r.requireHealed(x, "v2")
	})
}
