package pgledger_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

func break26LongSubject(t *testing.T) string {
	raw := make([]byte, 3000)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return "user:" + base64.RawURLEncoding.EncodeToString(raw) // incompressible, ~4 kB
}

// A long subject (a few kilobytes, as a principal carrying a token or a
// certificate chain may be) does not fit a GIN entry (about 2.7 kB). The
// engine refuses it for a read (MaxSubjectBytes), and a record holding one
// written straight to the ledger is still stored and filed under it.
func TestBreak26LongSubject(t *testing.T) {
	break26IndexedUnder(t, break26LongSubject(t))
}

// break26IndexedUnder checks that the engine refuses subject for a read,
// and that a record read by it, written straight to the ledger, is stored
// and found by SubjectKeys.
func break26IndexedUnder(t *testing.T, subject string) {
	t.Helper()
	const uri = "file:///doc.md"
	l := open(t, nil)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.Subscribe(uri, subject)
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject, "a subject some ledger could not revoke")

	rec := &mcpsync.Record{Revision: 1, Current: &mcpsync.StoredVersion{
		Version: mcpsync.ResourceVersion{URI: uri, Subject: subject}, Status: mcpsync.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	keys, err := l.(mcpsync.LedgerIndex).SubjectKeys(ctx, subject)
	require.NoError(t, err)
	require.Equal(t, []string{uri}, keys)
}

// A schema of version 3 holding a record read by such a subject (version 3
// stored it) can never be upgraded: the backfill fails on the index entry,
// the migration rolls back, and every Open of the ledger fails with it.
func TestBreak26LongSubjectUpgrade(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
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
