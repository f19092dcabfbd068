package mcpsync_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Two workers share a PostgreSQL ledger; worker B holds docURI and keeps it
// (as a Shard does, for as long as B lives). Alice is revoked through worker
// A: the receipt lists docURI as Elsewhere, and nothing is announced for it.
// B is healthy, learns of the revocation (its Lookup and its next read of
// the URI refuse alice), yet never sweeps the URI it holds: the outbox never
// carries docURI's InvalidateRevoked, so the index fed by the outbox keeps
// serving alice's content, for every URI held by a worker other than the
// one the revocation went through, until that worker happens to open a new
// generation.
func TestBreak20RevocationOfAURIHeldElsewhereNeverReachesTheOutbox(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	open := func() *pgledger.Ledger {
		l, err := pgledger.Open(t.Context(), conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: time.Hour}})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}
	la, lb := open(), open()
	eb, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: lb})
	require.NoError(t, err)
	beginSession(t, eb)
	_, err = lb.Acquire(t.Context(), docURI)
	require.NoError(t, err)
	subscribeActive(t, eb, docURI, alice)
	tk, err := eb.IssueTicket(docURI, mcpsync.TriggerNotification)
	require.NoError(t, err)
	out, err := eb.AcceptResourceVersion(tk, text(docURI, "alice's text"))
	require.NoError(t, err)
	require.True(t, out.Accepted)

	ea, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: la})
	require.NoError(t, err)
	rc, err := ea.RevokeSubject(alice)
	require.NoError(t, err)
	require.Equal(t, []string{docURI}, rc.Elsewhere)

	// B, holding the URI, goes on: a lookup, a change notification.
	_, err = eb.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "B knows alice is revoked")
	if tk, err := eb.IssueTicket(docURI, mcpsync.TriggerNotification); err == nil {
		_, _ = eb.AcceptResourceVersion(tk, text(docURI, "alice's text, changed"))
	}
	_, err = lb.Renew(t.Context())
	require.NoError(t, err)

	entries, err := lb.Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	announced := false
	for _, en := range entries {
		if en.URI == docURI && en.Reason == mcpsync.InvalidateRevoked {
			announced = true
		}
	}
	rec, err := lb.Load(t.Context(), docURI)
	require.NoError(t, err)
	require.True(t, announced, "the outbox never announces that docURI's version (status %s) was read by a revoked subject: the index keeps it", rec.Current.Status)
}
