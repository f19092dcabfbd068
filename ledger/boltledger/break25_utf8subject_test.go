package boltledger_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// A subject that is not valid UTF-8 is stored, in the record's JSON, as the
// replacement character, while the index files the record under the bytes
// the caller gave. After a restart the record says it was read by
// "\uFFFDbob", and revoking that subject finds nothing through the index:
// a walk of every record (the engine without LedgerIndex) revokes the
// version and announces the artifact.
func TestBreak25UTF8Subject(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc = "file:///docs/a.md"
	_, err = e.Subscribe(doc, "\xffbob")
	require.NoError(t, err)
	_, err = e.Activate(doc, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(doc, mcpsync.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: "bob's secret"}}))
	require.NoError(t, err)
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	require.NoError(t, e.RecordDerived(mcpsync.DerivedArtifact{Index: "vectors", ArtifactID: "a#0", Version: r.Current.Version}))
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	r, err = l.Load(ctx, doc)
	require.NoError(t, err)
	subject := r.Current.Version.Subject
	require.Equal(t, []string{subject}, r.Subjects(), "the record as stored")

	keys, err := l.SubjectKeys(ctx, subject)
	require.NoError(t, err)
	assert.Equal(t, []string{doc}, keys, "SubjectKeys(%q) must hold every key whose Record.Subjects holds it", subject)

	n, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	rc, err := n.RevokeSubject(subject)
	require.NoError(t, err)
	assert.Len(t, rc.Versions, 1, "the version the stored record says %q read", subject)
	assert.Len(t, rc.Artifacts, 1, "the artifact derived from it")
	r, err = l.Load(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.VersionRevoked, r.Current.Status)
	assert.Nil(t, r.Current.Contents, "a revoked version keeps no text")
}
