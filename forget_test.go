package mcpsync_test

// Forgetting a URI after Unsubscribe: its version is no longer served, and
// consumers are told to delete what it fed.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

func TestForgetEvictsAClosedURIsVersion(t *testing.T) {
	e := activeEngine(t, nil)
	v1 := acceptRead(t, e, ledger.TriggerInitial, "v1").Version.Version
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "c0", Version: v1}))

	require.ErrorIs(t, e.Forget(docURI), mcpsync.ErrIllegalTransition, "an open subscription is not forgotten")
	_, err := e.Lookup(alice, docURI)
	require.NoError(t, err)

	_, err = e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.FinishClose(docURI, true)
	require.NoError(t, err)
	entry, err := e.Lookup(alice, docURI)
	require.NoError(t, err, "a closed URI is served until forgotten")
	assert.Zero(t, entry.StalenessBound, "with no freshness bound")

	before := len(outbox(t, e))
	require.NoError(t, e.Forget(docURI))
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrNoVersion)
	last := appendedEntry(t, e, before)
	assert.Equal(t, ledger.InvalidateForgotten, last.Reason)
	assert.Equal(t, v1, last.Previous)
	err = e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "c1", Version: v1})
	require.ErrorIs(t, err, mcpsync.ErrUnknownVersion, "nothing derives from a forgotten version")

	require.NoError(t, e.Forget(docURI))
	assert.Len(t, outbox(t, e), before+1, "forgetting twice tells consumers once")
	require.ErrorIs(t, e.Forget("file:///never.md"), mcpsync.ErrUnknownURI)

	// Subscribed again, the URI starts a new generation and a new fence.
	sub, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), sub.SubscriptionGeneration)
}

func TestClientForgetUnsubscribesAndEvicts(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{uris: []string{docURI}})
		r.watch(docURI)
		require.NoError(t, r.c.WaitForSync(t.Context()))
		_, err := r.c.Lookup(docURI)
		require.NoError(t, err)

		require.NoError(t, r.c.Forget(t.Context(), docURI))
		quiesce()
		_, err = r.c.Lookup(docURI)
		require.ErrorIs(t, err, mcpsync.ErrNoVersion)
		assert.False(t, r.srv.Subscribed(docURI), "the server keeps no subscription")
		require.ErrorIs(t, r.c.Forget(t.Context(), "file:///never.md"), mcpsync.ErrUnknownURI)
	})
}
