package pgledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Two callers of one ledger write at once: one a key PostgreSQL refuses
// (a long URI, its key beyond what the records index holds: "index row
// size exceeds btree maximum"), the other an ordinary key. Alone, each
// gets its own answer: the long key an error, the ordinary one stored.
// Queued together while earlier writes are in flight, they share one
// compare_and_swap_all statement, and the error of one key fails the
// whole statement: the ordinary write is not stored and its caller gets
// the other caller's error. What a user sees: CompareAndSwap of
// file:///ok fails with "index row size ... exceeds btree version 4
// maximum" for a key it never wrote; results cross between calls.
//
// Deterministic: the two senders are held inside statements that wait on
// rows the test locks, the two calls are seen queued, and one sender is
// let go, which takes both in one statement.
func TestBreak23OneBadKeyFailsEveryWriteBatchedWithIt(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	ctx := context.Background()
	l, err := Open(ctx, conn, &Options{Schema: schema})
	require.NoError(t, err)
	defer l.Close()
	rec := func(rev uint64) *mcpsync.Record {
		return &mcpsync.Record{Revision: rev, State: mcpsync.StateActive}
	}
	b := make([]byte, 4096)
	_, err = rand.Read(b)
	require.NoError(t, err)
	long := "file:///" + hex.EncodeToString(b)
	const ok = "file:///ok"

	// Alone, the long key fails on its own.
	_, _, err = l.CompareAndSwap(ctx, long, 0, rec(1), nil)
	require.Error(t, err, "the long key is refused by PostgreSQL")

	// Hold both senders in statements waiting on rows the test locks.
	holders := []string{"file:///x1", "file:///x2"}
	var txs []pgx.Tx
	for _, k := range holders {
		_, stored, err := l.CompareAndSwap(ctx, k, 0, rec(1), nil)
		require.NoError(t, err)
		require.True(t, stored)
		c, err := pgx.Connect(ctx, conn)
		require.NoError(t, err)
		defer c.Close(context.Background())
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(context.Background())
		_, err = tx.Exec(ctx, "SELECT FROM "+pgx.Identifier{schema, "records"}.Sanitize()+" WHERE key = $1 FOR UPDATE", k)
		require.NoError(t, err)
		txs = append(txs, tx)
	}
	watcher, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer watcher.Close(context.Background())
	held := make(chan error, len(holders))
	for i, k := range holders {
		go func() { _, _, err := l.CompareAndSwap(ctx, k, 1, rec(2), nil); held <- err }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var c int
			require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%compare_and_swap%'`).Scan(&c))
			if c > i {
				break
			}
			require.True(t, time.Now().Before(deadline), "sender %d never waited", i)
			runtime.Gosched()
		}
	}

	type result struct {
		stored bool
		err    error
	}
	okDone, longDone := make(chan result, 1), make(chan result, 1)
	go func() { _, s, err := l.CompareAndSwap(ctx, ok, 0, rec(1), nil); okDone <- result{s, err} }()
	go func() { _, s, err := l.CompareAndSwap(ctx, long, 0, rec(1), nil); longDone <- result{s, err} }()
	deadline := time.Now().Add(10 * time.Second)
	for len(l.swaps.calls) < 2 {
		require.True(t, time.Now().Before(deadline), "the two writes never queued")
		runtime.Gosched()
	}
	require.NoError(t, txs[0].Rollback(ctx)) // one sender finishes, and takes both queued writes
	got := <-okDone
	long_ := <-longDone
	require.NoError(t, txs[1].Rollback(ctx))
	for range holders {
		require.NoError(t, <-held)
	}
	require.Error(t, long_.err, "the long key fails")
	require.NoError(t, got.err, "the write of %s is its own: another caller's bad key must not fail it", ok)
	require.True(t, got.stored)
}
