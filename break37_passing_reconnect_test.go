package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Passing coverage. Progress under a racing Reconnect: a SubscribeAll whose first request
// to the server (the listen stream, or a resources/subscribe) is held
// while the caller reconnects returns with every URI ACTIVE in push mode
// in the new session, carried by the server, and later changes reach
// Lookup.
func TestBreak37PassingSubscribeAllRacingReconnect(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, w, nil)
				uris := make([]string, 6)
				for i := range uris {
					uris[i] = fmt.Sprintf("file:///b37/reconnect/%d.md", i)
					r.srv.Set(uris[i], "text/markdown", "v1")
				}
				var hold *mcpsynctest.Hold
				if w.version == "2026-07-28" {
					hold = r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
				} else {
					hold = r.faults().HoldNextRequest(string(mcp.MethodResourcesSubscribe), "")
				}
				done := make(chan error, 1)
				go func() {
					_, err := r.c.SubscribeAll(t.Context(), uris)
					done <- err
				}()
				synctest.Wait()
				<-hold.Arrived()
				require.NoError(t, r.c.Reconnect(t.Context()))
				hold.Release()
				require.NoError(t, <-done)
				quiesce()
				gen := r.c.Health().SessionGeneration
				for _, u := range uris {
					sub, err := r.c.Engine().Subscription(u)
					require.NoError(t, err)
					assert.Equal(t, gen, sub.SessionGeneration, u)
					assert.True(t, sub.State == mcpsync.StateActive || sub.State == mcpsync.StateVersionAccepted, "%s %s", u, sub.State)
					assert.Equal(t, mcpsync.ModePush, sub.Mode, "%s: %q", u, sub.ModeReason)
					assert.True(t, r.srv.Subscribed(u), u)
					r.srv.Set(u, "text/markdown", "v2")
				}
				quiesce()
				for _, u := range uris {
					entry, err := r.c.Lookup(u)
					require.NoError(t, err)
					assert.Equal(t, "v2", entry.Contents[0].Text, u)
				}
			})
		})
	}
}
