package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2026-07-28. The server ends the listen stream; the reopen that follows
// meets one failed write of its BeginClose (the generation stays ACTIVE in
// push mode, no stream carries it). Once the ledger is healthy, x is open
// in push mode on an acknowledged stream the server keeps, not degraded.
func TestBreak44PassingModernReestablishBeginCloseFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.ledger.failWrites(1, writeTo(mcpsync.StateUnsubscribing))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second)
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write was refused")
		r.requireToldReopen(faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		r.sixRevalidations()
		r.requireHealed(faultURI, "v2")
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		require.True(t, r.srv.Subscribed(faultURI), "push but the server carries it on no stream")
	})
}
