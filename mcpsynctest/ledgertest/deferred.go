package ledgertest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
)

// testDeferred holds a ledger that defers writes (ledger.Deferring)
// to its contract: a deferred write is the key's record for every call made
// after it, compared and replaced like any other, seen by Range, Export
// and the index, refused when stale, and durable once the key's next write
// is, or the ledger was closed.
func testDeferred(t *testing.T, open Opener, reopen Reopener) {
	l := open(t, nil)
	d, ok := l.(ledger.Deferring)
	if !ok {
		t.Skip("the ledger defers no write")
	}
	const a, b = "file:///deferred/a", "file:///deferred/b"
	write(t, l, a, 1, 1)
	ok, err := d.CompareAndSwapDeferred(ctx, a, 1, record(a, 2))
	require.NoError(t, err)
	require.True(t, ok)
	got, err := l.Load(ctx, a)
	require.NoError(t, err)
	assertSameRecord(t, record(a, 2), got)

	ok, err = d.CompareAndSwapDeferred(ctx, a, 1, record(a, 2))
	require.NoError(t, err)
	assert.False(t, ok, "a stale deferred write writes nothing")
	_, ok, err = l.CompareAndSwap(ctx, a, 1, record(a, 2), nil)
	require.NoError(t, err)
	assert.False(t, ok, "nor does a write of the revision a deferred write replaced")
	ok, err = d.CompareAndSwapDeferred(ctx, b, 0, record(b, 1))
	require.NoError(t, err)
	assert.True(t, ok, "a new key may be written deferred too")

	var seen []uint64
	require.NoError(t, l.Range(ctx, func(_ string, r *ledger.Record) bool {
		seen = append(seen, r.Revision)
		return true
	}))
	assert.Equal(t, []uint64{2, 1}, seen, "Range sees deferred writes")
	snap, err := l.Export(ctx)
	require.NoError(t, err)
	require.Contains(t, snap.Records, a)
	assert.Equal(t, uint64(2), snap.Records[a].Revision, "Export sees deferred writes")
	if x, ok := l.(ledger.Index); ok {
		keys, err := x.SubjectKeys(ctx, "user:alice")
		require.NoError(t, err)
		assert.Equal(t, []string{a, b}, keys, "the index files deferred writes")
	}

	seq := write(t, l, a, 3, 1)
	assert.Equal(t, uint64(2), seq, "a write over a deferred one appends after it")
	ok, err = d.CompareAndSwapDeferred(ctx, a, 3, record(a, 4))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = d.CompareAndSwapDeferred(ctx, b, 1, record(b, 2))
	require.NoError(t, err)
	require.True(t, ok)
	write(t, l, b, 3, 1)
	if reopen == nil {
		return
	}
	l = reopen(t, l)
	got, err = l.Load(ctx, a)
	require.NoError(t, err)
	assertSameRecord(t, record(a, 4), got)
	got, err = l.Load(ctx, b)
	require.NoError(t, err)
	assertSameRecord(t, record(b, 3), got)
}
