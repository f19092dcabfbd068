package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Passing coverage (attacks that held on the current code).

// A Reconnect whose context is cancelled while it re-establishes the first
// URI (its subscribe or listen request held before the server) leaves the
// URIs not reopened; their next revalidation tick opens them, and each
// reads the server's current content, in both eras.
func TestBreak38PassingReconnectCancelledMidwayHeals(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const y = "file:///docs/zz-other.md"
				r := newRig(t, w, nil)
				r.srv.Set(y, "text/markdown", "y1")
				var hold *mcpsynctest.Hold
				r.setOnDial(func(conn int, kit *mcpsynctest.Transport) {
					if conn == 2 {
						hold = kit.HoldNextRequest(subscribeMethod(w.version), "") // the Reconnect's first re-subscribe
					}
				})
				for _, u := range []string{faultURI, y} {
					_, err := r.c.Subscribe(t.Context(), u)
					require.NoError(t, err)
				}
				quiesce()

				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- r.c.Reconnect(ctx) }()
				synctest.Wait()
				select {
				case <-hold.Arrived():
				default:
					t.Fatal("the Reconnect never asked the server to notify")
				}
				cancel()
				require.Error(t, <-done, "the Reconnect was cancelled midway")
				hold.Release()
				quiesce()

				r.srv.Set(faultURI, "text/markdown", "v2")
				r.srv.Set(y, "text/markdown", "y2")
				minutes(36)
				r.requireHealed(faultURI, "v2")
				r.requireHealed(y, "y2")
				require.True(t, r.srv.Subscribed(faultURI))
				require.True(t, r.srv.Subscribed(y))
			})
		})
	}
}

// Poll mode (a server without the subscribe capability): a Reconnect
// whose opening write fails twice in a row (at the Reconnect, then at the
// first repair) is told, and healed by a later poll tick.
func TestBreak38PassingPollModeTwoFailuresHeal(t *testing.T) {
	for _, w := range eras {
		t.Run(w.version, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := buildRig(t, w, rigConfig{server: &mcpsynctest.ServerOptions{NoSubscribe: true}, ledger: true})
				sub, err := r.c.Subscribe(t.Context(), faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePoll, sub.Mode)

				r.ledger.failWrites(2, openingWrite)
				require.Error(t, r.c.Reconnect(t.Context()))
				quiesce()
				r.requireToldReopen(faultURI)
				r.srv.Set(faultURI, "text/markdown", "v2")
				minutes(6)
				require.Equal(t, 2, r.ledger.failures())
				r.requireHealed(faultURI, "v2")
			})
		})
	}
}
