package mcpsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Cache hit after permission revocation: zero hits once RevokeSubject is
// called, and an outbox invalidation for every derived artifact recorded
// against the subject's versions, so revocation is traceable to each index.
func TestCacheHitAfterPermissionRevocation(t *testing.T) {
	e := newEngine(t, nil)
	uris := []string{"file:///a.md", "file:///b.md", "file:///c.md"}
	owners := []string{alice, alice, bob}
	for i, u := range uris {
		_, err := e.Subscribe(u, owners[i])
		require.NoError(t, err)
		_, err = e.Activate(u, ledger.ModePush)
		require.NoError(t, err)
		tk, err := e.IssueTicket(u, ledger.TriggerInitial)
		require.NoError(t, err)
		_, err = e.AcceptResourceVersion(tk, text(u, "body of "+u))
		require.NoError(t, err)
	}
	// The consumer derives two artifacts per version, in two indexes.
	for _, entry := range outbox(t, e) {
		for _, index := range []string{"embeddings", "summaries"} {
			require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{
				Index: index, ArtifactID: index + ":" + entry.URI, Version: entry.Version,
			}))
		}
	}
	cursor := outbox(t, e)[2].Seq
	require.NoError(t, e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, cursor))

	rc, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.SchemaRevocationReceipt, rc.Schema)
	assert.Len(t, rc.Versions, 2)
	assert.Len(t, rc.Artifacts, 4)

	hits := 0
	for _, u := range uris[:2] {
		if _, err := e.Lookup(alice, u); err == nil {
			hits++
		} else {
			require.ErrorIs(t, err, mcpsync.ErrRevoked)
		}
	}
	assert.Zero(t, hits, "cache hits after revocation")
	_, err = e.Lookup(bob, uris[2])
	require.NoError(t, err, "another subject's versions are untouched")

	entries, err := e.PullOutbox(cursor, 0)
	require.NoError(t, err)
	type trace struct{ uri, index, artifact string }
	var traced []trace
	for _, entry := range entries {
		assert.Equal(t, ledger.InvalidateRevoked, entry.Reason)
		assert.Equal(t, alice, entry.Subject)
		a := entry.Artifact
		if a == nil {
			a = &ledger.DerivedArtifact{}
		}
		traced = append(traced, trace{entry.URI, a.Index, a.ArtifactID})
	}
	assert.ElementsMatch(t, []trace{
		{"file:///a.md", "", ""},
		{"file:///a.md", "embeddings", "embeddings:file:///a.md"},
		{"file:///a.md", "summaries", "summaries:file:///a.md"},
		{"file:///b.md", "", ""},
		{"file:///b.md", "embeddings", "embeddings:file:///b.md"},
		{"file:///b.md", "summaries", "summaries:file:///b.md"},
	}, traced)

	again, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	assert.Empty(t, again.Versions)
	assert.Empty(t, again.Artifacts)

	err = e.RecordDerived(ledger.DerivedArtifact{Index: "embeddings", ArtifactID: "late", Version: entries[0].Previous})
	require.ErrorIs(t, err, mcpsync.ErrRevoked)
}

func TestRecordDerivedChecksTheVersion(t *testing.T) {
	e := activeEngine(t, nil)
	v1 := acceptRead(t, e, ledger.TriggerInitial, "v1").Version.Version

	newer := v1
	newer.ReadOrdinal++
	err := e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: newer})
	require.ErrorIs(t, err, mcpsync.ErrUnknownVersion)

	forged := v1
	forged.Digest = "sha256:00"
	err = e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: forged})
	require.ErrorIs(t, err, mcpsync.ErrUnknownVersion)

	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: v1}))
	acceptRead(t, e, ledger.TriggerNotification, "v2")
	// A consumer finishing late on v1 may still record it.
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "b", Version: v1}))
}

func TestOutboxIsAtLeastOnceAndResumable(t *testing.T) {
	e := activeEngine(t, nil)
	for _, body := range []string{"v1", "v2", "v3", "v4"} {
		acceptRead(t, e, ledger.TriggerNotification, body)
	}
	batch, err := e.PullOutbox(0, 2)
	require.NoError(t, err)
	require.Len(t, batch, 2)
	again, err := e.PullOutbox(0, 2)
	require.NoError(t, err)
	assert.Equal(t, batch, again, "unacknowledged entries are delivered again")

	require.NoError(t, e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, batch[1].Seq))
	cursor, err := defaultCursor(e)
	require.NoError(t, err)
	assert.Equal(t, batch[1].Seq, cursor)
	rest, err := e.PullOutbox(0, 0)
	require.NoError(t, err)
	require.Len(t, rest, 2, "acknowledged entries are gone")
	assert.Equal(t, cursor+1, rest[0].Seq)
	for i := 1; i < len(rest); i++ {
		assert.Equal(t, rest[i-1].Seq+1, rest[i].Seq)
		assert.Equal(t, rest[i-1].Version.Digest, rest[i].Previous.Digest, "ordered per URI")
	}
	require.NoError(t, e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, 1), "acknowledging the past is a no-op")
	cursor, err = defaultCursor(e)
	require.NoError(t, err)
	assert.Equal(t, batch[1].Seq, cursor)
}

// An artifact the consumer deleted and forgot is not named by a later
// revocation; the others still are.
func TestForgetDerived(t *testing.T) {
	e := activeEngine(t, nil)
	out := acceptRead(t, e, ledger.TriggerInitial, "v1")
	for _, id := range []string{"chunk-0", "chunk-1"} {
		require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: id, Version: out.Version.Version}))
	}
	require.NoError(t, e.ForgetDerived("FILE:///docs/a.md", "vectors", "chunk-1"))
	require.NoError(t, e.ForgetDerived(docURI, "vectors", "never-recorded"), "forgetting the unknown is not an error")
	rc, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	require.Len(t, rc.Artifacts, 1)
	assert.Equal(t, "chunk-0", rc.Artifacts[0].ArtifactID)
}

// The chunks of one document are recorded in one call: one write, all or
// none, and the last record of an (Index, ArtifactID) wins.
func TestRecordDerivedRecordsABatchAtOnce(t *testing.T) {
	e := activeEngine(t, nil)
	v1 := acceptRead(t, e, ledger.TriggerInitial, "v1").Version.Version
	forged := v1
	forged.Digest = "sha256:00"
	at := func(s int) time.Time { return time.Unix(int64(s), 0).UTC() }

	err := e.RecordDerived(
		ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: v1},
		ledger.DerivedArtifact{Index: "i", ArtifactID: "b", Version: forged},
	)
	require.ErrorIs(t, err, mcpsync.ErrUnknownVersion)
	require.NoError(t, e.RecordDerived(
		ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: v1, RecordedAt: at(1)},
		ledger.DerivedArtifact{Index: "i", ArtifactID: "b", Version: v1, RecordedAt: at(2)},
		ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: v1, RecordedAt: at(3)},
	))
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "b", Version: v1, RecordedAt: at(4)}))

	rc, err := e.RevokeSubject(v1.Subject)
	require.NoError(t, err)
	got := map[string]time.Time{}
	for _, a := range rc.Artifacts {
		got[a.ArtifactID] = a.RecordedAt
	}
	assert.Equal(t, map[string]time.Time{"a": at(3), "b": at(4)}, got,
		"nothing of the refused batch; the last record of each id")
}
