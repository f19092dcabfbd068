package mcpsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2026-07-28. x is watched (push). A Subscribe(y) and a SubscribeAll
// naming y run at once, and the next listen stream is refused (once, or
// every time). relisten's failure now unwants y before it lets the next
// replacement go: whatever the interleaving, once settled y is carried
// and acknowledged (push) or polls with a reason, x stays carried, and
// both serve current content.
func TestBreak45PassingModernSubscribeAllRacesSubscribeRefused(t *testing.T) {
	const x, y = "file:///b45/rl/x.md", "file:///b45/rl/y.md"
	for _, steady := range []bool{false, true} {
		t.Run(fmt.Sprintf("steady=%v", steady), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := buildRig(t, eras[1], rigConfig{uris: []string{x, y}})
				sub, err := r.c.Subscribe(t.Context(), x)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePush, sub.Mode)
				quiesce()
				var mu sync.Mutex
				refused := 0
				r.wire.refuseWhen(func(method, _ string, _ int) bool {
					if method != string(mcp.MethodSubscriptionsListen) {
						return false
					}
					mu.Lock()
					defer mu.Unlock()
					if steady || refused == 0 {
						refused++
						return true
					}
					return false
				})
				var wg sync.WaitGroup
				wg.Go(func() { _, _ = r.c.Subscribe(context.Background(), y) })
				wg.Go(func() { _, _ = r.c.SubscribeAll(context.Background(), []string{y}) })
				wg.Wait()
				quiesce()
				if steady {
					r.wire.refuseWhen(nil)
				}
				r.srv.Set(x, "text/markdown", "v2")
				r.srv.Set(y, "text/markdown", "v2")
				for range 40 {
					time.Sleep(time.Minute)
					quiesce()
				}
				gen := r.c.Health().SessionGeneration
				for _, u := range []string{x, y} {
					s, err := r.c.Engine().Subscription(u)
					require.NoError(t, err)
					e, lerr := r.c.Lookup(u)
					require.NoError(t, lerr)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Contents[0].Text, e.Degraded)
					t.Log(desc)
					require.True(t, s.SessionGeneration == gen && generationOpen(s.State), desc)
					if s.Mode == mcpsync.ModePush {
						require.True(t, r.srv.Subscribed(u), desc)
					} else {
						require.NotEmpty(t, s.ModeReason, desc)
					}
					require.Equal(t, "v2", e.Contents[0].Text, desc)
				}
			})
		})
	}
}
