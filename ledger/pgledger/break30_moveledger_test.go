package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// README: "Ledgers move between kinds with ExportLedger and RestoreLedger
// (memory ↔ bolt ↔ PostgreSQL)". Before the change RevokeSubject refused a
// subject holding NUL, so every ledger this release wrote could move to
// PostgreSQL. Now RevokeSubject takes it on the memory ledger (nothing was
// ever read by it: one call of a caller's admin tool), and from then on the
// ledger can never move to PostgreSQL: its snapshot is refused whole.
func TestBreak30MoveLedger(t *testing.T) {
	src := mcpsync.NewMemoryLedger(nil)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: src})
	require.NoError(t, err)
	_, err = e.RevokeSubject("user:\x00mallory")
	require.NoError(t, err, "this release revokes the subject on the memory ledger")

	snap, err := mcpsync.ExportLedger(ctx, src)
	require.NoError(t, err)
	err = mcpsync.RestoreLedger(ctx, open(t, nil), snap)
	require.NoError(t, err, "a memory ledger this release wrote no longer moves to PostgreSQL")
}
