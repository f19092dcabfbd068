package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A record written straight to the ledger with a subject that is not
// UTF-8 (version 3 stored it: its JSON holds U+FFFD there, and the bolt
// ledger files it under that stored form) is refused: entryOf hands the
// raw bytes to records.subjects, which PostgreSQL rejects, so the write
// fails on every try instead of being filed under the subject its record
// is read back with.
func TestBreak26UTF8Subject(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	const doc, stored = "file:///docs/a.md", "\uFFFDbob"
	rec := &mcpsync.Record{Revision: 1, Current: &mcpsync.StoredVersion{
		Version: mcpsync.ResourceVersion{URI: doc, Subject: "\xffbob"}, Status: mcpsync.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, doc, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	require.Equal(t, []string{stored}, r.Subjects(), "the record as stored")
	keys, err := l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	require.Equal(t, []string{doc}, keys)
}
