package mcpsync_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Two engines share a ledger (the README's many workers). Worker A's
// RecordDerived checks the subject's revocation, then worker B revokes the
// subject and sweeps the URI, then A's write lands. The fence's accept
// handles exactly this race (revokedSince); RecordDerived does not: the
// artifact is recorded against a version already marked revoked, with no
// outbox entry naming it and no error. The design: revocation "emits outbox
// invalidations for every derived artifact that consumers recorded against
// those versions" — this one stays in the index for ever.
func TestBreak19RecordDerivedRacingARevocationOnAnotherEngineEscapesIt(t *testing.T) {
	hooked := newFaultLedger()
	mem := hooked.Ledger
	a := newEngine(t, &mcpsync.Options{Ledger: hooked})
	_, err := a.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = a.Activate(docURI, mcpsync.ModePush)
	require.NoError(t, err)
	out, err := a.AcceptResourceVersion(issue(t, a, mcpsync.TriggerInitial), text(docURI, "alice's notes"))
	require.NoError(t, err)
	v1 := out.Version.Version

	b, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: mem})
	require.NoError(t, err)
	hooked.beforeWrite(func(_ string, next *mcpsync.Record) bool { return len(next.Artifacts) > 0 }, func() {
		_, err := b.RevokeSubject(alice)
		require.NoError(t, err)
	})

	recErr := a.RecordDerived(mcpsync.DerivedArtifact{Index: "vectors", ArtifactID: "chunk-0", Version: v1})
	if recErr != nil {
		require.ErrorIs(t, recErr, mcpsync.ErrRevoked)
		return // refused: fine
	}
	entries, err := a.PullOutbox(0, 0)
	require.NoError(t, err)
	named := false
	for _, en := range entries {
		if en.Artifact != nil && en.Artifact.ArtifactID == "chunk-0" {
			named = true
		}
	}
	rec, err := mem.Load(context.Background(), docURI)
	require.NoError(t, err)
	require.True(t, named, "RecordDerived returned nil for an artifact of a revoked subject and no outbox entry names it (record holds %d artifact(s) on a %s version)",
		len(rec.Artifacts), rec.Current.Status)
}
