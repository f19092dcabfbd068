package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
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
				method := string(mcp.MethodResourcesSubscribe)
				if w.version == "2026-07-28" {
					method = string(mcp.MethodSubscriptionsListen)
				}
				srv := mcpsynctest.NewServer(nil)
				srv.Set(faultURI, "text/markdown", "v1")
				srv.Set(y, "text/markdown", "y1")
				var dials int
				var hold *mcpsynctest.Hold
				var errs b33Errors
				c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
					kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
					if dials++; dials == 2 {
						hold = kit.HoldNextRequest(method, "") // the Reconnect's first re-subscribe
					}
					return kit, nil
				}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: w.version, Seed: 1, OnError: errs.add})
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				for _, u := range []string{faultURI, y} {
					_, err := c.Subscribe(t.Context(), u)
					require.NoError(t, err)
				}
				quiesce()

				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- c.Reconnect(ctx) }()
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

				srv.Set(faultURI, "text/markdown", "v2")
				srv.Set(y, "text/markdown", "y2")
				for range 36 {
					synctestSleepMinute()
					quiesce()
				}
				b33Healed(t, c, faultURI, "v2")
				b33Healed(t, c, y, "y2")
				require.True(t, srv.Subscribed(faultURI))
				require.True(t, srv.Subscribed(y))
			})
		})
	}
}

// Poll mode (a server without the subscribe capability): a Reconnect
// whose opening write fails twice in a row (at the Reconnect, then at the
// first repair) is told, and healed by a later poll tick.
func TestBreak38PassingPollModeTwoFailuresHeal(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{NoSubscribe: true})
				srv.Set(faultURI, "text/markdown", "v1")
				l := newB33Ledger()
				eng, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
				require.NoError(t, err)
				var errs b33Errors
				c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
					return srv.NewInProcessTransport(), nil
				}, &mcpsync.ClientOptions{Engine: eng, Subject: alice, ProtocolVersion: version, Seed: 1, OnError: errs.add})
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				sub, err := c.Subscribe(t.Context(), faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePoll, sub.Mode)

				l.armCAS(2, b33OpeningWrite)
				require.Error(t, c.Reconnect(t.Context()))
				quiesce()
				b33Told(t, c, &errs, faultURI)
				srv.Set(faultURI, "text/markdown", "v2")
				for range 6 {
					synctestSleepMinute()
					quiesce()
				}
				require.Equal(t, 2, l.failures())
				b33Healed(t, c, faultURI, "v2")
			})
		})
	}
}

func synctestSleepMinute() { time.Sleep(time.Minute) }
