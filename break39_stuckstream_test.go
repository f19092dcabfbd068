package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Bug (same root as TestBreak39ReopenedClearsDegradedOnUnackedStream, no
// ledger fault needed): a listen stream the server never acknowledges
// counts as carrying every URI its filter names, for good.
//
// x is watched, pushed on an acknowledged stream. Subscribe(y) sends the
// replacement [x, y], which cancels x's stream; the replacement is stuck
// before the server (never acknowledged, never ended). relisten gives up
// after RequestTimeout: y falls back to polling, but the stuck stream stays
// conn.listen. x stays ACTIVE in push mode; Client.unheard asks only
// listenStream.carries (the filter), so rehear never reopens x, and
// nothing sets Degraded. Half an hour later the server notifies x on no
// stream while Lookup says nothing is wrong. Safety: "a watched URI is
// carried, or Degraded says why". Pre-existing (fails at fdcf891 too).
func TestBreak39UnackedStreamHidesUncarriedURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newRig(t, eras[1], nil)
		r.subscribe()
		r.srv.Set(y, "text/markdown", "y1")
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		sub, err := r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePoll, sub.Mode, "y's stream was never acknowledged")
		quiesce()
		r.sixRevalidations() // half an hour
		xs, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		if !r.srv.Subscribed(faultURI) && entry.Degraded == "" {
			t.Fatalf("%s is %s in %s mode, carried by no stream on the server, and Lookup's Degraded is empty", faultURI, xs.State, xs.Mode)
		}
	})
}

// The same with polls too rare to help: no poll tick of y tries its stream
// again within the test, so only x's own revalidation tick can see that
// the stream carrying it never reached the server, and open x on a new
// one.
func TestBreak39UnackedStreamFoundByOwnTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newRig(t, eras[1], &mcpsync.ClientOptions{PollEvery: 24 * time.Hour})
		r.subscribe()
		r.srv.Set(y, "text/markdown", "y1")
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		sub, err := r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePoll, sub.Mode, "y's stream was never acknowledged")
		quiesce()
		r.sixRevalidations() // half an hour
		require.True(t, r.srv.Subscribed(faultURI), "%s is carried by no stream the server has", faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		require.Equal(t, "v2", r.served(), "a change of %s was not pushed", faultURI)
	})
}
