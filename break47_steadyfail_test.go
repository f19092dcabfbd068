package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Every reopen write fails for good while reconnects and second Subscribes
// (with contexts that end at once) race on a watched URI, round after
// round: the settle/letGo async resubscribes must not storm (ledger
// attempts bounded by the rounds), the URI must be visibly degraded, and
// once the ledger heals the URI must come back; goleak checks leaks.
func TestBreak47SteadyFailureRepeatedReconnects(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, w)
				r.subscribe()
				r.ledger.failWrites(1<<20, openingWrite)
				const rounds = 20
				for range rounds {
					done := make(chan struct{}, 4)
					for range 3 {
						go func() {
							ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
							defer cancel()
							_, _ = r.c.Subscribe(ctx, faultURI)
							done <- struct{}{}
						}()
					}
					go func() { _ = r.c.Reconnect(context.Background()); done <- struct{}{} }()
					for range 4 {
						<-done
					}
					quiesce()
				}
				f := r.ledger.failures()
				t.Logf("failed writes after %d rounds: %d; errors told: %d", rounds, f, len(r.errs.list()))
				time.Sleep(30 * time.Second)
				quiesce()
				f2 := r.ledger.failures()
				t.Logf("failed writes 30s later: %d", f2)
				require.LessOrEqual(t, f2, 20*rounds, "ledger write storm")
				e, err := r.c.Lookup(faultURI)
				require.NoError(t, err)
				require.NotEmpty(t, e.Degraded, "URI not open and not degraded")
				r.ledger.failWrites(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				r.sixRevalidations()
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}
