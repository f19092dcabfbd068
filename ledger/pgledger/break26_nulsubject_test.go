package pgledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A subject the engine takes (non-empty UTF-8) holding a NUL character
// cannot be filed in records.subjects (PostgreSQL text holds no NUL): the
// read of that subject, which the memory ledger and version 3 of this
// ledger (the record is bytea) accept, now fails on every try, so the URI
// never gets its content.
func TestBreak26NulSubject(t *testing.T) {
	const uri, subject = "file:///doc.md", "user:\x00alice"
	// The engine takes the subject on the memory ledger.
	m, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: mcpsync.NewMemoryLedger(nil)})
	require.NoError(t, err)
	_, err = m.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	break26Read(t, m, uri, subject, "body")

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: open(t, nil)})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, mcpsync.ModePush)
	require.NoError(t, err)
	for try := range 3 {
		tk, err := e.IssueTicket(uri, mcpsync.TriggerInitial)
		require.NoError(t, err)
		out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: "body"}}))
		require.NoError(t, err, "try %d", try)
		require.True(t, out.Accepted)
	}
}

// A schema of version 3 holding a record read by such a subject (which
// version 3 stored) can never be upgraded: the backfill's UPDATE of
// records.subjects fails, the migration rolls back, and every Open of the
// ledger fails with it.
func TestBreak26NulSubjectUpgrade(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	pool, err := pgxpool.New(ctx, conn)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgledger.MigrateTo(ctx, pool, schema, 3))
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
