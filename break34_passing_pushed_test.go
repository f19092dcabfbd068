package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Passing coverage. A URI whose reopen stopped half way (one ledger write of
// the close-and-open failed) and that the next revalidation tick opened
// again is pushed again: a change on the server reaches it by notification
// within a second, not by the next revalidation minutes later. Promise: the
// repaired subscription is carried by the listen stream (2026-07-28) or
// subscribed on the server (2025-11-25) again.
func TestBreak34PassingRepairedURIIsPushedAgain(t *testing.T) {
	for _, m := range reopenWrites {
		t.Run("reestablish-"+m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, eras[1])
				r.subscribe()

				r.ledger.failWrites(1, m.match)
				r.faults().EndListenStreams()
				time.Sleep(2 * time.Second)
				quiesce()
				require.Equal(t, 1, r.ledger.failures())
				r.sixRevalidations()
				r.requireHealed(faultURI, "v1")
				r.requirePushed()
			})
		})
	}
	for _, w := range eras {
		t.Run("reconnect-activate-"+w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLedgerRig(t, w)
				r.subscribe()

				r.ledger.failWrites(1, activatingWrite)
				require.Error(t, r.c.Reconnect(t.Context()))
				quiesce()
				r.sixRevalidations()
				r.requireHealed(faultURI, "v1")
				r.requirePushed()
			})
		})
	}
}
