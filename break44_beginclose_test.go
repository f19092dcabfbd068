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
		l := newB33Ledger()
		var errs b33Errors
		r := newB33Rig(t, eras[1], l, &errs)
		r.subscribe()
		l.armCAS(1, func(_ string, next *mcpsync.Record) bool { return next.State == mcpsync.StateUnsubscribing })
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second)
		quiesce()
		require.Equal(t, 1, l.failures(), "the write was refused")
		b33Told(t, r.c, &errs, faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		b33Wait(r)
		b33Healed(t, r.c, faultURI, "v2")
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		require.True(t, r.srv.Subscribed(faultURI), "push but the server carries it on no stream")
	})
}
