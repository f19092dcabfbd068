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

// Bug: a 2026-07-28 Unsubscribe whose context ends while another stream
// replacement is under way leaves the URI on the listen stream for good.
//
// x and faultURI are watched. A Subscribe of z replaces the stream; its
// subscriptions/listen request (carrying faultURI, x and z) is slow to
// reach the server. Unsubscribe(x) drops the watch, takes x off the wanted
// list and waits for the relisten semaphore; its caller gives up. relisten
// returns ctx.Err(), the close is finished UNSUBSCRIBE_UNKNOWN, and, unlike
// 2025-11-25 (reconcileServer), nothing is queued to put the stream right.
// The stream that goes out carries x; no later replacement comes, so half an
// hour later the server still notifies x, which nobody watches.
// Safety: "a URI nobody watches (after Unsubscribe) is not carried on the
// listen stream".
func TestBreak38ModernCancelledUnsubscribeStreamKeepsCarrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, z = "file:///b38/unsub/x.md", "file:///b38/unsub/z.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(x, "text/markdown", "x1")
		r.srv.Set(z, "text/markdown", "z1")
		r.subscribe()
		_, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		quiesce()

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		subDone := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(t.Context(), z)
			subDone <- err
		}()
		synctest.Wait()
		<-hold.Arrived()

		ctx, cancel := context.WithCancel(t.Context())
		unsubDone := make(chan error, 1)
		go func() {
			_, err := r.c.Unsubscribe(ctx, x)
			unsubDone <- err
		}()
		synctest.Wait()
		cancel()
		<-unsubDone
		hold.Release()
		require.NoError(t, <-subDone)
		quiesce()
		sub, err := r.c.Engine().Subscription(x)
		require.NoError(t, err)
		require.NotEqual(t, mcpsync.StateActive, sub.State, "x's generation is closed")

		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(z))
		require.False(t, r.srv.Subscribed(x),
			"half an hour after its Unsubscribe (state %s), a listen stream still carries %s, which nobody watches", sub.State, x)
	})
}

// The same for an Unsubscribe of a URI whose close a reopen left half done
// (closeClosed): the stream it waited to replace goes out carrying the URI,
// and the replacement that would leave it out must still come.
func TestBreak38ModernCancelledUnsubscribeOfStuckCloseKeepsCarrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const z = "file:///b38/unsub/z.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(z, "text/markdown", "z1")
		r.subscribe()
		r.ledger.failWrites(1, writeTo(mcpsync.StateClosed))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateUnsubscribing, sub.State, "the reopen stopped half way")

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		subDone := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(t.Context(), z)
			subDone <- err
		}()
		synctest.Wait()
		<-hold.Arrived()

		ctx, cancel := context.WithCancel(t.Context())
		unsubDone := make(chan error, 1)
		go func() {
			_, err := r.c.Unsubscribe(ctx, faultURI)
			unsubDone <- err
		}()
		synctest.Wait()
		cancel()
		<-unsubDone
		hold.Release()
		require.NoError(t, <-subDone)
		quiesce()

		r.sixRevalidations()
		require.True(t, r.srv.Subscribed(z))
		require.False(t, r.srv.Subscribed(faultURI), "a listen stream still carries %s, which nobody watches", faultURI)
	})
}
