package pgledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Engine.update now asks Fenced(key) before it loads the record, and gives
// up with ErrNotLeaseholder. But many updates write nothing (fn returns
// nil): a revocation sweep of a record that holds nothing of the subject,
// ForgetDerived of an artifact that is not recorded. Before, those
// returned nil without a write, whoever held the lease; now every key
// whose lease another worker holds is refused. So a RevokeSubject on a
// ledger shared by two workers lists as "Elsewhere" every URI of the other
// worker, although none was ever read by the revoked subject, and the
// revocation is never marked swept: every NewEngine on the ledger sweeps it
// again (a full Range) for ever, and the receipt says there is something
// left to sweep where there is nothing.
// Property violated: the receipt lists what the revocation invalidated or
// left to others; a revocation with nothing left anywhere is swept.
func TestBreak21RevocationNeverSweptBecauseOfUnrelatedLeases(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	// Worker b holds its URI and has written it; the revoked subject never
	// read it.
	const theirs = "file:///b"
	_, err := b.Acquire(ctx, theirs)
	require.NoError(t, err)
	_, ok, err := write(b, theirs, 1)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: a})
	require.NoError(t, err)
	rc, err := e.RevokeSubject("user:gone")
	require.NoError(t, err)
	revoked, err := a.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	require.True(t, len(rc.Elsewhere) == 0 && revoked[0].Swept,
		"a subject that read nothing anywhere is revoked, yet the receipt says %v is left to another worker and the "+
			"revocation is not swept (swept: %v): every engine opened on the ledger sweeps it again for ever",
		rc.Elsewhere, revoked[0].Swept)
}

// ForgetDerived: "Forgetting an unknown artifact is not an error." On a
// fenced ledger it is now, on every URI this worker does not hold: an
// outbox consumer (which runs on any worker) that forgets what it never
// recorded gets ErrNotLeaseholder.
func TestBreak21ForgetUnknownArtifactIsAnErrorOnAnotherWorkersKey(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const theirs = "file:///b"
	_, err := b.Acquire(ctx, theirs)
	require.NoError(t, err)
	_, ok, err := write(b, theirs, 1)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: a})
	require.NoError(t, err)
	require.NoError(t, e.ForgetDerived(theirs, "index", "never-recorded"),
		"forgetting an artifact that was never recorded changes nothing and is not an error")
}
