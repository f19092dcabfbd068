package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpsync/mcpsync"
)

// Passing coverage: failures of the same heal steps that the client does
// recover from. Everything here passes on the current code.
//
// A Reconnect whose write opening a URI's new generation fails once leaves
// the URI's subscription in the session that is gone; the watch's next
// revalidation tick finds it there and opens it in the current session
// (Client.request -> behind -> resubscribe), and the URI reads the
// server's current content. Promise: everything right is eventually
// accepted.
func TestBreak33PassingReconnectOpenFailsHeals(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, w)
				r.subscribe()

				r.ledger.failWrites(1, openingWrite)
				if err := r.c.Reconnect(t.Context()); err == nil || r.ledger.failures() != 1 {
					t.Fatalf("the opening write was to fail once: Reconnect returned %v, %d failures", err, r.ledger.failures())
				}
				if len(r.errs.list()) == 0 {
					quiesce()
				}
				if len(r.errs.list()) == 0 {
					t.Fatal("the failed resubscribe was not told to OnError")
				}
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()

				sub, err := r.c.Engine().Subscription(faultURI)
				if err != nil {
					t.Fatal(err)
				}
				if sub.SessionGeneration != r.c.Health().SessionGeneration || sub.State != mcpsync.StateActive {
					t.Fatalf("not reopened in the current session: %s in session %d", sub.State, sub.SessionGeneration)
				}
				if got := r.served(); got != "v2" {
					t.Fatalf("serves %q, the server has v2", got)
				}
			})
		})
	}
}

// A re-established listen stream whose old generation cannot be closed
// (its close epoch cannot be reserved, once) leaves that generation open:
// the URI keeps its revalidation reads, so a change is read within the
// staleness bound the subscription publishes, and Lookup never serves a
// copy older than that bound without saying so. Promise: nothing is ever
// served stale without saying so.
func TestBreak33PassingReestablishBeginCloseFailsKeepsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.ledger.failReservations(1, mcpsync.CounterCloseEpoch)
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second)
		quiesce()
		if r.ledger.failures() != 1 {
			t.Fatalf("the close was to fail once, %d failures", r.ledger.failures())
		}

		r.srv.Set(faultURI, "text/markdown", "v2")
		changed := time.Now()
		for range 12 {
			time.Sleep(time.Minute)
			quiesce()
			entry, err := r.c.Lookup(faultURI)
			if err != nil {
				t.Fatal(err)
			}
			text := entry.Contents[0].Text
			if text != "v2" && entry.Degraded == "" && time.Since(changed) > entry.StalenessBound {
				t.Fatalf("serves %q %v after the change, past its bound %v, without saying so", text, time.Since(changed), entry.StalenessBound)
			}
		}
		if got := r.served(); got != "v2" {
			t.Fatalf("serves %q, the server has v2", got)
		}
	})
}
