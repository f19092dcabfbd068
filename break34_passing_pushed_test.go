package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Passing coverage. A URI whose reopen stopped half way (one ledger write of
// the close-and-open failed) and that the next revalidation tick opened
// again is pushed again: a change on the server reaches it by notification
// within a second, not by the next revalidation minutes later. Promise: the
// repaired subscription is carried by the listen stream (2026-07-28) or
// subscribed on the server (2025-11-25) again.
func TestBreak34PassingRepairedURIIsPushedAgain(t *testing.T) {
	for _, m := range b33Matchers {
		t.Run("reestablish-"+m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, eras[1], l, &errs)
				r.subscribe()

				l.armCAS(1, m.match)
				r.faults().EndListenStreams()
				time.Sleep(2 * time.Second)
				quiesce()
				require.Equal(t, 1, l.failures())
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v1")
				b34Pushed(t, r)
			})
		})
	}
	for _, w := range eras {
		t.Run("reconnect-activate-"+w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, w, l, &errs)
				r.subscribe()

				l.armCAS(1, b33Matchers[2].match)
				require.Error(t, r.c.Reconnect(t.Context()))
				quiesce()
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v1")
				b34Pushed(t, r)
			})
		})
	}
}

// b34Pushed checks that a change of faultURI on the server is read within
// a second, which only a notification does (revalidation is minutes away).
func b34Pushed(t *testing.T, r *rig) {
	t.Helper()
	sub, err := r.c.Engine().Subscription(faultURI)
	require.NoError(t, err)
	require.Equal(t, mcpsync.ModePush, sub.Mode, sub.ModeReason)
	r.srv.Set(faultURI, "text/markdown", "pushed")
	time.Sleep(time.Second)
	quiesce()
	b33Drain(r)
	require.Equal(t, "pushed", r.served(), "the change was not notified to the repaired subscription")
}
