package mcpsync_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A 2026-07-28 Subscribe whose activation write fails after its listen
// stream was acknowledged fails, and drops its watch: no caller wants the
// URI. The stream must not go on carrying it: the next replacement leaves
// it out, so the server stops notifying a URI nobody watches.
func TestBreak36FailedActivationLeavesNoStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		r := newLedgerRig(t, eras[1])
		r.srv.Set(other, "text/markdown", "v1")
		r.ledger.failWrites(1, writeOf(faultURI, mcpsync.StateActive))
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.Error(t, err, "the activation write failed")
		require.Equal(t, 1, r.ledger.failures())
		quiesce()

		// Another Subscribe replaces the stream.
		_, err = r.c.Subscribe(t.Context(), other)
		require.NoError(t, err)
		quiesce()
		require.True(t, r.srv.Subscribed(other))
		require.False(t, r.srv.Subscribed(faultURI), "a stream still carries a URI whose Subscribe failed")
	})
}
