package mcpsync_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

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
				uris := make([]string, 12)
				for i := range uris {
					uris[i] = fmt.Sprintf("file:///b39/all/%02d.md", i)
				}
				r := buildRig(t, w, rigConfig{uris: uris})
				c, srv, kit := r.c, r.srv, r.faults()
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
				r.requireServerMatchesPush(uris)
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
					uris := make([]string, 150)
					for i := range uris {
						uris[i] = fmt.Sprintf("file:///b39/close/%03d.md", i)
					}
					c := buildRig(t, w, rigConfig{uris: uris}).c
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
