package pgledger_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// RecordDerived names an artifact's subject in Version.Subject; for a
// version of an earlier generation it is never compared with the subject
// that generation was read by, nor checked as Subscribe checks a reader.
// An artifact named for a subject holding NUL, or longer than
// MaxSubjectBytes, is recorded and filed under it, and that subject can
// then never be revoked on PostgreSQL: the artifact escapes every
// revocation. Either RecordDerived refuses it (ErrInvalidSubject) or the
// revocation succeeds and names the artifact.
func TestBreak28DerivedSubject(t *testing.T) {
	for name, bad := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": break26LongSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			const uri = "file:///doc.md"
			l := open(t, nil)
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
			require.NoError(t, err)
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			break26Read(t, e, uri, "user:alice", "one")
			first, err := e.Lookup("user:alice", uri)
			require.NoError(t, err)

			// A new session: a new generation of the URI, read again.
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			break26Read(t, e, uri, "user:alice", "two")

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
		})
	}
}
