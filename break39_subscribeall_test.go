package mcpsync_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b39Settled checks, once things settled, that the server notifies
// exactly the URIs whose subscription is open in push mode.
func b39Settled(t *testing.T, c *mcpsync.Client, srv *mcpsynctest.Server, uris []string) {
	t.Helper()
	var bad []string
	for _, u := range uris {
		sub, err := c.Engine().Subscription(u)
		open := err == nil && sub.SessionGeneration == c.Health().SessionGeneration &&
			(sub.State == mcpsync.StateActive || sub.State == mcpsync.StateVersionAccepted || sub.State == mcpsync.StateTombstonePending)
		push := open && sub.Mode == mcpsync.ModePush
		if push != srv.Subscribed(u) {
			bad = append(bad, fmt.Sprintf("%s: state %s mode %s (err %v), server subscribed %v", u, sub.State, sub.Mode, err, srv.Subscribed(u)))
		}
	}
	require.Empty(t, bad, "server subscriptions that do not match the client's")
}

// A SubscribeAll cancelled midway, with two of its requests parked (one
// before the server sees it, one after the server answered), then
// released: once settled, the server notifies exactly the URIs that are
// open in push mode, in both eras.
func TestBreak39SubscribeAllCancelledMidwaySettles(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				method := string(mcp.MethodResourcesSubscribe)
				if w.version == "2026-07-28" {
					method = string(mcp.MethodSubscriptionsListen)
				}
				srv := mcpsynctest.NewServer(nil)
				uris := make([]string, 12)
				for i := range uris {
					uris[i] = fmt.Sprintf("file:///b39/all/%02d.md", i)
					srv.Set(uris[i], "text/markdown", "v1")
				}
				var kit *mcpsynctest.Transport
				c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
					kit = mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
					return kit, nil
				}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: w.version, Seed: 1})
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				u3, u5 := uris[3], uris[5]
				if method == string(mcp.MethodSubscriptionsListen) {
					u3, u5 = "", ""
				}
				h1 := kit.HoldNextRequest(method, u3)
				h2 := kit.HoldNext(method, u5)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() {
					_, err := c.SubscribeAll(ctx, uris)
					done <- err
				}()
				synctest.Wait()
				cancel()
				synctest.Wait()
				h1.Release()
				h2.Release()
				<-done
				quiesce()
				for range 6 {
					time.Sleep(time.Minute)
					quiesce()
				}
				open := 0
				for _, u := range uris {
					if srv.Subscribed(u) {
						open++
					}
				}
				t.Logf("%d of %d URIs subscribed on the server after the cancel", open, len(uris))
				b39Settled(t, c, srv, uris)
			})
		})
	}
}

// SubscribeAll racing Close: Close returns with nothing of the client left
// running (synctest reports a goroutine left blocked in the bubble; goleak
// one left outside), whichever fake-time moment Close comes at.
func TestBreak39SubscribeAllRacingClose(t *testing.T) {
	for _, w := range eras {
		for _, d := range []time.Duration{0, time.Microsecond, 5 * time.Millisecond, 15 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", w.name, d), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := mcpsynctest.NewServer(nil)
					uris := make([]string, 150)
					for i := range uris {
						uris[i] = fmt.Sprintf("file:///b39/close/%03d.md", i)
						srv.Set(uris[i], "text/markdown", "v1")
					}
					c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
						return srv.NewInProcessTransport(), nil
					}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: w.version, Seed: 1})
					require.NoError(t, err)
					done := make(chan error, 1)
					go func() {
						_, err := c.SubscribeAll(t.Context(), uris)
						done <- err
					}()
					time.Sleep(d)
					require.NoError(t, c.Close())
					<-done
					synctest.Wait()
				})
			})
		}
	}
}
