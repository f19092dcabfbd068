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

// Safety: "a URI nobody watches is not carried on the stream after things
// settle". A SubscribeAll whose context is cancelled while its first
// listen stream (which carries every URI, Client.wantAll) waits to be
// sent fails every URI with context.Canceled, and none of them is
// watched: Subscribe drops each watch and takes the URI off conn.want
// (conn.setWanted(uri, false)), and unwantUnwatched does the same. But
// the stream itself is never replaced: Client.relisten returned on
// ctx.Done while its Listen goroutine, bound to the client's context,
// went on; the server acknowledges it, conn.listen is that stream, and
// nothing replaces it until some other Subscribe or Unsubscribe happens
// to come along. Left alone, the server notifies every one of the URIs,
// none of which anybody watches, for the rest of the session.
// (TestBreak36CancelledSubscribeLeavesNothing passes only because it
// subscribes another URI afterwards, which replaces the stream.)
func TestBreak37CancelledSubscribeAllLeavesStreamCarryingUnwatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		uris := make([]string, 4)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b37/cancel/%d.md", i)
			r.srv.Set(uris[i], "text/markdown", "v1")
		}
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := r.c.SubscribeAll(ctx, uris)
			done <- err
		}()
		synctest.Wait()
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("the first listen stream was never sent")
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		hold.Release()
		quiesce()

		time.Sleep(30 * time.Minute) // every revalidation and repair tick there is
		quiesce()

		for _, u := range uris {
			if sub, err := r.c.Engine().Subscription(u); err == nil {
				require.NotEqual(t, mcpsync.StateActive, sub.State, "%s was opened", u)
			}
		}
		var carried []string
		for _, u := range uris {
			if r.srv.Subscribed(u) {
				carried = append(carried, u)
			}
		}
		require.Empty(t, carried, "after a cancelled SubscribeAll settled, the listen stream still carries %d URIs nobody watches", len(carried))
	})
}
