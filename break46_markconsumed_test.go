package mcpsync_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// x and y are watched. A Reconnect re-subscribes them one by one; the
// first one's request is parked. Meanwhile a second caller Subscribes the
// other one (already watched: had) and takes its key; its request in the
// new session is parked too. The reconnect, let go, finds that key held and
// marks it. The second caller's context ends as its request is answered:
// its Subscribe fails, and its settle, seeing the mark, runs its step again
// with the ended context. The URI is watched (by the first caller); once
// settled it must be open in the current session, or visibly degraded, and
// it must serve current content.
func TestBreak46HadSubscribeCancelledConsumesReconnectMark(t *testing.T) {
	for _, era := range []struct{ name, version, method string }{
		{"legacy", "2025-11-25", string(mcp.MethodResourcesSubscribe)},
		{"modern", "2026-07-28", string(mcp.MethodSubscriptionsListen)},
	} {
		t.Run(era.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const x, y = "file:///b46/mark/x.md", "file:///b46/mark/y.md"
				r := buildRig(t, wiring{name: era.name, version: era.version}, rigConfig{uris: []string{x, y}})
				_, err := r.c.SubscribeAll(t.Context(), []string{x, y})
				require.NoError(t, err)
				quiesce()
				h1, h2, arrived1, arrived2 := r.parkTwo(era.method)
				recDone := make(chan error, 1)
				go func() { recDone <- r.c.Reconnect(context.Background()) }()
				first := <-arrived1
				other := x
				if first == x || (era.name == "modern") {
					other = y
					if first == y {
						other = x
					}
				}
				t.Logf("reconnect's first request parked (%q); second caller subscribes %s", first, other)
				bctx, cancel := context.WithCancel(context.Background())
				bDone := make(chan error, 1)
				go func() {
					_, err := r.c.Subscribe(bctx, other)
					bDone <- err
				}()
				var second string
				select {
				case second = <-arrived2:
				case <-time.After(time.Second):
					t.Logf("the second caller sent nothing in 1s")
				}
				close(h1)
				quiesce()
				recFinished := false
				select {
				case err := <-recDone:
					recFinished = true
					t.Logf("reconnect: %v; second request %q", err, second)
				default:
					t.Logf("reconnect still running")
				}
				cancel()
				close(h2)
				quiesce()
				t.Logf("second caller: %v", <-bDone)
				if !recFinished {
					<-recDone
				}
				quiesce()

				gen := r.c.Health().SessionGeneration
				for _, u := range []string{x, y} {
					s, err := r.c.Engine().Subscription(u)
					require.NoError(t, err)
					e, lerr := r.c.Lookup(u)
					require.NoError(t, lerr)
					t.Logf("just after: %s %s %s %q session %d/%d server %v degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Degraded)
				}
				r.srv.Set(x, "text/markdown", "v2")
				r.srv.Set(y, "text/markdown", "v2")
				time.Sleep(2 * time.Minute)
				quiesce()
				var bad []string
				for _, u := range []string{x, y} {
					s, _ := r.c.Engine().Subscription(u)
					e, lerr := r.c.Lookup(u)
					require.NoError(t, lerr)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Contents[0].Text, e.Degraded)
					t.Logf("2 min after the change: %s", desc)
					if e.Contents[0].Text != "v2" && e.Degraded == "" {
						bad = append(bad, "stale silently 2 min after the change: "+desc)
					}
				}
				for range 10 {
					time.Sleep(time.Minute)
					quiesce()
				}
				gen = r.c.Health().SessionGeneration
				for _, u := range []string{x, y} {
					s, _ := r.c.Engine().Subscription(u)
					e, _ := r.c.Lookup(u)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Contents[0].Text, e.Degraded)
					t.Logf("12 min after: %s", desc)
					if !(s.SessionGeneration == gen && generationOpen(s.State)) || e.Contents[0].Text != "v2" {
						bad = append(bad, "not healed: "+desc)
					} else if s.Mode == mcpsync.ModePush && !r.srv.Subscribed(u) {
						bad = append(bad, "push but not notified: "+desc)
					}
				}
				for _, b := range bad {
					t.Error(b)
				}
			})
		})
	}
}
