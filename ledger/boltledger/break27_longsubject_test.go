package boltledger_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A subject longer than bbolt's key limit (32 KiB; a principal carrying a
// certificate chain) could be filed under its SHA-256 but not revoked:
// bucket "revoked" is keyed by the subject. Every ledger refuses it for a
// read, and the longest subject it takes (MaxSubjectBytes) is revoked.
func TestBreak27LongSubjectRevoke(t *testing.T) {
	const uri = "file:///doc.md"
	for _, tc := range []struct {
		name    string
		subject string
		taken   bool
	}{
		{"too long", "user:" + strings.Repeat("c", 33000), false},
		{"longest", "user:" + strings.Repeat("c", mcpsync.MaxSubjectBytes-5), true},
	} {
		for _, l := range []struct {
			name string
			l    mcpsync.Ledger
		}{
			{"memory", mcpsync.NewMemoryLedger(nil)},
			{"bolt", openWith(t, nil)},
		} {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l.l})
				require.NoError(t, err)
				_, err = e.BeginSession(mcpsync.SessionInfo{})
				require.NoError(t, err)
				if !tc.taken {
					_, err := e.Subscribe(uri, tc.subject)
					require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
					return
				}
				require.NoError(t, readAs(t, e, uri, tc.subject), "the read is accepted")
				_, err = e.Lookup(tc.subject, uri)
				require.NoError(t, err, "and served")
				_, err = e.RevokeSubject(tc.subject)
				require.NoError(t, err, "a subject whose read was served can be revoked")
				f, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l.l})
				require.NoError(t, err)
				_, err = f.BeginSession(mcpsync.SessionInfo{})
				require.NoError(t, err)
				_, err = f.Lookup(tc.subject, uri)
				require.ErrorIs(t, err, mcpsync.ErrRevoked, "the next engine serves a revoked subject's version")
			})
		}
	}
}
