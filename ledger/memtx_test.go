package ledger

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/internal/inplace"
)

func store(l Ledger) (inplace.Store[Record, OutboxEntry, StoredVersion], bool) {
	return inplace.Get[Record, OutboxEntry, StoredVersion](l)
}

// The engine writes in place on the memory ledger only: any other Ledger,
// a wrapper of a memory ledger included, is written by compare-and-swap.
func TestInPlaceStoreIsTheMemoryLedgersOnly(t *testing.T) {
	s, ok := store(NewMemory(nil))
	require.True(t, ok)
	require.NotNil(t, s)
	type wrapper struct{ Ledger }
	_, ok = store(wrapper{NewMemory(nil)})
	require.False(t, ok, "a wrapper's writes must reach what it wraps through its own methods")
}

// A commit always lets the ledger's lock go, also one the write refuses
// (no record prepared): the engine calls nothing after it.
func TestCommitAlwaysLetsTheLockGo(t *testing.T) {
	l := NewMemory(nil)
	s, _ := store(l)
	require.Nil(t, s.Lock("file:///a"))
	_, err := s.Commit("e")
	require.Error(t, err, "a write of no record")
	require.True(t, s.Mutex().TryLock(), "the lock was let go")
	s.Mutex().Unlock()
	rec, err := l.Load(t.Context(), "file:///a")
	require.NoError(t, err)
	require.Nil(t, rec, "nothing was written")
}

// A write in place is seen by Load once committed, as an immutable copy
// that a later write in place leaves alone.
func TestCommittedWriteInPlaceIsLoadedAsACopy(t *testing.T) {
	ctx := t.Context()
	l := NewMemory(nil)
	const key = "file:///a"
	_, ok, err := l.CompareAndSwap(ctx, key, 0, &Record{Revision: 1, State: StateActive}, nil)
	require.NoError(t, err)
	require.True(t, ok)
	s, _ := store(l)
	write := func(digest string) {
		cur := s.Lock(key)
		require.NotNil(t, cur)
		next := s.Prepare()
		next.LastAcceptedDigest = digest
		*s.Entries() = append(*s.Entries(), OutboxEntry{Schema: SchemaInvalidation, URI: key, Reason: InvalidateUpdated})
		first, err := s.Commit("engine-1")
		require.NoError(t, err)
		require.NotZero(t, first)
	}
	write("d1")
	held, err := l.Load(ctx, key)
	require.NoError(t, err)
	require.Equal(t, uint64(2), held.Revision)
	require.Equal(t, "d1", held.LastAcceptedDigest)
	write("d2")
	require.Equal(t, "d1", held.LastAcceptedDigest, "a record handed out never changes")
	now, err := l.Load(ctx, key)
	require.NoError(t, err)
	require.Equal(t, uint64(3), now.Revision)
	require.Equal(t, "d2", now.LastAcceptedDigest)
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, "engine-1", entries[1].Engine)
}
