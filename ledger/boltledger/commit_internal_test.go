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

	"github.com/mcpsync/mcpsync/ledger"
)

func openInternal(t *testing.T) *Ledger {
	t.Helper()
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// holdCommitter has the committer run a write that waits until release is
// closed, and returns once it runs: writes made meanwhile form the next
// group. wg counts the write.
func holdCommitter(t *testing.T, l *Ledger, wg *sync.WaitGroup) (release chan struct{}) {
	t.Helper()
	running, release := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		assert.NoError(t, l.update(context.Background(), func(*bolt.Tx) error {
			close(running)
			<-release
			return nil
		}))
	})
	<-running
	return release
}

// k is the key of openWithOneRecord's record; rec(n) a record of it at
// revision n.
const k = "file:///a"

func rec(rev uint64) *ledger.Record { return &ledger.Record{Revision: rev} }

// openWithOneRecord opens a ledger that holds k at revision 1, durably.
func openWithOneRecord(t *testing.T) *Ledger {
	t.Helper()
	l := openInternal(t)
	_, ok, err := l.CompareAndSwap(context.Background(), k, 0, rec(1), nil)
	require.NoError(t, err)
	require.True(t, ok)
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
	rec := func(w int, rev uint64) *ledger.Record {
		return &ledger.Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", key(w), rev)}
	}

	var wg sync.WaitGroup
	release := holdCommitter(t, l, &wg)
	before := l.commits.count.Load()
	firsts := make([]uint64, writers)
	for w := range writers {
		wg.Go(func() {
			e := ledger.OutboxEntry{Schema: ledger.SchemaInvalidation, URI: key(w), Reason: ledger.InvalidateUpdated, Subject: key(w)}
			first, ok, err := l.CompareAndSwap(ctx, key(w), 0, rec(w, 1), []ledger.OutboxEntry{e})
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
	rec := func(key string, rev uint64) *ledger.Record {
		return &ledger.Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", key, rev)}
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

// What a crash would leave - the file at any instant - holds, for every
// key, a record at least as new as the key's newest outbox entry, while
// writers mix deferred writes, durable writes with entries and flushes
// (Range) on shared keys; and a write made from the key's record as Load
// gives it is refused only when another writer got there first.
func TestTheFileIsNeverBehindItsEntries(t *testing.T) {
	ctx := context.Background()
	l := openInternal(t)
	keys := []string{"file:///a", "file:///b", "file:///c"}
	rec := func(key string, rev uint64) *ledger.Record {
		return &ledger.Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", key, rev)}
	}
	check := func() {
		require.NoError(t, l.db.View(func(tx *bolt.Tx) error {
			newest := map[string]uint64{}
			if err := tx.Bucket(bucketOutbox).ForEach(func(_, v []byte) error {
				e, err := decodeEntry(v)
				newest[e.URI] = max(newest[e.URI], e.Version.ReadOrdinal)
				return err
			}); err != nil {
				return err
			}
			for k, rev := range newest {
				stored := u64(tx.Bucket(bucketRecords).Get([]byte(k)))
				require.GreaterOrEqual(t, stored, rev, "%s: the file's record is behind its entry of revision %d", k, rev)
			}
			return nil
		}))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			refused := 0
			for i := range 150 {
				k := keys[(w+i)%len(keys)]
				cur, err := l.Load(ctx, k)
				if !assert.NoError(t, err) {
					return
				}
				var prev uint64
				if cur != nil {
					prev = cur.Revision
				}
				next := rec(k, prev+1)
				var ok bool
				if prev > 0 && i%2 == 0 {
					ok, err = l.CompareAndSwapDeferred(ctx, k, prev, next)
				} else {
					e := ledger.OutboxEntry{Schema: ledger.SchemaInvalidation, URI: k, Reason: ledger.InvalidateUpdated,
						Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, URI: k, ReadOrdinal: prev + 1}}
					_, ok, err = l.CompareAndSwap(ctx, k, prev, next, []ledger.OutboxEntry{e})
				}
				if !assert.NoError(t, err) {
					return
				}
				if ok {
					refused = 0
				} else if refused++; refused == 100 {
					assert.Fail(t, "a write refused for good", "%s: refused 100 times in a row", k)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			assert.NoError(t, l.Range(ctx, func(string, *ledger.Record) bool { return true }))
		}
	})
	go func() {
		defer close(done)
		for range 200 {
			check()
		}
	}()
	<-done
	wg.Wait()
	check()
}

// A flush writes the deferred record it found when its group began; a key
// deferred again while that group commits keeps its newer deferred record,
// and the write made from that one is stored over what the flush wrote (an
// earlier state of the same record), not refused as if another writer had
// won.
func TestAWriteOverAnEarlierDeferredRecordAFlushWroteIsStored(t *testing.T) {
	ctx := context.Background()
	l := openWithOneRecord(t)
	var ok bool
	var err error

	block := func(running, release chan struct{}) func(*bolt.Tx) error {
		return func(*bolt.Tx) error {
			close(running)
			<-release
			return nil
		}
	}
	running1, release1 := make(chan struct{}), make(chan struct{})
	running2, release2 := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, l.update(ctx, block(running1, release1))) })
	<-running1
	ok, err = l.CompareAndSwapDeferred(ctx, k, 1, rec(2))
	require.NoError(t, err)
	require.True(t, ok)
	// The next group: a write that holds it open, and a flush, which
	// finds the deferred record of revision 2.
	wg.Go(func() { assert.NoError(t, l.update(ctx, block(running2, release2))) })
	waitQueued(t, l, 1)
	wg.Go(func() { assert.NoError(t, l.flush(ctx)) })
	waitQueued(t, l, 2)
	close(release1)
	<-running2
	ok, err = l.CompareAndSwapDeferred(ctx, k, 2, rec(3))
	require.NoError(t, err)
	require.True(t, ok)
	close(release2)
	wg.Wait()

	_, ok, err = l.CompareAndSwap(ctx, k, 3, rec(4), nil)
	require.NoError(t, err)
	assert.True(t, ok, "the write made from the newest deferred record is stored")
	got, err := l.Load(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), got.Revision)
}

// A commit is visible in the file before the committer forgets the
// deferred record it superseded: a write made meanwhile from the record
// that superseded it (as Load gives it then) is stored, not refused as
// stale, so writers that retry from Load never spin on a record that is
// already gone.
func TestAWriteFromTheRecordThatSupersededADeferredOneIsStored(t *testing.T) {
	ctx := context.Background()
	l := openWithOneRecord(t)
	var ok bool
	var err error
	ok, err = l.CompareAndSwapDeferred(ctx, k, 1, rec(2))
	require.NoError(t, err)
	require.True(t, ok)

	// Hold the committer in one group while the next forms: the durable
	// write made from the deferred record, and a write that holds the
	// committer once that group committed, before it forgets what the
	// group superseded.
	committed, forget := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	release := holdCommitter(t, l, &wg)
	wg.Go(func() {
		_, ok, err := l.CompareAndSwap(ctx, k, 2, rec(3), nil)
		assert.NoError(t, err)
		assert.True(t, ok, "the write made from the deferred record")
	})
	waitQueued(t, l, 1)
	wg.Go(func() {
		assert.NoError(t, l.update(ctx, func(tx *bolt.Tx) error {
			tx.OnCommit(func() {
				close(committed)
				<-forget
			})
			return nil
		}))
	})
	waitQueued(t, l, 2)
	close(release)
	<-committed

	got, err := l.Load(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(3), got.Revision, "the commit is visible")
	stored := make(chan bool, 1)
	wg.Go(func() {
		ok, err := l.CompareAndSwapDeferred(ctx, k, 3, rec(4))
		assert.NoError(t, err)
		stored <- ok
	})
	// Until it is queued for the next group or answered at once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.commits.mu.Lock()
		queued := len(l.commits.queue)
		l.commits.mu.Unlock()
		if queued > 0 || len(stored) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the write neither queued nor answered")
		runtime.Gosched()
	}
	close(forget)
	wg.Wait()
	assert.True(t, <-stored, "the write made from the record that superseded the deferred one")
	got, err = l.Load(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), got.Revision)
}
