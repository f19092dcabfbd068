package boltledger_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// A subject that is not valid UTF-8 is stored, in the record's JSON, as the
// replacement character. The engine refuses such a subject, so that no
// version names a subject other than the one it was read by; a record
// written with one straight to the ledger is indexed under what its JSON
// stores, so a revocation after a restart still finds it.
func TestBreak25UTF8Subject(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc = "file:///docs/a.md"
	_, err = e.Subscribe(doc, "\xffbob")
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject, "a subject no durable ledger keeps as given")
	_, err = e.RevokeSubject("\xffbob")
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)

	// Straight to the ledger: filed under the stored form, before and
	// after a restart.
	const stored = "\uFFFDbob"
	rec := &mcpsync.Record{Revision: 1, Current: &mcpsync.StoredVersion{
		Version: mcpsync.ResourceVersion{URI: doc, Subject: "\xffbob"}, Status: mcpsync.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, doc, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	keys, err := l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	assert.Equal(t, []string{doc}, keys, "before a restart")
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	require.Equal(t, []string{stored}, r.Subjects(), "the record as stored")
	keys, err = l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	assert.Equal(t, []string{doc}, keys, "SubjectKeys(%q) must hold every key whose Record.Subjects holds it", stored)

	n, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	rc, err := n.RevokeSubject(stored)
	require.NoError(t, err)
	assert.Len(t, rc.Versions, 1, "the version the stored record says %q read", stored)
	r, err = l.Load(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.VersionRevoked, r.Current.Status)
}
