package boltledger_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Subjects filed under their SHA-256 let a subject longer than bbolt's
// key limit (32 KiB; a principal carrying a certificate chain) be read,
// accepted and served, but its revocation keys bucket "revoked" by the
// subject itself, which bbolt refuses: the subject can never be revoked,
// and the next engine opened on the file keeps serving its versions. The
// memory ledger revokes it.
func TestBreak27LongSubjectRevoke(t *testing.T) {
	const uri = "file:///doc.md"
	subject := "user:" + strings.Repeat("c", 33000)
	for _, tc := range []struct {
		name string
		l    mcpsync.Ledger
	}{
		{"memory", mcpsync.NewMemoryLedger(nil)},
		{"bolt", openWith(t, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: tc.l})
			require.NoError(t, err)
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			require.NoError(t, readAs(t, e, uri, subject), "the read is accepted")
			_, err = e.Lookup(subject, uri)
			require.NoError(t, err, "and served")

			if _, err := e.RevokeSubject(subject); err != nil {
				t.Fatalf("a subject whose read was accepted and served cannot be revoked: %s",
					strings.ReplaceAll(err.Error(), subject, "user:ccc…(33005 bytes)"))
			}
			f, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: tc.l})
			require.NoError(t, err)
			_, err = f.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			_, err = f.Lookup(subject, uri)
			require.ErrorIs(t, err, mcpsync.ErrRevoked, "the next engine serves a revoked subject's version")
		})
	}
}
