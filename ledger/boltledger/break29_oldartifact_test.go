package boltledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The earlier release read and served a subject holding NUL (it checked only
// empty and UTF-8), and its consumer recorded an artifact derived from that
// version; bbolt keys "user:\x00mallory" like any other subject, and that
// release could revoke it. After the upgrade RevokeSubject refuses the
// subject, so the artifact, still served by its derived index, is never
// invalidated: no ledger can revoke what was served.
func TestBreak29OldArtifact(t *testing.T) {
	ctx := context.Background()
	const uri = "file:///doc.md"
	subject := "user:\x00mallory"
	l := openWith(t, nil)
	// What the earlier release stored: a served version and an artifact.
	v := mcpsync.ResourceVersion{URI: uri, Subject: subject, Digest: "sha256:00"}
	rec := &mcpsync.Record{Revision: 1, State: mcpsync.StateActive,
		Current: &mcpsync.StoredVersion{Version: v, Status: mcpsync.VersionServed},
		Artifacts: []mcpsync.DerivedArtifact{{Schema: mcpsync.SchemaDerivedArtifact, Index: "search",
			ArtifactID: "doc#0", Version: v, RecordedAt: time.Now()}},
	}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	rc, err := e.RevokeSubject(subject)
	require.NoError(t, err, "a subject whose version and artifact were served cannot be revoked after the upgrade")
	require.Len(t, rc.Artifacts, 1, "the derived artifact is invalidated")
}
