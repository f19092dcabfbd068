package boltledger

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
)

func openInternal(t *testing.T) *Ledger {
	t.Helper()
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// waitQueued waits, within a deadline, until n writes are queued behind the
// group being committed.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.commits.mu.Lock()
		queued := len(l.commits.queue)
		l.commits.mu.Unlock()
		if queued >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d writes queued", queued, n)
		runtime.Gosched()
	}
}

// Writes made while a group is being committed form the next group, with
// no delay of their own: sixty-four compare-and-swaps of distinct keys
// that arrive during one commit share the one transaction after it, and
// each gets its own result and outbox number.
func TestWritesMadeDuringACommitShareTheNext(t *testing.T) {
	ctx := context.Background()
	l := openInternal(t)
	const writers = 64
	key := func(w int) string { return fmt.Sprintf("file:///group/%02d", w) }
	rec := func(w int, rev uint64) *mcpsync.Record {
		return &mcpsync.Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", key(w), rev)}
	}

	running, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		assert.NoError(t, l.update(ctx, func(*bolt.Tx) error {
			close(running)
			<-release
			return nil
		}))
	})
	<-running
	before := l.commits.count.Load()
	firsts := make([]uint64, writers)
	for w := range writers {
		wg.Go(func() {
			e := mcpsync.OutboxEntry{Schema: mcpsync.SchemaInvalidation, URI: key(w), Reason: mcpsync.InvalidateUpdated, Subject: key(w)}
			first, ok, err := l.CompareAndSwap(ctx, key(w), 0, rec(w, 1), []mcpsync.OutboxEntry{e})
			assert.NoError(t, err)
			assert.True(t, ok)
			firsts[w] = first
		})
	}
	waitQueued(t, l, writers)
	close(release)
	wg.Wait()
	assert.Equal(t, before+2, l.commits.count.Load(), "the commit under way, then one for all %d writes", writers)

	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, writers)
	for w := range writers {
		assert.Equal(t, key(w), entries[firsts[w]-1].Subject, "writer %d is told the number of its own entry", w)
	}
}

// A deferred write is in memory until the key's next durable write, made
// from it, writes the key's state whole in its transaction (the file goes
// from the record it was deferred over to that write's), or a flush
// writes it; a durable write of another key leaves it deferred.
func TestDeferredWriteIsWrittenByTheKeysNextWrite(t *testing.T) {
	ctx := context.Background()
	l := openInternal(t)
	rec := func(key string, rev uint64) *mcpsync.Record {
		return &mcpsync.Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", key, rev)}
	}
	stored := func(key string) uint64 {
		var rev uint64
		require.NoError(t, l.db.View(func(tx *bolt.Tx) error {
			rev = u64(tx.Bucket(bucketRecords).Get([]byte(key)))
			return nil
		}))
		return rev
	}
	deferred := func() int {
		l.cacheMu.RLock()
		defer l.cacheMu.RUnlock()
		return len(l.deferred)
	}
	for _, k := range []string{"file:///a", "file:///b"} {
		_, ok, err := l.CompareAndSwap(ctx, k, 0, rec(k, 1), nil)
		require.NoError(t, err)
		require.True(t, ok)
	}

	before := l.commits.count.Load()
	for rev := uint64(2); rev <= 3; rev++ {
		ok, err := l.CompareAndSwapDeferred(ctx, "file:///a", rev-1, rec("file:///a", rev))
		require.NoError(t, err)
		require.True(t, ok)
	}
	assert.Equal(t, before, l.commits.count.Load(), "a deferred write commits nothing")
	assert.Equal(t, uint64(1), stored("file:///a"), "nor is it in the file")
	got, err := l.Load(ctx, "file:///a")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), got.Revision, "but it is the key's record")

	_, ok, err := l.CompareAndSwap(ctx, "file:///b", 1, rec("file:///b", 2), nil)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, uint64(1), stored("file:///a"), "another key's write leaves it deferred")
	_, ok, err = l.CompareAndSwap(ctx, "file:///a", 2, rec("file:///a", 3), nil)
	require.NoError(t, err)
	assert.False(t, ok, "a write from a revision the deferred one replaced is stale")

	_, ok, err = l.CompareAndSwap(ctx, "file:///a", 3, rec("file:///a", 4), nil)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, before+2, l.commits.count.Load(), "one transaction each")
	assert.Equal(t, uint64(4), stored("file:///a"), "the key's next write stores its state whole")
	assert.Zero(t, deferred(), "and the deferred record is gone")

	ok, err = l.CompareAndSwapDeferred(ctx, "file:///b", 2, rec("file:///b", 3))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, l.flush(ctx))
	assert.Equal(t, uint64(3), stored("file:///b"), "a flush writes it")
	assert.Zero(t, deferred())
}
