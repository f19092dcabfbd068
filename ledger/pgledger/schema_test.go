package pgledger_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Workers opening a new schema at once: each migration is applied once, and
// every one of them gets a working ledger.
func TestOpenMigratesOnce(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	const n = 4
	ls := make([]*pgledger.Ledger, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ls[i], errs[i] = pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema}) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		defer ls[i].Close()
	}
	var versions, latest int
	require.NoError(t, ls[0].Pool().QueryRow(ctx, "SELECT count(*), max(version) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&versions, &latest))
	assert.Equal(t, pgledger.SchemaVersion(), latest)
	assert.Equal(t, latest, versions, "each version applied once")
	for i, l := range ls {
		_, ok, err := l.CompareAndSwap(ctx, "file:///a", uint64(i), record("file:///a", uint64(i+1)), nil)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// A schema migrated by a newer release is refused, not misread.
func TestOpenRefusesNewerSchema(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	_, err := l.Pool().Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+" (version, name) VALUES ($1, 'from the future')", pgledger.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.ErrorIs(t, err, mcpsync.ErrLedgerSchema)
}

func TestOpenRefusesSchemaName(t *testing.T) {
	conn := pgtest.ConnString(t)
	for _, name := range []string{"Upper", "with space", `quo"te`, "1digit"} {
		_, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: name})
		assert.Error(t, err, name)
	}
}

// A closed ledger refuses every call, and a waiter returns.
func TestClosed(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(t, err)
	woke := make(chan error, 1)
	go func() { woke <- l.WaitOutbox(ctx, 0) }()
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "idempotent")
	require.ErrorIs(t, <-woke, mcpsync.ErrLedgerClosed)
	_, err = l.Load(ctx, "file:///a")
	require.ErrorIs(t, err, mcpsync.ErrLedgerClosed)
	_, _, err = l.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), nil)
	require.ErrorIs(t, err, mcpsync.ErrLedgerClosed)
}
