package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The refresh fraction (SetRefreshFraction) only decides which
// subscriptions the client reads: "a subscription outside the fraction
// stays subscribed, discovered and fenced, but the client sends it no reads
// of its own". A Reconnect opens such a URI in the new session like any
// other. The repair of a URI whose reopen stopped half way is promised at
// "the URI's next revalidation tick".
//
// For a URI outside the fraction it never comes: Client.request returns at
// skipRefresh before it asks the engine for a read, and the repair
// (needsReopen -> resubscribe) only runs on that read's refusal. A
// 2026-07-28 stream the server ends, with the write opening the URI's next
// generation failing once, leaves the URI CLOSED in the current session for
// good, with the ledger healthy and the connection UP: it is no longer
// subscribed at all (a notification for it is refused as not subscribed),
// and a fraction raised later finds a closed subscription rather than one
// to read. Fails on the current code.
func TestBreak34OutsideRefreshFractionNeverRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.NoError(t, r.c.SetRefreshFraction(0)) // the rollout is rolled back
		require.False(t, r.c.RefreshEnabled(faultURI))

		r.ledger.failWrites(1, openingWrite)
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write opening the next generation was refused")

		r.sixRevalidations() // half an hour, the ledger healthy
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.SessionGeneration != r.c.Health().SessionGeneration || !(sub.State == mcpsync.StateActive || sub.State == mcpsync.StateVersionAccepted) {
			t.Fatalf("a watched URI outside the refresh fraction is no longer subscribed: %s (generation %d) half an hour later, health %s",
				sub.State, sub.SubscriptionGeneration, r.c.Health().State)
		}
	})
}
