package pgledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

var errTestClosed = errors.New("closed")

// gatedRun is a batcher's run that records each batch and holds the first
// until gate is closed.
type gatedRun struct {
	mu      sync.Mutex
	batches [][]int
	started chan struct{} // closed when the first batch is in flight
	gate    chan struct{}
	fail    error
}

func newGatedRun() *gatedRun {
	return &gatedRun{started: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gatedRun) run(ctx context.Context, qs []int) ([]string, error) {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(qs))
	first := len(g.batches) == 1
	g.mu.Unlock()
	if first {
		close(g.started)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g.fail != nil {
		return nil, g.fail
	}
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = fmt.Sprint("r", q)
	}
	return out, nil
}

func (g *gatedRun) alone(ctx context.Context, q int) (string, error) {
	if q == 13 {
		return "", errors.New("13 refused")
	}
	return fmt.Sprint("alone", q), nil
}

func never(error, int) bool { return false }

// A statement that fails for one of its calls is retried call by call, so
// that the others get their own results: no call gets another's error.
func TestBatcherRetriesAFailedStatementCallByCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		g.fail = errors.New("one of them is refused")
		b := startBatcher(1, errTestClosed, g.run, g.alone, func(error, int) bool { return true })
		defer b.close()
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = b.do(t.Context(), 0) })
		<-g.started
		got := map[int]string{}
		var mu sync.Mutex
		for _, q := range []int{12, 13, 14} {
			wg.Go(func() {
				r, err := b.do(t.Context(), q)
				mu.Lock()
				defer mu.Unlock()
				got[q] = r
				if err != nil {
					got[q] = err.Error()
				}
			})
		}
		synctest.Wait()
		require.Len(t, b.calls, 3)
		close(g.gate)
		wg.Wait()
		assert.Equal(t, map[int]string{12: "alone12", 13: "13 refused", 14: "alone14"}, got)
	})
}

// Calls made while a statement is in flight go together in the next one,
// and each gets its own result.
func TestBatcherSendsWhatQueuedInOneStatement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		b := startBatcher(1, errTestClosed, g.run, g.alone, never)
		defer b.close()
		var wg sync.WaitGroup
		got := make([]string, 6)
		wg.Go(func() { got[0], _ = b.do(t.Context(), 0) })
		<-g.started
		for i := 1; i < len(got); i++ {
			wg.Go(func() {
				var err error
				got[i], err = b.do(t.Context(), i)
				assert.NoError(t, err)
			})
		}
		synctest.Wait()
		require.Len(t, b.calls, len(got)-1, "the later calls queue behind the one in flight")
		close(g.gate)
		wg.Wait()
		for i, r := range got {
			assert.Equal(t, fmt.Sprint("r", i), r, "call %d got its own result", i)
		}
		require.Len(t, g.batches, 2, "one statement for the first call, one for all the rest")
		assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, g.batches[1])
	})
}

// Calls one caller makes at once (doAll) go in one statement, even on an
// idle batcher, whose sender would otherwise take the first alone; more
// than maxBatch go in statements of maxBatch. A group that does not fit
// the statement being filled waits whole for the next: no statement
// carries more than maxBatch calls, and each call gets its own result.
func TestBatcherSendsCallsMadeAtOnceTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		close(g.gate)
		b := startBatcher(1, errTestClosed, g.run, g.alone, never)
		defer b.close()
		rs, errs := b.doAll(t.Context(), []int{0, 1, 2})
		assert.Equal(t, []string{"r0", "r1", "r2"}, rs)
		assert.Equal(t, []error{nil, nil, nil}, errs)
		require.Equal(t, [][]int{{0, 1, 2}}, g.batches, "one statement for the calls made at once")

		qs := make([]int, 2*maxBatch+2)
		for i := range qs {
			qs[i] = 100 + i
		}
		rs, errs = b.doAll(t.Context(), qs)
		for i, q := range qs {
			require.NoError(t, errs[i])
			require.Equal(t, fmt.Sprint("r", q), rs[i], "call %d got its own result", i)
		}
		require.Equal(t, [][]int{{0, 1, 2}, qs[:maxBatch], qs[maxBatch : 2*maxBatch], qs[2*maxBatch:]}, g.batches)
	})
}

// Groups queued behind a statement in flight fill the next one up to
// maxBatch; the group that would pass it goes whole in the one after.
func TestBatcherNeverSplitsAGroupThatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		b := startBatcher(1, errTestClosed, g.run, g.alone, never)
		defer b.close()
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = b.do(t.Context(), 0) })
		<-g.started
		seq := func(from, n int) []int {
			qs := make([]int, n)
			for i := range qs {
				qs[i] = from + i
			}
			return qs
		}
		first, second := seq(100, maxBatch-4), seq(200, 5)
		wg.Go(func() { _, _ = b.doAll(t.Context(), first) })
		synctest.Wait()
		wg.Go(func() { _, _ = b.doAll(t.Context(), second) })
		synctest.Wait()
		require.Len(t, b.calls, 2)
		close(g.gate)
		wg.Wait()
		require.Equal(t, [][]int{{0}, first, second}, g.batches)
	})
}

// A failed statement fails every call it carried, and the batcher goes on.
func TestBatcherFailsTheWholeStatement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		g.fail = errors.New("connection lost")
		close(g.gate)
		b := startBatcher(2, errTestClosed, g.run, g.alone, never)
		defer b.close()
		_, err := b.do(t.Context(), 1)
		require.ErrorIs(t, err, g.fail)
		g.mu.Lock()
		g.fail = nil
		g.mu.Unlock()
		r, err := b.do(t.Context(), 2)
		require.NoError(t, err)
		assert.Equal(t, "r2", r)
	})
}

// A call given up on before its statement is sent is left out of it; one
// given up on in flight returns at once.
func TestBatcherHonoursContexts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		b := startBatcher(1, errTestClosed, g.run, g.alone, never)
		defer b.close()
		done := make(chan error, 1)
		go func() { _, err := b.do(t.Context(), 0); done <- err }()
		<-g.started
		ctx, cancel := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() { _, err := b.do(ctx, 1); gaveUp <- err }()
		synctest.Wait()
		require.Len(t, b.calls, 1)
		cancel()
		require.ErrorIs(t, <-gaveUp, context.Canceled)
		close(g.gate)
		require.NoError(t, <-done)
		r, err := b.do(t.Context(), 2)
		require.NoError(t, err)
		assert.Equal(t, "r2", r)
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, batch := range g.batches {
			assert.NotContains(t, batch, 1, "the call given up on was not sent")
		}
	})
}

// close ends the statement in flight and every queued call, and later calls
// fail with the closed error; no sender is left running (goleak).
func TestBatcherClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGatedRun()
		b := startBatcher(1, errTestClosed, g.run, g.alone, never)
		errs := make(chan error, 3)
		go func() { _, err := b.do(context.Background(), 0); errs <- err }()
		<-g.started
		for i := 1; i < 3; i++ {
			go func() { _, err := b.do(context.Background(), i); errs <- err }()
		}
		synctest.Wait()
		require.Len(t, b.calls, 2)
		b.close()
		for range 3 {
			require.Error(t, <-errs, "no call outlives close without an answer")
		}
		g.mu.Lock()
		assert.Len(t, g.batches, 1, "nothing queued was sent after close")
		g.mu.Unlock()
		_, err := b.do(context.Background(), 4)
		require.ErrorIs(t, err, errTestClosed)
	})
}

// compare_and_swap_all stores each key or refuses it on its own: a stale
// revision, a lease not held, and the rest stored, their entries numbered
// consecutively in key order with no number for what was refused.
func TestSwapAllDecidesEachKey(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l, err := Open(t.Context(), conn, &Options{Schema: schema, Leases: &LeaseOptions{}})
	require.NoError(t, err)
	defer l.Close()
	keys := []string{"file:///a", "file:///b", "file:///c", "file:///d"}
	taken, err := l.AcquireAll(t.Context(), keys[:3]) // not d
	require.NoError(t, err)
	enc := func(key string, rev uint64, entries int) swap {
		rec, err := ledger.EncodeRecord(&ledger.Record{Revision: rev, State: ledger.StateActive})
		require.NoError(t, err)
		s := swap{key: key, prev: int64(rev - 1), record: rec, epoch: int64(taken[key])}
		for range entries {
			b, err := encodeEntry(ledger.OutboxEntry{Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated})
			require.NoError(t, err)
			s.entries = append(s.entries, b)
		}
		return s
	}
	// Given out of key order: the ledger orders them.
	got, err := l.swapAll(t.Context(), []swap{enc(keys[2], 1, 2), enc(keys[3], 1, 1), enc(keys[0], 1, 1), enc(keys[1], 2, 1)})
	require.NoError(t, err)
	assert.Equal(t, []swapped{
		{stored: true, first: 2}, // c: after a's one entry
		{fenced: true},           // d: no lease
		{stored: true, first: 1}, // a
		{},                       // b: revision 2 expects 1 stored, and none is
	}, got)
	entries, err := l.Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	var uris []string
	for i, e := range entries {
		require.Equal(t, uint64(i+1), e.Seq)
		uris = append(uris, e.URI)
	}
	assert.Equal(t, []string{keys[0], keys[2], keys[2]}, uris)

	// Two writes of one key in one statement: the first wins, the second
	// finds the revision moved.
	got, err = l.swapAll(t.Context(), []swap{enc(keys[0], 2, 0), enc(keys[0], 2, 1)})
	require.NoError(t, err)
	assert.Equal(t, []swapped{{stored: true}, {}}, got)
}

// Writers of overlapping keys, with renewals and acquisitions of their
// leases going on, share statements without losing or crossing a write:
// every stored write is counted once, and the outbox is numbered without a
// gap. (The lock orders are pinned down, deterministically, by the
// deadlock tests of lease_test.go; this load rarely meets them.)
func TestConcurrentWritesShareStatements(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l, err := Open(t.Context(), conn, &Options{Schema: schema, Leases: &LeaseOptions{}})
	require.NoError(t, err)
	defer l.Close()
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("file:///docs/%d.md", i)
	}
	_, err = l.AcquireAll(t.Context(), keys)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	var lease sync.WaitGroup
	lease.Go(func() {
		for ctx.Err() == nil {
			_, err := l.Renew(ctx)
			if ctx.Err() == nil {
				assert.NoError(t, err)
			}
			backward := slices.Clone(keys)
			slices.Reverse(backward)
			_, err = l.AcquireAll(ctx, backward)
			if ctx.Err() == nil {
				assert.NoError(t, err)
			}
		}
	})
	const writers, writes = 16, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				key := keys[(w*7+i)%len(keys)]
				for {
					cur, err := l.Load(t.Context(), key)
					require.NoError(t, err)
					rev := uint64(0)
					if cur != nil {
						rev = cur.Revision
					}
					_, ok, err := l.CompareAndSwap(t.Context(), key, rev, &ledger.Record{Revision: rev + 1, State: ledger.StateActive},
						[]ledger.OutboxEntry{{Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated}})
					require.NoError(t, err)
					if ok {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	stop()
	lease.Wait()
	var total uint64
	for _, key := range keys {
		r, err := l.Load(t.Context(), key)
		require.NoError(t, err)
		total += r.Revision
	}
	assert.Equal(t, uint64(writers*writes), total, "every stored write counted once")
	entries, err := l.Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, writers*writes)
	for i, e := range entries {
		require.Equal(t, uint64(i+1), e.Seq)
	}
}

// Two callers of one ledger write at once: one a key PostgreSQL refuses (a
// long URI, its key beyond what the records index holds: "index row size
// exceeds btree maximum"), the other an ordinary key. Queued together while
// earlier writes are in flight, they share one compare_and_swap_all
// statement; each still gets its own answer, as alone: the long key an
// error, the ordinary one stored. Results never cross between calls.
//
// Deterministic: the two senders are held inside statements that wait on
// rows the test locks, the two calls are seen queued, and one sender is
// let go, which takes both in one statement.
func TestBadKeyFailsNoOtherWriteBatchedWithIt(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	ctx := context.Background()
	l, err := Open(ctx, conn, &Options{Schema: schema})
	require.NoError(t, err)
	defer l.Close()
	rec := func(rev uint64) *ledger.Record {
		return &ledger.Record{Revision: rev, State: ledger.StateActive}
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

// The outbox keeps "at most ledger.Options.OutboxRetention entries" whether
// writes come one at a time or share one compare_and_swap_all statement
// (here two writes of 600 entries each, four times over, in the statement
// the batcher sends for two writes that queued together, as
// TestSwapAllDecidesEachKey calls it): trimming keeps up with everything
// a statement appends.
func TestBatchedWritesKeepTheRetentionBound(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	ctx := context.Background()
	const retain, each = 10, 600
	l, err := Open(ctx, conn, &Options{Schema: schema, Ledger: &ledger.Options{OutboxRetention: retain}})
	require.NoError(t, err)
	defer l.Close()
	write := func(key string) swap {
		rec, err := ledger.EncodeRecord(&ledger.Record{Revision: 1, State: ledger.StateActive})
		require.NoError(t, err)
		s := swap{key: key, record: rec}
		for range each {
			b, err := encodeEntry(ledger.OutboxEntry{Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated})
			require.NoError(t, err)
			s.entries = append(s.entries, b)
		}
		return s
	}

	// One at a time, a write of 600 entries keeps the bound.
	_, _, err = l.CompareAndSwap(ctx, "file:///alone", 0, &ledger.Record{Revision: 1, State: ledger.StateActive},
		make([]ledger.OutboxEntry, each))
	require.NoError(t, err)
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Last-st.First+1, uint64(retain), "a write alone keeps the bound")

	var kept []uint64
	for round := range 4 {
		got, err := l.swapAll(ctx, []swap{write(fmt.Sprintf("file:///a%d", round)), write(fmt.Sprintf("file:///b%d", round))})
		require.NoError(t, err)
		require.True(t, got[0].stored && got[1].stored)
		st, err := l.OutboxState(ctx)
		require.NoError(t, err)
		kept = append(kept, st.Last-st.First+1)
	}
	for round, n := range kept {
		require.LessOrEqual(t, n, uint64(retain),
			"after each statement of two batched writes the outbox keeps %v entries, beyond its bound of %d (round %d)", kept, retain, round)
	}
}

// A statement PostgreSQL refused wrote nothing and is retried apart (when
// one of several may be its cause, or it gave up on a lock); one that
// committed but whose flush could not be waited for is not: it may have
// been made, and a retry would be told its revision moved.
func TestOnlyAStatementThatWroteNothingIsRetriedApart(t *testing.T) {
	refused := &pgconn.PgError{Code: "23505"}
	assert.True(t, retryApart(refused, 2), "one of several refused")
	assert.False(t, retryApart(refused, 1), "one refused: its own error")
	assert.True(t, retryApart(&pgconn.PgError{Code: lockNotAvailable}, 1), "a lock given up on")
	assert.False(t, retryApart(&unflushedError{err: &pgconn.PgError{Code: "57P01"}}, 2), "committed, flush not seen")
	assert.False(t, retryApart(errors.New("connection reset"), 2), "not known to have written nothing")
}
