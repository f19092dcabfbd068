package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A pool whose connections are made by a BeforeConnect hook (rotating
// credentials, IAM tokens, a proxy address chosen at connect time) works
// for every query, but WaitOutbox listens on a connection made from the
// pool's bare ConnConfig, without the hook: that connection never comes
// up, and WaitOutbox never reads the outbox either, so a consumer sleeps
// until its deadline although the entry it waits for was appended before
// the wait began.
func TestBreak20WaitOutboxSleepsOnEntriesThatExistWhenListeningFails(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(conn)
	require.NoError(t, err)
	realPort := cfg.ConnConfig.Port
	cfg.ConnConfig.Port = 1 // the hook knows where the server is
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Port = realPort
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	l, err := pgledger.New(ctx, pool, &pgledger.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	_, ok, err := l.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), []mcpsync.OutboxEntry{entry("file:///a", 1)})
	require.NoError(t, err)
	require.True(t, ok)

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, l.WaitOutbox(wctx, 0), "entry 1 was appended before the wait: WaitOutbox must return at once (or fail), not sleep")
}
