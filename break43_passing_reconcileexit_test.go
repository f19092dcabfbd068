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
)

// 2025-11-25, stress on the exit of the one reconcileServer loop per URI.
// For each of many URIs a Subscribe is cancelled while the server's answer
// to its resources/subscribe (recorded by the server) is held, and the
// answer is released at the same moment: Client.subscribe queues
// reconcileServer (loop L) and the late answer's settling queues another
// (R). When R finds L's mark after L decided it had no further pass to
// make but before L's deferred delete, R only sets the mark to 2 and
// returns, and L's delete then drops it: nobody unsubscribes the URI.
// Once settled, no URI whose Subscribe failed may stay subscribed on the
// server. (Passes: 60 runs never hit the window, a few instructions wide;
// the hazard is by reading only.)
func TestBreak43PassingLegacyReconcileLoopExitRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		uris := make([]string, n)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b43/exit/%03d.md", i)
		}
		r := buildRig(t, eras[0], rigConfig{uris: uris})
		kit := r.faults()
		var wg sync.WaitGroup
		var mu sync.Mutex
		cancelled := map[string]bool{}
		for _, u := range uris {
			hold := kit.HoldNext(string(mcp.MethodResourcesSubscribe), u)
			ctx, cancel := context.WithCancel(t.Context())
			wg.Go(func() {
				if _, err := r.c.Subscribe(ctx, u); err != nil {
					mu.Lock()
					cancelled[u] = true
					mu.Unlock()
				}
			})
			wg.Go(func() {
				<-hold.Arrived()
				go cancel()
				hold.Release()
			})
		}
		wg.Wait()
		for range 10 {
			time.Sleep(time.Minute)
			quiesce()
		}
		var left []string
		for _, u := range uris {
			if cancelled[u] && r.srv.Subscribed(u) {
				sub, _ := r.c.Engine().Subscription(u)
				left = append(left, fmt.Sprintf("%s (%s %s)", u, sub.State, sub.Mode))
			}
		}
		t.Logf("%d Subscribes cancelled; unsubscribes sent: %d", len(cancelled), r.wire.requests(string(mcp.MethodResourcesUnsubscribe)))
		require.Empty(t, left, "unwatched URIs the server still notifies, 10 minutes after their Subscribes were cancelled")
	})
}
