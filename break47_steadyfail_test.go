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
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, w, l, &errs)
				r.subscribe()
				l.armCAS(1<<20, b33OpeningWrite)
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
					b33Drain(r)
				}
				f := l.failures()
				t.Logf("failed writes after %d rounds: %d; errors told: %d", rounds, f, len(errs.list()))
				time.Sleep(30 * time.Second)
				quiesce()
				b33Drain(r)
				f2 := l.failures()
				t.Logf("failed writes 30s later: %d", f2)
				require.LessOrEqual(t, f2, 20*rounds, "ledger write storm")
				e, err := r.c.Lookup(faultURI)
				require.NoError(t, err)
				require.NotEmpty(t, e.Degraded, "URI not open and not degraded")
				l.armCAS(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v2")
			})
		})
	}
}
