package pgledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest/ledgertest"
)

var ctx = context.Background()

// openIn opens a ledger on schema, closed when t ends.
func openIn(t testing.TB, conn, schema string, opts *ledger.Options) *pgledger.Ledger {
	t.Helper()
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Ledger: opts})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// open is the suite's Opener: a ledger in a schema of its own.
func open(t *testing.T, opts *ledger.Options) ledger.Ledger {
	t.Helper()
	conn, schema := pgtest.Schema(t)
	return openIn(t, conn, schema, opts)
}

func reopen(t *testing.T, l ledger.Ledger) ledger.Ledger {
	t.Helper()
	pl := l.(*pgledger.Ledger)
	conn := pl.Pool().Config().ConnString()
	require.NoError(t, pl.Close())
	return openIn(t, conn, pl.Schema(), nil)
}

func TestConformance(t *testing.T) {
	pgtest.ConnString(t)
	ledgertest.RunDurable(t, open, reopen)
}

// The suite and the tests below start goroutines (listeners, waiters,
// concurrent writers): none outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
