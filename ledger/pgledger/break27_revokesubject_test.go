package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// break27Revoke reads uri by subject through an engine on l, accepted and
// served, then revokes the subject: the revocation must be stored and the
// version refused, on every ledger that took the read.
func break27Revoke(t *testing.T, l mcpsync.Ledger, subject string) {
	t.Helper()
	const uri = "file:///doc.md"
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
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
}

// The NUL fix (records.subjects as digests) lets a subject holding NUL
// be read, but revoked.subject and revoked_log.subject are still text,
// which holds no NUL: the read is accepted and served, and its subject can
// never be revoked; the next engine keeps serving it.
func TestBreak27NulSubjectRevoke(t *testing.T) {
	const subject = "user:\x00alice"
	break27Revoke(t, mcpsync.NewMemoryLedger(nil), subject)
	break27Revoke(t, open(t, nil), subject)
}

// The long-subject fix (digests in the GIN index) lets a subject of a few
// kilobytes be read, but the revocation stores it as a key of two btree
// indexes (revoked's primary key, revoked_log's unique subject), whose
// entries hold at most about 2.7 kB: the read is accepted and served, and
// the subject can never be revoked.
func TestBreak27LongSubjectRevoke(t *testing.T) {
	subject := break26LongSubject(t)
	break27Revoke(t, mcpsync.NewMemoryLedger(nil), subject)
	break27Revoke(t, open(t, nil), subject)
}
