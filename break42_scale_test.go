package mcpsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// SubscribeAll of 200 URIs while the server fails every 7th subscribe,
// listen and unsubscribe request; then half of them are Unsubscribed
// concurrently, a third of those with a context that ends a moment in, and
// a Reconnect comes in the middle. Faults then stop. Once settled, every
// URI is where its caller left it, and the server agrees.
func TestBreak42ScaleSubscribeAllUnsubscribeHalfWithFaults(t *testing.T) {
	for _, w := range eras {
		for _, reconnect := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reconnect=%v", w.name, reconnect), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n = 200
					uris := make([]string, n)
					for i := range uris {
						uris[i] = fmt.Sprintf("file:///b42/scale/%03d.md", i)
					}
					r := buildRig(t, w, rigConfig{uris: uris})
					faulty := func(method, _ string, k int) bool {
						switch method {
						case string(mcp.MethodResourcesSubscribe), string(mcp.MethodResourcesUnsubscribe), string(mcp.MethodSubscriptionsListen):
							return k%7 == 0
						}
						return false
					}
					r.wire.refuseWhen(faulty)
					_, err := r.c.SubscribeAll(t.Context(), uris)
					t.Logf("SubscribeAll: %v", err != nil)
					quiesce()

					mustOpen, mustClosed := map[string]bool{}, map[string]bool{}
					var mu sync.Mutex
					unsubErrs := map[string]error{}
					var wg sync.WaitGroup
					for i, u := range uris {
						if i%2 == 0 {
							mustOpen[u] = true
							continue
						}
						ctx, cancel := context.WithCancel(t.Context())
						if i%3 == 0 {
							time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
						}
						wg.Go(func() {
							defer cancel()
							sub, err := r.c.Unsubscribe(ctx, u)
							mu.Lock()
							if err == nil {
								mustClosed[u] = true
							} else {
								unsubErrs[u] = fmt.Errorf("%w (returned %s)", err, sub.State)
							}
							mu.Unlock()
						})
					}
					if reconnect {
						wg.Go(func() {
							time.Sleep(2 * time.Millisecond)
							_ = r.c.Reconnect(t.Context())
						})
					}
					wg.Wait()
					t.Logf("%d Unsubscribes returned nil", len(mustClosed))
					quiesce()
					time.Sleep(10 * time.Minute)
					quiesce()
					r.wire.refuseWhen(nil)
					for range 30 {
						time.Sleep(time.Minute)
						quiesce()
					}
					defer func() {
						if t.Failed() {
							for u, err := range unsubErrs {
								t.Logf("Unsubscribe(%s): %v", u, err)
							}
						}
					}()
					r.requireWhereLeft(uris, mustOpen, mustClosed)
				})
			})
		}
	}
}
