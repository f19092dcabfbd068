package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Break22: the read of a URI carried across a listen stream replacement is
// deferred (readAfterGap) until replacements pause. When it falls due while
// a later replacement is still waiting for its acknowledgement, readAfterGap
// clears the whole gap set and reads nothing, counting on the next
// acknowledged replacement to note the gap again (gapped). But gapped only
// runs on the goroutine of the Subscribe that sent that replacement, and
// only if it is still waiting: a caller whose context ends first (here a
// Subscribe with a 3s deadline, the server acknowledging after 4s) never
// calls it. So:
//
//  1. x is subscribed on stream A.
//  2. Subscribe y replaces A with B (x carried over); while B is held, x
//     changes on the server: no stream carries it, the notification is lost.
//     B is acknowledged, x goes into the gap, its read due 1s later.
//  3. Subscribe z (ctx 3s) replaces B with C; C's acknowledgement is late.
//  4. At +1s readAfterGap finds C unacknowledged: x is dropped from the gap.
//  5. z's ctx ends; C is acknowledged afterwards; nobody reads x.
//
// Property violated: a change made while no stream carried a URI is read
// once replacements pause (the merge's promise; before it, x was read right
// after B's acknowledgement). Here x serves the old text, with no error,
// until its hourly revalidation: silently stale.
func TestBreak22GapDroppedWhileReplacementUnacked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y, z = "file:///gap/x.md", "file:///gap/y.md", "file:///gap/z.md"
		r := mustLiveRig(t, eras[1], mcpsync.ClientOptions{RevalidateEvery: time.Hour}, x, y, z)
		_, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		time.Sleep(time.Minute)
		quiesce()

		// Step 2: A -> B, x changes in between.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		done := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(context.Background(), y)
			done <- err
		}()
		synctest.Wait()
		require.True(t, arrived(hold), "stream B is held")
		r.srv.Set(x, "text/markdown", "v2") // no stream carries x now
		hold.Release()
		require.NoError(t, <-done)

		// Step 3: B -> C, C acknowledged late; z gives up first.
		hold2 := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		zctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		zdone := make(chan struct{})
		go func() {
			defer close(zdone)
			_, _ = r.c.Subscribe(zctx, z)
		}()
		quiesce() // past gather's short wait (B was acknowledged just now)
		require.True(t, arrived(hold2), "stream C is held")
		time.Sleep(4 * time.Second) // readAfterGap fires at +1s, z's ctx ends at +3s
		quiesce()
		hold2.Release()
		<-zdone
		time.Sleep(time.Minute)
		quiesce()
		r.requireConverged(t, x, "changed while no stream carried it, then a replacement was acknowledged late")
	})
}
