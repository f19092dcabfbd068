// Package ledgertest holds every ledger.Ledger to one contract, the way
// testing/fstest.TestFS holds file systems to theirs: a ledger that passes
// Run keeps the fence's guarantees whatever store is behind it.
package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
)

// Opener returns a new, empty ledger configured by opts (nil means
// defaults). It arranges, with t.Cleanup, for the ledger to be closed.
type Opener func(t *testing.T, opts *ledger.Options) ledger.Ledger

// Reopener closes l and returns the same store opened again, as a restarted
// process would find it.
type Reopener func(t *testing.T, l ledger.Ledger) ledger.Ledger

// Run checks the contract every ledger keeps: compare-and-swap, outbox
// numbering, acknowledgements per consumer, the retention bound, wake-ups,
// counters never reused, revocations, export and restore (consistent under
// concurrent writes), concurrency (run it under -race), that a reader who
// saw an outbox entry finds its record at least as new, for a ledger that
// implements ledger.Index, that its index answers what a walk of
// every record does after any sequence of an engine's writes, and, for one
// that implements ledger.Deferring, that deferred writes are seen
// by every later call, and, for one that implements ledger.Batching, that
// each write of a batch is decided on its own.
func Run(t *testing.T, open Opener) {
	RunDurable(t, open, nil)
}

// RunDurable is Run plus, when reopen is not nil, what a durable ledger
// keeps across closing and reopening.
func RunDurable(t *testing.T, open Opener, reopen Reopener) {
	t.Run("CompareAndSwap", func(t *testing.T) { testCompareAndSwap(t, open) })
	t.Run("Range", func(t *testing.T) { testRange(t, open) })
	t.Run("Counters", func(t *testing.T) { testCounters(t, open) })
	t.Run("Revocations", func(t *testing.T) { testRevocations(t, open) })
	t.Run("Consumers", func(t *testing.T) { testConsumers(t, open) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, open) })
	t.Run("SharedConsumer", func(t *testing.T) { testSharedConsumer(t, open) })
	t.Run("WaitOutbox", func(t *testing.T) { testWaitOutbox(t, open) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, open) })
	t.Run("EntriesNeverAheadOfRecords", func(t *testing.T) { testEntriesNeverAheadOfRecords(t, open) })
	t.Run("ExportRestore", func(t *testing.T) { testExportRestore(t, open) })
	t.Run("ExportNeverTears", func(t *testing.T) { testExportNeverTears(t, open) })
	t.Run("Index", func(t *testing.T) { testIndex(t, open, reopen) })
	t.Run("Deferred", func(t *testing.T) { testDeferred(t, open, reopen) })
	t.Run("Batching", func(t *testing.T) { testBatching(t, open, reopen) })
	if reopen != nil {
		t.Run("Reopen", func(t *testing.T) { testReopen(t, open, reopen) })
	}
}

var ctx = context.Background()

// record returns a record at revision rev naming its key in its digest, so
// that a record stored under the wrong key, or torn, shows.
func record(key string, rev uint64) *ledger.Record {
	return &ledger.Record{
		Revision: rev, State: ledger.StateActive, Watermark: rev, LastIssued: rev,
		LastAcceptedDigest: fmt.Sprintf("%s@%d", key, rev),
		Current: &ledger.StoredVersion{
			Version:  ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, URI: key, ReadOrdinal: rev, Subject: "user:alice"},
			Contents: []ledger.Content{{URI: key, MIMEType: "text/plain", Text: fmt.Sprintf("body %d", rev)}},
			Status:   ledger.VersionServed,
		},
	}
}

func entry(key string, rev uint64) ledger.OutboxEntry {
	return ledger.OutboxEntry{
		Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated, Subject: "user:alice",
		Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, URI: key, ReadOrdinal: rev},
		At:      time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
	}
}

// write stores revision rev of key with n entries, which must succeed.
func write(t *testing.T, l ledger.Ledger, key string, rev uint64, n int) uint64 {
	t.Helper()
	entries := make([]ledger.OutboxEntry, n)
	for i := range entries {
		entries[i] = entry(key, rev)
	}
	first, ok, err := l.CompareAndSwap(ctx, key, rev-1, record(key, rev), entries)
	require.NoError(t, err)
	require.True(t, ok, "%s revision %d", key, rev)
	return first
}

func testCompareAndSwap(t *testing.T, open Opener) {
	l := open(t, nil)
	got, err := l.Load(ctx, "a")
	require.NoError(t, err)
	assert.Nil(t, got, "no record yet")

	assert.Equal(t, uint64(1), write(t, l, "a", 1, 2), "entries are numbered from 1")
	assert.Equal(t, uint64(0), write(t, l, "a", 2, 0), "no entries, no number")
	assert.Equal(t, uint64(3), write(t, l, "b", 1, 1), "numbering is one sequence for all keys")

	first, ok, err := l.CompareAndSwap(ctx, "a", 1, record("a", 2), []ledger.OutboxEntry{entry("a", 2)})
	require.NoError(t, err)
	assert.False(t, ok, "a stale revision writes nothing")
	assert.Zero(t, first)
	_, ok, err = l.CompareAndSwap(ctx, "c", 1, record("c", 2), nil)
	require.NoError(t, err)
	assert.False(t, ok, "a record that does not exist is at revision 0")

	got, err = l.Load(ctx, "a")
	require.NoError(t, err)
	assertSameRecord(t, record("a", 2), got)
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 3, "the refused write appended nothing")
	for i, e := range entries {
		assert.Equal(t, uint64(i+1), e.Seq)
	}
	assert.Equal(t, "b", entries[2].URI)
	limited, err := l.Outbox(ctx, 1, 1)
	require.NoError(t, err)
	require.Len(t, limited, 1)
	assert.Equal(t, uint64(2), limited[0].Seq)
}

// assertSameRecord compares records by their stored form.
func assertSameRecord(t *testing.T, want, got *ledger.Record) {
	t.Helper()
	require.NotNil(t, got)
	w, err := ledger.EncodeRecord(want)
	require.NoError(t, err)
	g, err := ledger.EncodeRecord(got)
	require.NoError(t, err)
	assert.JSONEq(t, string(w), string(g))
}

func testRange(t *testing.T, open Opener) {
	l := open(t, nil)
	keys := []string{"file:///c", "file:///a", "file:///b"}
	for _, k := range keys {
		write(t, l, k, 1, 0)
	}
	var seen []string
	require.NoError(t, l.Range(ctx, func(key string, r *ledger.Record) bool {
		seen = append(seen, key)
		assert.Equal(t, key, r.Current.Version.URI)
		// fn may write to the ledger it ranges over.
		_, ok, err := l.CompareAndSwap(ctx, key, 1, record(key, 2), nil)
		assert.NoError(t, err)
		assert.True(t, ok)
		return true
	}))
	assert.Equal(t, []string{"file:///a", "file:///b", "file:///c"}, seen, "key order")
	n := 0
	require.NoError(t, l.Range(ctx, func(string, *ledger.Record) bool { n++; return false }))
	assert.Equal(t, 1, n, "Range stops when fn returns false")
}

func testCounters(t *testing.T, open Opener) {
	l := open(t, nil)
	first, err := l.Next(ctx, ledger.CounterSession, 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), first, "counters start at 1")
	first, err = l.Next(ctx, ledger.CounterRequest, 64)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), first, "counters are independent")
	first, err = l.Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(65), first, "a reserved block is never handed out again")

	const workers, each = 8, 50
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				v, err := l.Next(ctx, ledger.CounterCloseEpoch, 1)
				assert.NoError(t, err)
				mu.Lock()
				assert.False(t, seen[v], "close epoch %d handed out twice", v)
				seen[v] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, workers*each)

	last, err := l.Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	_, err = l.Next(ctx, ledger.CounterRequest, math.MaxUint64)
	require.ErrorIs(t, err, ledger.ErrCounterExhausted, "a reservation never wraps a counter")
	next, err := l.Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	assert.Equal(t, last+1, next, "a refused reservation reserves nothing")
}

func testRevocations(t *testing.T, open Opener) {
	l := open(t, nil)
	got, err := l.Revoked(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)
	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, s := range []string{"user:bob", "user:alice"} {
		require.NoError(t, l.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: s, At: at}))
		moved, err := l.RevokedGeneration(ctx)
		require.NoError(t, err)
		assert.Greater(t, moved, gen, "a new revoked subject moves the generation")
		gen = moved
	}
	require.NoError(t, l.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: "user:bob", At: at, Swept: true}))
	still, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	assert.Equal(t, gen, still, "replacing a subject's record does not")
	got, err = l.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2, "one record per subject")
	assert.Equal(t, "user:alice", got[0].Subject, "by subject")
	assert.False(t, got[0].Swept)
	assert.True(t, got[1].Swept, "a later record replaces the earlier")
	assert.True(t, got[1].At.Equal(at))
}

func testConsumers(t *testing.T, open Opener) {
	l := open(t, nil)
	for rev := uint64(1); rev <= 4; rev++ {
		write(t, l, "a", rev, 1)
	}
	require.NoError(t, l.Ack(ctx, "index", 2))
	require.NoError(t, l.Ack(ctx, "cache", 3))
	require.NoError(t, l.Ack(ctx, ledger.DefaultConsumer, 3), "the engine's default consumer")
	require.NoError(t, l.Ack(ctx, ledger.DefaultConsumer, 4))
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{"index": 2, "cache": 3, ledger.DefaultConsumer: 4}, st.Consumers)
	assert.Equal(t, uint64(4), st.Last)
	assert.Equal(t, uint64(3), st.First, "entries every consumer passed are gone")
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, uint64(3), entries[0].Seq)

	require.NoError(t, l.Ack(ctx, "index", 1), "acknowledging the past changes nothing")
	require.NoError(t, l.Ack(ctx, "cache", 99), "beyond the newest entry stops at it")
	st, err = l.OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]uint64{"index": 2, "cache": 4, ledger.DefaultConsumer: 4}, st.Consumers)

	require.NoError(t, l.Ack(ctx, "late", 0))
	st, err = l.OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), st.Consumers["late"], "a new consumer starts at the oldest retained entry")
	require.NoError(t, l.Ack(ctx, "index", 4))
	require.NoError(t, l.Ack(ctx, "late", 4))
	st, err = l.OutboxState(ctx)
	require.NoError(t, err)
	assert.Greater(t, st.First, st.Last, "nothing is retained once everyone passed it")
	assert.Zero(t, st.Dropped, "nothing was dropped unread")
	assert.Equal(t, uint64(5), write(t, l, "a", 5, 1), "numbering goes on")
}

func testRetention(t *testing.T, open Opener) {
	l := open(t, &ledger.Options{OutboxRetention: 3})
	require.NoError(t, l.Ack(ctx, "slow", 0))
	for rev := uint64(1); rev <= 5; rev++ {
		write(t, l, "a", rev, 1)
	}
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), st.First, "the bound keeps the newest entries")
	assert.Equal(t, uint64(2), st.Dropped, "and says what it dropped")
	assert.Equal(t, uint64(2), st.DroppedThrough)
	assert.Equal(t, uint64(0), st.Consumers["slow"], "the consumer's position says it did not pass them")

	off := open(t, &ledger.Options{OutboxRetention: -1})
	assert.Equal(t, uint64(1), write(t, off, "a", 1, 1), "an outbox turned off still numbers entries")
	entries, err := off.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	assert.Empty(t, entries, "and keeps none")
}

func testWaitOutbox(t *testing.T, open Opener) {
	l := open(t, nil)
	write(t, l, "a", 1, 1)
	require.NoError(t, l.WaitOutbox(ctx, 0), "an entry is already there")

	short, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, l.WaitOutbox(short, 1), context.Canceled)

	wctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	woke := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		woke <- l.WaitOutbox(wctx, 1)
	}()
	<-waiting
	write(t, l, "a", 2, 1)
	select {
	case err := <-woke:
		require.NoError(t, err, "the append woke the waiter")
	case <-wctx.Done():
		t.Fatal("WaitOutbox did not wake on an append")
	}
}

func testConcurrency(t *testing.T, open Opener) {
	l := open(t, nil)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := fmt.Sprintf("file:///own/%d", w)
			for rev := uint64(1); rev <= each; rev++ {
				_, ok, err := l.CompareAndSwap(ctx, own, rev-1, record(own, rev), []ledger.OutboxEntry{entry(own, rev)})
				assert.NoError(t, err)
				assert.True(t, ok)
				// One shared key: every writer retries until it wins once.
				for {
					cur, err := l.Load(ctx, "file:///shared")
					if !assert.NoError(t, err) {
						return
					}
					var rev uint64
					if cur != nil {
						rev = cur.Revision
					}
					_, ok, err := l.CompareAndSwap(ctx, "file:///shared", rev, record("file:///shared", rev+1), []ledger.OutboxEntry{entry("file:///shared", rev+1)})
					if !assert.NoError(t, err) || ok {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	shared, err := l.Load(ctx, "file:///shared")
	require.NoError(t, err)
	assert.Equal(t, uint64(workers*each), shared.Revision, "no lost update")
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2*workers*each)
	last := map[string]uint64{}
	for i, e := range entries {
		require.Equal(t, uint64(i+1), e.Seq, "numbered consecutively, none twice")
		assert.Greater(t, e.Version.ReadOrdinal, last[e.URI], "in order per key")
		last[e.URI] = e.Version.ReadOrdinal
	}
}

// A consumer that has seen an outbox entry and loads the entry's record
// must find the record as of that entry or later: otherwise it takes the
// entry for superseded, acknowledges it, and what it feeds misses that
// version for good. Readers poll the outbox and load each entry's record
// while writers append, every entry naming the revision that wrote it (on a
// ledger that defers writes, every third write is deferred, with no entry).
func testEntriesNeverAheadOfRecords(t *testing.T, open Opener) {
	l := open(t, nil)
	d, _ := l.(ledger.Deferring)
	keys := []string{"file:///seen/a", "file:///seen/b"}
	const writes = 100
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for rev := uint64(1); rev <= writes; rev++ {
			for _, k := range keys {
				var ok bool
				var err error
				if d != nil && rev%3 == 0 {
					ok, err = d.CompareAndSwapDeferred(ctx, k, rev-1, record(k, rev))
				} else {
					_, ok, err = l.CompareAndSwap(ctx, k, rev-1, record(k, rev), []ledger.OutboxEntry{entry(k, rev)})
				}
				if !assert.NoError(t, err) || !assert.True(t, ok) {
					return
				}
			}
		}
	})
	var ahead atomic.Int32
	for reader := range 2 {
		wg.Go(func() {
			var after uint64
			for running := true; running; {
				select {
				case <-done:
					running = false // one more pass sees the last entries
				default:
				}
				entries, err := l.Outbox(ctx, after, 0)
				if !assert.NoError(t, err) {
					return
				}
				for _, e := range entries {
					after = e.Seq
					r, err := l.Load(ctx, e.URI)
					if !assert.NoError(t, err) {
						return
					}
					if r == nil || r.Revision < e.Version.ReadOrdinal {
						var at uint64
						if r != nil {
							at = r.Revision
						}
						assert.Failf(t, "an entry ahead of its record",
							"reader %d saw entry %d (%s at revision %d) and then loaded revision %d", reader, e.Seq, e.URI, e.Version.ReadOrdinal, at)
						if ahead.Add(1) > 3 {
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
}

func testExportRestore(t *testing.T, open Opener) {
	l := open(t, nil)
	write(t, l, "file:///a", 1, 1)
	write(t, l, "file:///a", 2, 1)
	write(t, l, "file:///b", 1, 1)
	require.NoError(t, l.Ack(ctx, "index", 1))
	_, err := l.Next(ctx, ledger.CounterSession, 3)
	require.NoError(t, err)
	require.NoError(t, l.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: "user:bob", Swept: true}))

	snap, err := l.Export(ctx)
	require.NoError(t, err)
	raw, err := json.Marshal(snap)
	require.NoError(t, err)
	var decoded ledger.Snapshot
	require.NoError(t, json.Unmarshal(raw, &decoded))

	into := open(t, nil)
	require.NoError(t, ledger.Restore(ctx, into, decoded))
	again, err := into.Export(ctx)
	require.NoError(t, err)
	// Every counter, also one the snapshot never used, resumes a gap
	// beyond the snapshot: its source may have gone on after the export.
	want := snap
	want.Counters = map[ledger.Counter]uint64{}
	for _, c := range ledger.Counters {
		want.Counters[c] = snap.Counters[c] + ledger.RestoreCounterGap
	}
	assertSameSnapshot(t, want, again)
	require.ErrorIs(t, into.Restore(ctx, decoded), ledger.ErrLedgerNotEmpty)

	v, err := into.Next(ctx, ledger.CounterSession, 1)
	require.NoError(t, err)
	assert.Equal(t, 3+ledger.RestoreCounterGap+1, v, "counters continue past the gap")
	assert.Equal(t, uint64(4), write(t, into, "file:///b", 2, 1), "outbox numbering continues")

	short := decoded
	short.Outbox = decoded.Outbox[:len(decoded.Outbox)-1]
	require.ErrorIs(t, ledger.Restore(ctx, open(t, nil), short), ledger.ErrSnapshotInvalid,
		"an outbox short of its last number")
	unnamed := decoded
	unnamed.Counters = map[ledger.Counter]uint64{}
	unnamed.Records = map[string]*ledger.Record{"file:///a": {Revision: 1, CloseEpoch: 7}}
	require.ErrorIs(t, ledger.Restore(ctx, open(t, nil), unnamed), ledger.ErrSnapshotInvalid,
		"a record naming a close epoch its counter never handed out")
}

func assertSameSnapshot(t *testing.T, want, got ledger.Snapshot) {
	t.Helper()
	w, err := json.Marshal(want)
	require.NoError(t, err)
	g, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, string(w), string(g))
}

// Every write raises one key's revision by one and appends one entry, so in
// a consistent snapshot each record's revision equals its entries, and the
// numbering equals all of them.
func testExportNeverTears(t *testing.T, open Opener) {
	l := open(t, nil)
	keys := []string{"file:///a", "file:///b", "file:///c"}
	const writes = 60
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for rev := uint64(1); rev <= writes; rev++ {
			for _, k := range keys {
				_, ok, err := l.CompareAndSwap(ctx, k, rev-1, record(k, rev), []ledger.OutboxEntry{entry(k, rev)})
				if !assert.NoError(t, err) || !assert.True(t, ok) {
					return
				}
			}
		}
	})
	check := func() {
		snap, err := l.Export(ctx)
		require.NoError(t, err)
		count := map[string]uint64{}
		for _, e := range snap.Outbox {
			count[e.URI]++
		}
		var total uint64
		for k, r := range snap.Records {
			require.Equal(t, r.Revision, count[k], "%s: record at revision %d, %d outbox entries", k, r.Revision, count[k])
			require.Equal(t, fmt.Sprintf("%s@%d", k, r.Revision), r.LastAcceptedDigest, "%s is whole", k)
			total += r.Revision
		}
		require.Equal(t, total, snap.State.Last, "every entry belongs to a record in the snapshot")
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	wg.Wait()
}

func testReopen(t *testing.T, open Opener, reopen Reopener) {
	l := open(t, &ledger.Options{OutboxRetention: 4})
	for rev := uint64(1); rev <= 3; rev++ {
		write(t, l, "file:///a", rev, 2)
	}
	require.NoError(t, l.Ack(ctx, "index", 3))
	session, err := l.Next(ctx, ledger.CounterSession, 1)
	require.NoError(t, err)
	require.NoError(t, l.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: "user:bob"}))
	before, err := l.Export(ctx)
	require.NoError(t, err)

	l = reopen(t, l)
	after, err := l.Export(ctx)
	require.NoError(t, err)
	assertSameSnapshot(t, before, after)
	next, err := l.Next(ctx, ledger.CounterSession, 1)
	require.NoError(t, err)
	assert.Greater(t, next, session, "a counter never goes back across a reopen")
	assert.Equal(t, before.State.Last+1, write(t, l, "file:///a", 4, 1), "numbering goes on")
	require.NoError(t, l.WaitOutbox(ctx, before.State.Last))
}
