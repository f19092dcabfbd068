package pgledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The upgrade's backfill pages through the records from after = "" with
// key > after, so a record stored under the empty key (a key version 3,
// Range, Load and CompareAndSwap all take) is never read by it: after the
// upgrade the index misses it, although a walk of every record finds it
// under its subject and among the unknown closes.
func TestBreak26EmptyKeyBackfill(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	store := func(key string, r *mcpsync.Record) {
		b, err := mcpsync.EncodeRecord(r)
		require.NoError(t, err)
		var first *int64
		require.NoError(t, pool.QueryRow(ctx, cas3, key, int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
		require.NotNil(t, first, key)
	}
	store("", indexed(1, mcpsync.StateUnsubscribeUnknown, "user:alice", mcpsync.VersionServed))
	store("file:///b", indexed(1, mcpsync.StateUnsubscribeUnknown, "user:alice", mcpsync.VersionServed))

	l := openIn(t, conn, schema, nil)
	var walked []string
	require.NoError(t, l.Range(ctx, func(key string, _ *mcpsync.Record) bool {
		walked = append(walked, key)
		return true
	}))
	require.Equal(t, []string{"", "file:///b"}, walked, "a walk finds both")
	requireIndexed(t, l, "user:alice")
}
