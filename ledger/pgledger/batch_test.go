package pgledger_test

// Batched writes of one ledger: writes handed over in one call share
// statements and commits, each decided on its own, and a write its caller
// abandoned holds up no write of another key.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Writes handed over in one call share commits (CompareAndSwapAll): first
// records, as SubscribeAll opens them, each with an entry, in as few
// transactions as statements of pgledger.MaxBatch writes hold them (the
// rows' xmin names the transaction that inserted them). Each write gets
// its own first entry number; the entries are numbered without a gap.
func TestABatchOfWritesSharesCommits(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	n := 2*pgledger.MaxBatch + 1
	swaps := make([]ledger.Swap, n)
	keys := make([]string, n)
	for i := range swaps {
		keys[i] = fmt.Sprintf("file:///docs/batch/%03d.md", i)
		swaps[i] = ledger.Swap{Key: keys[i], Next: record(keys[i], 1), Entries: []ledger.OutboxEntry{entry(keys[i], 1)}}
	}
	results := l.CompareAndSwapAll(ctx, swaps)
	require.Len(t, results, n)
	for i, r := range results {
		require.NoError(t, r.Err, keys[i])
		require.True(t, r.OK, keys[i])
	}
	var commits int
	require.NoError(t, admin(t, l).QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM "+schemaTable(schema, "records")+
		" WHERE key = ANY($1)", keys).Scan(&commits))
	assert.Equal(t, 3, commits, "%d writes in statements of at most %d", n, pgledger.MaxBatch)
	entries := requireNumbered(t, l, n)
	for i, r := range results {
		assert.Equal(t, keys[i], entries[r.FirstSeq-1].URI, "write %d's entry is numbered %d, as it was told", i, r.FirstSeq)
	}
}

// A write PostgreSQL refuses among others handed over in one call (a key
// beyond what the records index holds) fails alone; the others are
// stored. A call whose context has ended writes nothing.
func TestAWriteRefusedInABatchFailsAlone(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	b := make([]byte, 4096)
	_, err := rand.Read(b)
	require.NoError(t, err)
	long := "file:///" + hex.EncodeToString(b)
	keys := []string{"file:///a", "file:///b", long, "file:///c"}
	swaps := make([]ledger.Swap, len(keys))
	for i, k := range keys {
		swaps[i] = ledger.Swap{Key: k, Next: record(k, 1)}
	}

	gone, cancel := context.WithCancel(ctx)
	cancel()
	for i, r := range l.CompareAndSwapAll(gone, swaps) {
		require.ErrorIs(t, r.Err, context.Canceled, keys[i])
		require.False(t, r.OK)
	}
	got, err := l.Load(ctx, keys[0])
	require.NoError(t, err)
	require.Nil(t, got, "a call given up on before it began writes nothing")

	results := l.CompareAndSwapAll(ctx, swaps)
	for i, r := range results {
		if keys[i] == long {
			assert.Error(t, r.Err, "the long key is refused")
			assert.False(t, r.OK)
			continue
		}
		require.NoError(t, r.Err, keys[i])
		require.True(t, r.OK, keys[i])
		got, err := l.Load(ctx, keys[i])
		require.NoError(t, err)
		require.NotNil(t, got, keys[i])
	}
}

// On a fenced ledger each write of a call needs its own key's lease: a key
// another worker took over since (found by the write's statement) and a
// key never taken are refused with a *LeaseError each, the lease taken over
// is forgotten, and the keys held are stored.
func TestABatchOfWritesIsFencedKeyByKey(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	// A lease of a microsecond has expired by the next statement: a worker
	// that never renews, whose leases nobody took are still its own.
	paused, taker := fenced(t, conn, schema, time.Microsecond), fenced(t, conn, schema, time.Minute)
	const a, b, taken, never = "file:///a", "file:///b", "file:///taken", "file:///never"
	held, err := paused.AcquireAll(ctx, []string{a, b, taken})
	require.NoError(t, err)
	_, err = taker.Acquire(ctx, taken)
	require.NoError(t, err)

	keys := []string{a, taken, never, b}
	swaps := make([]ledger.Swap, len(keys))
	for i, k := range keys {
		swaps[i] = ledger.Swap{Key: k, Next: record(k, 1), Entries: []ledger.OutboxEntry{entry(k, 1)}}
	}
	results := paused.CompareAndSwapAll(ctx, swaps)
	require.Len(t, results, len(keys))
	for _, i := range []int{0, 3} {
		require.NoError(t, results[i].Err, keys[i])
		require.True(t, results[i].OK, keys[i])
	}
	var lerr *pgledger.LeaseError
	require.ErrorAs(t, results[1].Err, &lerr, "the fence refuses a key taken over")
	assert.Equal(t, pgledger.LeaseError{Key: taken, Worker: paused.Worker(), Epoch: held[taken]}, *lerr)
	assert.False(t, results[1].OK)
	require.ErrorIs(t, results[2].Err, pgledger.ErrNotLeaseholder, "no lease, no write")
	assert.False(t, results[2].OK)
	assert.NotContains(t, paused.Owned(), taken, "a refused write forgets the lease")
	for _, k := range []string{taken, never} {
		got, err := taker.Load(ctx, k)
		require.NoError(t, err)
		assert.Nil(t, got, "%s: nothing written", k)
	}
	requireNumbered(t, taker, 2)
}

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
