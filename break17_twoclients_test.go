package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Two engines on one ledger in one process, each with a Client for the same
// principal and the same server (two replicas of one deployment, or a
// blue/green handover where the new client connects before the old one
// closes). Client B never subscribes anything, yet its Connect "resumes"
// client A's subscription: ResumableSubscriptions yields every open row of
// another session generation, live or not, so B opens it in B's session.
// A's next read is then refused, A resubscribes it in A's session, B's next
// revalidation finds it gone and takes it back, and so on for ever: one new
// subscription generation, one subscribe and one extra read per
// revalidation tick, while each client's reads are refused half the time.
func TestBreak17SecondClientStealsALiveClientsSubscriptionForEver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc = "file:///docs/shared.md"
		srvA, srvB := mcpsynctest.NewServer(nil), mcpsynctest.NewServer(nil) // same name: one deployment
		srvA.Set(doc, "text/markdown", "v1")
		srvB.Set(doc, "text/markdown", "v1")
		ledger := mcpsync.NewMemoryLedger(nil)
		connect := func(srv *mcpsynctest.Server) (*mcpsync.Client, *mcpsync.Engine) {
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: ledger})
			require.NoError(t, err)
			c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
				return srv.NewInProcessTransport(), nil
			}, &mcpsync.ClientOptions{Engine: e, Subject: alice})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			return c, e
		}
		a, ea := connect(srvA)
		_, err := a.Subscribe(t.Context(), doc)
		require.NoError(t, err)
		before, err := ea.Subscription(doc)
		require.NoError(t, err)
		require.Equal(t, ea.SessionGeneration(), before.SessionGeneration)

		_, eb := connect(srvB) // subscribes nothing
		quiesce()
		time.Sleep(24 * time.Hour)
		quiesce()

		after, err := ea.Subscription(doc)
		require.NoError(t, err)
		t.Logf("after a day: subscription generation %d (was %d), in session %d (A's %d, B's %d); server reads A %d, B %d",
			after.SubscriptionGeneration, before.SubscriptionGeneration, after.SessionGeneration,
			ea.SessionGeneration(), eb.SessionGeneration(), srvA.Reads(doc), srvB.Reads(doc))
		assert.Equal(t, before.SubscriptionGeneration, after.SubscriptionGeneration,
			"a client that never subscribed took a live client's subscription, and they trade it back and forth")
		assert.Zero(t, srvB.Reads(doc), "client B read a URI it never subscribed to")
	})
}
