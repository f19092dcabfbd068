package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Passing coverage. A ledger that refuses a reopen's write every time for
// an hour, then recovers: the URI is repaired once it does, and OnError
// hears one *ReopenError per revalidation tick at most, not a burst.
// Promises: everything right is eventually accepted; a repeating failure is
// visible without flooding OnError.
func TestBreak34PassingRepeatingFaultHealsWithoutFlood(t *testing.T) {
	for _, m := range reopenWrites {
		t.Run("reestablish-"+m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, eras[1])
				r.subscribe()

				r.ledger.failWrites(1000, m.match)
				r.faults().EndListenStreams()
				r.requireReopensPaced()
				r.ledger.failWrites(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
	for _, w := range eras {
		t.Run("reconnect-activate-"+w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, w)
				r.subscribe()

				r.ledger.failWrites(1000, activatingWrite)
				require.Error(t, r.c.Reconnect(t.Context()))
				r.requireReopensPaced()
				r.ledger.failWrites(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}

// Passing coverage. A server without resources.subscribe: the URI polls.
// A Reconnect whose activation write fails once leaves it SUBSCRIBING in
// the new session; its next poll tick opens it again, and it reads the
// server's current content. Promise: everything right is eventually
// accepted, in poll mode too.
func TestBreak34PassingPollModeRepaired(t *testing.T) {
	for _, w := range eras {
		t.Run(w.version, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := buildRig(t, w, rigConfig{server: &mcpsynctest.ServerOptions{NoSubscribe: true}, ledger: true})
				sub, err := r.c.Subscribe(t.Context(), faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePoll, sub.Mode)

				r.ledger.failWrites(1, activatingWrite)
				require.Error(t, r.c.Reconnect(t.Context()))
				quiesce()
				r.requireToldReopen(faultURI)
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}

// requireReopensPaced waits an hour of failing writes and checks that
// OnError heard at most one *ReopenError per revalidation period (5 min,
// jitter 20%), plus the first failure.
func (r *rig) requireReopensPaced() {
	t := r.t
	t.Helper()
	start := time.Now()
	for range 60 {
		time.Sleep(time.Minute)
		quiesce()
		limit := 2 + int(time.Since(start)/(4*time.Minute))
		if n := r.reopenErrors(); n > limit {
			t.Fatalf("%d *ReopenError in %v: more than one per revalidation tick", n, time.Since(start))
		}
	}
	require.Positive(t, r.reopenErrors(), "the failing reopen was never told")
}
