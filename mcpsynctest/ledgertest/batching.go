package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
)

// testBatching holds a ledger that takes many writes in one call
// (ledger.Batching) to its contract: each write is decided as its own
// CompareAndSwap would decide it, and only it (a stale one, a key written
// twice or a revision that does not follow is refused alone), its result
// where the write was in the call, its entries numbered together after
// every entry appended before, and every write that returned OK is the
// key's record for every later call, and after a reopen. LoadAll reads
// what Load reads: a record (or nil) for each key asked, in order.
func testBatching(t *testing.T, open Opener, reopen Reopener) {
	l := open(t, nil)
	b, ok := l.(ledger.Batching)
	if !ok {
		t.Skip("the ledger takes no batch of writes")
	}
	const a, c, d, stale = "file:///batch/a", "file:///batch/c", "file:///batch/d", "file:///batch/stale"
	write(t, l, stale, 1, 1)
	wctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	woke := make(chan error, 1)
	go func() { woke <- l.WaitOutbox(wctx, 1) }()
	results := b.CompareAndSwapAll(ctx, []ledger.Swap{
		{Key: c, Next: record(c, 1), Entries: []ledger.OutboxEntry{entry(c, 1)}},
		{Key: stale, Next: record(stale, 1)},
		{Key: a, Next: record(a, 1), Entries: []ledger.OutboxEntry{entry(a, 1), entry(a, 1)}},
		{Key: c, Prev: 1, Next: record(c, 2)},
		{Key: d, Next: record(d, 2)},
		{Key: d, Prev: 3, Next: record(d, 4)},
	})
	require.Len(t, results, 6)
	for i, want := range []bool{true, false, true, false, false, false} {
		assert.Equal(t, want, results[i].OK, "write %d", i)
	}
	require.NoError(t, results[0].Err)
	require.NoError(t, results[2].Err)
	assert.NoError(t, results[1].Err, "a stale write is refused, not failed")
	assert.Zero(t, results[1].FirstSeq)
	assert.Error(t, results[3].Err, "a key written twice in one call")
	assert.Error(t, results[4].Err, "a revision that does not follow the one it replaces")

	all, err := l.Outbox(ctx, 1, 0)
	require.NoError(t, err)
	require.Len(t, all, 3, "the writes' entries are numbered after the one appended before")
	assert.Equal(t, uint64(4), all[2].Seq)
	for _, w := range []struct {
		key string
		res ledger.SwapResult
		n   int
	}{{c, results[0], 1}, {a, results[2], 2}} {
		entries, err := l.Outbox(ctx, w.res.FirstSeq-1, w.n)
		require.NoError(t, err)
		require.Len(t, entries, w.n)
		for _, e := range entries {
			assert.Equal(t, w.key, e.URI, "entry %d is %s's, as its write was told", e.Seq, w.key)
		}
	}
	want := map[string]uint64{a: 1, c: 1, stale: 1}
	check := func(l ledger.Ledger, when string) {
		t.Helper()
		for key, rev := range want {
			got, err := l.Load(ctx, key)
			require.NoError(t, err)
			require.NotNil(t, got, "%s: %s", when, key)
			assertSameRecord(t, record(key, rev), got)
		}
		got, err := l.Load(ctx, d)
		require.NoError(t, err)
		assert.Nil(t, got, "%s: a refused write stores nothing", when)
	}
	check(l, "after the call")
	select {
	case err := <-woke:
		require.NoError(t, err, "the batch's entries woke the waiter")
	case <-wctx.Done():
		t.Fatal("WaitOutbox did not wake on the entries of a batch")
	}
	if x, ok := l.(ledger.Index); ok {
		keys, err := x.SubjectKeys(ctx, "user:alice")
		require.NoError(t, err)
		assert.Equal(t, []string{a, c, stale}, keys, "the index holds the records a batch wrote, and none it refused")
	}
	write(t, l, c, 2, 0) // from the record the call stored
	want[c] = 2
	loadAll := func(l ledger.Ledger, when string) {
		t.Helper()
		keys := []string{c, d, a, stale, a}
		got, err := l.(ledger.Batching).LoadAll(ctx, keys)
		require.NoError(t, err)
		require.Len(t, got, len(keys), "%s: one record a key asked, in order", when)
		for i, key := range keys {
			if key == d {
				assert.Nil(t, got[i], "%s: no record of a key never written", when)
				continue
			}
			require.NotNil(t, got[i], "%s: %s", when, key)
			assertSameRecord(t, record(key, want[key]), got[i])
		}
	}
	loadAll(l, "after the call")
	if reopen != nil {
		l = reopen(t, l)
		check(l, "after a reopen")
		loadAll(l, "after a reopen")
	}
}
