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

// A deferred write is in memory until the next commit, which writes it in
// its own transaction before the writes of its group: never on disk after
// a durable write made after it returned.
func TestDeferredWriteRidesWithTheNextCommit(t *testing.T) {
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
	_, ok, err := l.CompareAndSwap(ctx, "file:///a", 0, rec("file:///a", 1), nil)
	require.NoError(t, err)
	require.True(t, ok)

	before := l.commits.count.Load()
	ok, err = l.CompareAndSwapDeferred(ctx, "file:///a", 1, rec("file:///a", 2))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, before, l.commits.count.Load(), "a deferred write commits nothing")
	assert.Equal(t, uint64(1), stored("file:///a"), "nor is it in the file")
	got, err := l.Load(ctx, "file:///a")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), got.Revision, "but it is the key's record")

	_, ok, err = l.CompareAndSwap(ctx, "file:///b", 0, rec("file:///b", 1), nil)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, before+1, l.commits.count.Load(), "one transaction")
	assert.Equal(t, uint64(2), stored("file:///a"), "carried the deferred write with the next one")
	l.cacheMu.RLock()
	assert.Empty(t, l.deferred, "which is no longer deferred")
	l.cacheMu.RUnlock()
}
