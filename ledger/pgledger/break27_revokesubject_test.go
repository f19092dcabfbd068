package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// break27Revoke has subject read uri through an engine on l, served, then
// revokes the subject: when the engine takes the read, the revocation must
// be stored and the version refused by every engine on l; otherwise the
// subject is refused for reading (ErrInvalidSubject) and nothing is served.
// It reports whether the read was taken.
func break27Revoke(t *testing.T, l mcpsync.Ledger, subject string) bool {
	t.Helper()
	const uri = "file:///doc.md"
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	if _, err := e.Subscribe(uri, subject); err != nil {
		require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
		_, err = e.Lookup(subject, uri)
		require.Error(t, err, "nothing served to a refused subject")
		return false
	}
	break26Read(t, e, uri, subject, "body")
	_, err = e.Lookup(subject, uri)
	require.NoError(t, err, "the subject's read is served")

	if _, err = e.RevokeSubject(subject); err != nil {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("a subject whose read was accepted and served cannot be revoked: %s", msg)
	}

	// An engine opened on the ledger later refuses the subject too.
	f, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = f.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = f.Lookup(subject, uri)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "a revoked subject's version served by the next engine")
	return true
}

// A subject holding NUL cannot be stored as PostgreSQL text, so it could
// not be revoked there: every ledger refuses it for a read.
func TestBreak27NulSubjectRevoke(t *testing.T) {
	const subject = "user:\x00alice"
	require.False(t, break27Revoke(t, mcpsync.NewMemoryLedger(nil), subject))
	require.False(t, break27Revoke(t, open(t, nil), subject))
}

// A subject of a few kilobytes does not fit the btree entries that key a
// revocation (about 2.7 kB): every ledger refuses it for a read, and the
// longest subject it takes (MaxSubjectBytes, incompressible) is revoked.
func TestBreak27LongSubjectRevoke(t *testing.T) {
	subject := break26LongSubject(t)
	require.False(t, break27Revoke(t, mcpsync.NewMemoryLedger(nil), subject))
	require.False(t, break27Revoke(t, open(t, nil), subject))
	longest := subject[:mcpsync.MaxSubjectBytes]
	require.True(t, break27Revoke(t, mcpsync.NewMemoryLedger(nil), longest))
	require.True(t, break27Revoke(t, open(t, nil), longest))
}
