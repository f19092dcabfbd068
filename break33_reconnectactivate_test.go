package mcpsync_test

import (
	"testing"
	"testing/synctest"
)

// A Reconnect opens every watched URI again as a new generation of the new
// session (Client.resubscribe, then Client.subscribe). When the write that
// activates that generation fails once (a ledger briefly unavailable), the
// Reconnect returns the error and OnError is told, once. The promise is
// that the URI still comes back once the fault clears ("everything right is
// eventually accepted"; a URI must never get stuck), and that until it does
// Lookup does not serve the old version as current without saying so
// ("nothing is ever served stale without saying so"; Entry.Degraded says
// why a copy is not being kept fresh).
//
// Neither holds. subscribe returns the activation's error after
// Engine.Subscribe already wrote the new generation, SUBSCRIBING, in the
// current session; nothing tries again. The watch's periodic revalidation
// asks the engine for a read, which it refuses for a generation that is not
// open, and the repair in Client.request (behind -> resubscribe) only
// covers a subscription left in a session that is gone. Half an hour (six
// revalidation periods) later, with the ledger healthy and the connection
// UP, the URI is still SUBSCRIBING, the server's newer content was never
// read, and Lookup serves the old version with an empty Degraded. The
// single OnError call at the time of the fault does not count: the failure
// it named is long over, and what a caller sees now is a copy served as
// current. Fails on the current code, on both protocol eras.
func TestBreak33ReconnectActivateFailsLeavesURIStuck(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, w)
				r.subscribe()

				r.ledger.failWrites(1, activatingWrite)
				err := r.c.Reconnect(t.Context())
				if err == nil || r.ledger.failures() != 1 {
					t.Fatalf("the activation was to fail once: Reconnect returned %v, %d failures", err, r.ledger.failures())
				}
				quiesce()
				r.requireToldReopen(faultURI)

				// The ledger is healthy again; the server's content moves on.
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}
