package pgledger_test

// Batched writes of one ledger: a write its caller abandoned holds up no
// write of another key.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A worker's writes of key a wait on a's lease row, which another
// transaction holds (another worker's AcquireAll or ReleaseAll in
// progress, stuck behind a lost network, say). Their callers give up: their
// contexts end and CompareAndSwap returns. The statements they abandoned do
// not hold every sender of the ledger: a write of b, a key this worker
// holds and nobody else touches, still reaches the database.
func TestAbandonedWritesStallNoOtherKey(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	const a, b = "file:///a", "file:///b"
	_, err := w.AcquireAll(ctx, []string{a, b})
	require.NoError(t, err)

	holder, watcher := admin(t, w), admin(t, w)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT FROM "+schemaTable(schema, "leases")+" WHERE key = $1 FOR UPDATE", a)
	require.NoError(t, err)

	// Two writes of a, each given up on once it waits in the database.
	for i := range 2 {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, _, err := w.CompareAndSwap(wctx, a, 0, record(a, 1), []ledger.OutboxEntry{entry(a, 1)})
			done <- err
		}()
		waitLockWaiters(t, watcher, schema, "compare_and_swap", i+1)
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("a write whose context ended did not return")
		}
	}

	// A write of b, which nothing else holds, with ample time.
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, stored, err := w.CompareAndSwap(bctx, b, 0, record(b, 1), []ledger.OutboxEntry{entry(b, 1)})
	require.NoError(t, err, "a write of b, a key this worker holds and nobody contends, must not wait on writes of a whose callers left")
	require.True(t, stored)
}
