package pgledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// A subject holding a NUL character cannot be stored as PostgreSQL text.
// The engine refuses it for a read, and a record holding one written
// straight to the ledger (as version 3 stored it, the record being bytea)
// is still stored and filed under it: the index holds digests.
func TestBreak26NulSubject(t *testing.T) {
	break26IndexedUnder(t, "user:\x00alice")
}

// A schema of version 3 holding a record read by such a subject (which
// version 3 stored) can never be upgraded: the backfill's UPDATE of
// records.subjects fails, the migration rolls back, and every Open of the
// ledger fails with it.
func TestBreak26NulSubjectUpgrade(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	b, err := mcpsync.EncodeRecord(indexed(1, mcpsync.StateActive, "user:\x00alice", mcpsync.VersionServed))
	require.NoError(t, err)
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first, "version 3 stores the record")

	for try := range 2 {
		l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
		require.NoError(t, err, "open %d of a version-3 ledger", try)
		require.NoError(t, l.Close())
	}
}
