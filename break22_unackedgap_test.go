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

// Break22: a listen stream the server never acknowledges breaks the chain
// of gaps. URIs carried across a replacement are re-read only when the
// stream replaced was acknowledged (relisten: `old != nil && old.isAcked()`
// before gapped). So:
//
//  1. x is subscribed on stream A (acknowledged).
//  2. Subscribe y replaces A with B; the server never acknowledges B (held
//     past RequestTimeout), so y ends in poll mode. A was cancelled when B
//     was sent: no acknowledged stream carries x, and x changes on the
//     server meanwhile (its notification reaches nobody).
//  3. Subscribe z replaces B with C, which the server acknowledges. The
//     stream C replaced (B) was never acknowledged, so nothing notes that x
//     went from A to C through a gap; x is never read again until its
//     hourly revalidation.
//
// Property violated: a change made while no stream carried a subscribed URI
// is read once the replacements pause (readAfterGap); here x serves the
// old text with no error, in push mode: silently stale.
func TestBreak22GapAcrossUnacknowledgedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y, z = "file:///unacked/x.md", "file:///unacked/y.md", "file:///unacked/z.md"
		r := mustLiveRig(t, eras[1], mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second}, x, y, z)
		_, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		time.Sleep(time.Minute)
		quiesce()

		// Step 2: B is never acknowledged.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		done := make(chan struct{})
		var ysub mcpsync.Subscription
		go func() {
			defer close(done)
			ysub, _ = r.c.Subscribe(context.Background(), y)
		}()
		synctest.Wait()
		require.True(t, arrived(hold), "stream B is held")
		r.srv.Set(x, "text/markdown", "v2") // no acknowledged stream carries x
		<-done
		require.Equal(t, mcpsync.ModePoll, ysub.Mode, "y's stream was never acknowledged")

		// Step 3: C replaces B and is acknowledged.
		zsub, err := r.c.Subscribe(context.Background(), z)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, zsub.Mode, zsub.ModeReason)
		time.Sleep(time.Minute)
		quiesce()
		r.requireConverged(t, x, "changed while its stream was replaced by one never acknowledged")
	})
}
