package pgledger_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// break26WaitBlocked waits (waitForBackend) for a backend that pid blocks,
// and returns its pid.
func break26WaitBlocked(t *testing.T, watch *pgx.Conn, pid uint32) uint32 {
	t.Helper()
	return uint32(waitForBackend(t, watch,
		`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)) LIMIT 1`, int32(pid)))
}

// A worker of the earlier release whose compare_and_swap is already
// running when the upgrade to version 4 starts is not refused: the call
// resolved version 3's function before the upgrade dropped it, waits for
// the upgrade's lock of records, and then writes the record the old way,
// leaving the subjects the backfill filed for the previous record. The
// index then misses the record under its new subject (and keeps it under
// the old one), so a revocation of the new subject sweeps nothing and
// keeps serving it.
func TestBreak26UpgradeRacesOldWriter(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)

	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	cas3 := "SELECT " + table("compare_and_swap") + "($1, $2, $3, $4, $5, $6, $7, $8)"
	encode := func(r *mcpsync.Record) []byte {
		b, err := mcpsync.EncodeRecord(r)
		require.NoError(t, err)
		return b
	}
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0),
		encode(indexed(1, mcpsync.StateActive, "user:alice", mcpsync.VersionServed)), [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first)

	// Hold the upgrade half way: after it took records, before it drops
	// the old functions.
	blocker, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer blocker.Close(context.Background())
	watch, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer watch.Close(context.Background())
	btx, err := blocker.Begin(ctx)
	require.NoError(t, err)
	_, err = btx.Exec(ctx, "SELECT generation FROM "+table("revocation_meta")+" FOR UPDATE")
	require.NoError(t, err)

	upgraded := make(chan error, 1)
	go func() { upgraded <- pgledger.MigrateTo(ctx, pool, schema, 4) }()
	migrator := break26WaitBlocked(t, watch, blocker.PgConn().PID())

	// The earlier release's write of the record, now filed under erin.
	wrote := make(chan error, 1)
	go func() {
		var first *int64
		err := pool.QueryRow(ctx, cas3, "file:///a", int64(1),
			encode(indexed(2, mcpsync.StateActive, "user:erin", mcpsync.VersionServed)), [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first)
		if err == nil && first == nil {
			err = errNotStored
		}
		wrote <- err
	}()
	break26WaitBlocked(t, watch, migrator)
	require.NoError(t, btx.Commit(ctx))
	require.NoError(t, <-upgraded)
	werr := <-wrote

	l := openIn(t, conn, schema, nil)
	r, err := l.Load(ctx, "file:///a")
	require.NoError(t, err)
	if werr != nil {
		// Refused: then the record must be the one the backfill filed.
		require.Equal(t, []string{"user:alice"}, r.Subjects())
	} else {
		require.Equal(t, []string{"user:erin"}, r.Subjects(), "the earlier release's write was stored")
	}
	for _, s := range []string{"user:erin", "user:alice"} {
		want := []string(nil)
		if contains(r.Subjects(), s) {
			want = []string{"file:///a"}
		}
		keys, err := l.SubjectKeys(ctx, s)
		require.NoError(t, err)
		require.Equal(t, want, keys, "SubjectKeys(%q) after an earlier release's write (error %v) raced the upgrade", s, werr)
	}
}

var errNotStored = errorString("not stored")

type errorString string

func (e errorString) Error() string { return string(e) }

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
