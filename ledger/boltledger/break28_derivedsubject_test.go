package boltledger_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// RecordDerived takes an artifact of a version of an earlier generation
// for any subject: one beyond bbolt's key limit (33,000 bytes, which
// Subscribe refuses) is recorded and filed under its digest, and can then
// never be revoked, bucket "revoked" being keyed by the subject. Either
// RecordDerived refuses it (ErrInvalidSubject) or the revocation succeeds
// and names the artifact.
func TestBreak28DerivedSubject(t *testing.T) {
	const uri = "file:///doc.md"
	bad := "user:" + strings.Repeat("c", 33000)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: openWith(t, nil)})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	require.NoError(t, readAs(t, e, uri, "user:alice"))
	first, err := e.Lookup("user:alice", uri)
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{}) // a new generation of uri, read again
	require.NoError(t, err)
	_, err = e.Subscribe(uri, "user:alice")
	require.NoError(t, err)
	_, err = e.Activate(uri, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, mcpsync.TriggerInitial)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: "v2"}}))
	require.NoError(t, err)
	require.True(t, out.Changed())

	v := first.Version
	v.Subject = bad
	err = e.RecordDerived(mcpsync.DerivedArtifact{Index: "vectors", ArtifactID: "chunk-1", Version: v})
	if err != nil {
		require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
		return
	}
	rc, err := e.RevokeSubject(bad)
	if err != nil {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("an artifact was recorded for a subject that can never be revoked (invalid subject: %v): %s",
			errors.Is(err, mcpsync.ErrInvalidSubject), msg)
	}
	require.Len(t, rc.Artifacts, 1, "the revocation names the artifact")
}
