package pgledger_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

func break26LongSubject(t *testing.T) string {
	raw := make([]byte, 3000)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return "user:" + base64.RawURLEncoding.EncodeToString(raw) // incompressible, ~4 kB
}

// A long subject (a few kilobytes, as a principal carrying a token or a
// certificate chain may be) no longer fits: each element of
// records.subjects is a key of the GIN index records_subjects, whose
// entries hold at most about 2.7 kB, so the accept of the subject's read,
// which the memory ledger and version 3 of this ledger take, fails on
// every try.
func TestBreak26LongSubject(t *testing.T) {
	subject := break26LongSubject(t)
	const uri = "file:///doc.md"

	m, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: mcpsync.NewMemoryLedger(nil)})
	require.NoError(t, err)
	_, err = m.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	break26Read(t, m, uri, subject, "body")

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: open(t, nil)})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	break26Read(t, e, uri, subject, "body")
	_, err = e.Lookup(subject, uri)
	require.NoError(t, err)
}

// A schema of version 3 holding a record read by such a subject (version 3
// stored it) can never be upgraded: the backfill fails on the index entry,
// the migration rolls back, and every Open of the ledger fails with it.
func TestBreak26LongSubjectUpgrade(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	pool, err := pgxpool.New(ctx, conn)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgledger.MigrateTo(ctx, pool, schema, 3))
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	b, err := mcpsync.EncodeRecord(indexed(1, mcpsync.StateActive, break26LongSubject(t), mcpsync.VersionServed))
	require.NoError(t, err)
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first, "version 3 stores the record")

	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(t, err, "open of a version-3 ledger")
	require.NoError(t, l.Close())
}
