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

// A reconnect's mark makes a second caller's settle rerun its step; the
// caller's context ends, the step fails, and settle starts an async
// resubscribe on the client's context. Racing that:
//   - "had-unsubscribe": the URI was watched; right as the failing
//     Subscribe returns, the caller Unsubscribes it. It must not come back.
//   - "first": the URI was not watched; the failing first Subscribe drops
//     its watch. The async resubscribe must not resurrect it.
//
// Either way the other (watched) URI must end open in the current session
// with current content.
func TestBreak47AsyncResubscribeRaces(t *testing.T) {
	for _, era := range []struct{ name, version, method string }{
		{"legacy", "2025-11-25", string(mcp.MethodResourcesSubscribe)},
		{"modern", "2026-07-28", string(mcp.MethodSubscriptionsListen)},
	} {
		for _, mode := range []string{"had-unsubscribe", "first"} {
			t.Run(era.name+"/"+mode, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const x, y, z = "file:///b47/x.md", "file:///b47/y.md", "file:///b47/z.md"
					r := buildRig(t, wiring{name: era.name, version: era.version}, rigConfig{uris: []string{x, y, z}})
					_, err := r.c.SubscribeAll(t.Context(), []string{x, y})
					require.NoError(t, err)
					quiesce()
					h1, h2, arrived1, arrived2 := r.parkTwo(era.method)
					recDone := make(chan error, 1)
					go func() { recDone <- r.c.Reconnect(context.Background()) }()
					first := <-arrived1
					other := y
					if first == y {
						other = x
					}
					keep := x
					if other == x {
						keep = y
					}
					target := other
					if mode == "first" {
						target = z
					}
					t.Logf("reconnect's first request parked (%q); second caller subscribes %s", first, target)
					bctx, cancel := context.WithCancel(context.Background())
					bDone := make(chan error, 1)
					uDone := make(chan error, 1)
					go func() {
						_, err := r.c.Subscribe(bctx, target)
						bDone <- err
						if mode == "had-unsubscribe" {
							_, err := r.c.Unsubscribe(context.Background(), target)
							uDone <- err
						} else {
							uDone <- nil
						}
					}()
					select {
					case u := <-arrived2:
						t.Logf("second request %q parked", u)
					case <-time.After(time.Second):
						t.Logf("the second caller sent nothing in 1s")
					}
					close(h1)
					quiesce()
					cancel()
					close(h2)
					t.Logf("second caller: %v", <-bDone)
					t.Logf("unsubscribe: %v", <-uDone)
					t.Logf("reconnect: %v", <-recDone)
					quiesce()
					r.srv.Set(keep, "text/markdown", "v2")
					for range 12 {
						time.Sleep(time.Minute)
						quiesce()
					}
					gen := r.c.Health().SessionGeneration
					var bad []string
					s, _ := r.c.Engine().Subscription(keep)
					e, _ := r.c.Lookup(keep)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", keep, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(keep), e.Contents[0].Text, e.Degraded)
					t.Logf("kept: %s", desc)
					if !(s.SessionGeneration == gen && generationOpen(s.State)) || e.Contents[0].Text != "v2" {
						bad = append(bad, "watched URI not healed: "+desc)
					}
					ts, _ := r.c.Engine().Subscription(target)
					desc = fmt.Sprintf("%s: %s %s session %d/%d server %v", target, ts.State, ts.Mode, ts.SessionGeneration, gen, r.srv.Subscribed(target))
					t.Logf("unwatched: %s", desc)
					if generationOpen(ts.State) && ts.SessionGeneration == gen {
						bad = append(bad, "unwatched URI open again: "+desc)
					}
					if r.srv.Subscribed(target) {
						bad = append(bad, "server still notifies an unwatched URI: "+desc)
					}
					for _, b := range bad {
						t.Error(b)
					}
				})
			})
		}
	}
}
