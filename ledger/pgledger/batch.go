package pgledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpsync/mcpsync/ledger"
)

// maxBatch bounds how many calls one statement carries.
const maxBatch = 64

// A batcher runs the calls that queue up while earlier ones are in flight
// together, in one statement: an idle ledger sends each call on its own,
// at once, and a busy one sends fewer, larger statements, each one round
// trip and one commit, instead of queueing every call for a connection of
// its own. Calls one caller makes at once (doAll) queue together, so they
// share statements even on an idle ledger. Each call still gets its own
// result, from a statement sent after the call was made.
type batcher[Q, R any] struct {
	// run carries out qs in one statement and returns a result for each,
	// or the error that failed them all.
	run func(ctx context.Context, qs []Q) ([]R, error)
	// alone carries out one call in a statement of its own, waiting as
	// long as its context lets it: the way each call of a statement that
	// failed for one of them (alone decides) is retried.
	alone func(ctx context.Context, q Q) (R, error)
	// retry says whether the calls of a statement that failed with err
	// are retried alone: only when err certainly wrote nothing.
	retry func(err error, n int) bool
	// errClosed is what calls get once the batcher is closed.
	errClosed error

	mu     sync.RWMutex // held to send on calls; close takes it to close calls
	closed bool
	// calls queues groups of calls, each made at once by one caller and
	// at most maxBatch long: a sender never splits one.
	calls chan []*call[Q, R]

	ctx    context.Context // the statements', cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type call[Q, R any] struct {
	ctx  context.Context
	q    Q
	r    R
	err  error
	done chan struct{}
}

// startBatcher starts senders goroutines, each sending one statement at a
// time, until close; calls then fail with errClosed.
func startBatcher[Q, R any](senders int, errClosed error, run func(context.Context, []Q) ([]R, error),
	alone func(context.Context, Q) (R, error), retry func(error, int) bool) *batcher[Q, R] {
	b := &batcher[Q, R]{run: run, alone: alone, retry: retry, errClosed: errClosed, calls: make(chan []*call[Q, R], maxBatch)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	for range senders {
		b.wg.Go(b.send)
	}
	return b
}

// close cancels the statements in flight, fails the calls still queued
// and waits for the senders to end; later calls fail with errClosed too.
func (b *batcher[Q, R]) close() {
	b.cancel()
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.calls)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// do makes one call: it returns when its statement did, or when ctx ends
// (the call may still take effect, as a statement cancelled mid-flight
// may), or with errClosed once the batcher is closed.
func (b *batcher[Q, R]) do(ctx context.Context, q Q) (R, error) {
	rs, errs := b.doAll(ctx, []Q{q})
	return rs[0], errs[0]
}

// doAll makes qs at once, each as do would: they queue together, in
// groups of maxBatch, so that they share statements, and rs[i] and
// errs[i] are qs[i]'s. It returns once each was answered, or when ctx
// ends (every call not answered by then gets ctx's error).
func (b *batcher[Q, R]) doAll(ctx context.Context, qs []Q) (rs []R, errs []error) {
	rs, errs = make([]R, len(qs)), make([]error, len(qs))
	cs := make([]*call[Q, R], len(qs))
	for i, q := range qs {
		cs[i] = &call[Q, R]{ctx: ctx, q: q, done: make(chan struct{})}
	}
	sent, err := b.queue(ctx, cs)
	for i, c := range cs[:sent] {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
		select {
		case <-c.done:
			rs[i], errs[i] = c.r, c.err
		default:
			errs[i] = ctx.Err() // given up on: it may still take effect
		}
	}
	for i := sent; i < len(cs); i++ {
		errs[i] = err
	}
	return rs, errs
}

// queue sends cs on calls in groups of at most maxBatch and returns how
// many it sent: all, or those sent before ctx ended (ctx's error) or the
// batcher was closed (errClosed).
func (b *batcher[Q, R]) queue(ctx context.Context, cs []*call[Q, R]) (int, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return 0, b.errClosed
	}
	sent := 0
	for group := range slices.Chunk(cs, maxBatch) {
		select {
		case b.calls <- group:
			sent += len(group)
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
	return sent, nil
}

// send takes a group of calls, then every other group already queued, up
// to maxBatch calls, and runs them in one statement, until calls is closed
// and drained. A group that would go past maxBatch waits for the next
// statement.
func (b *batcher[Q, R]) send() {
	batch := make([]*call[Q, R], 0, maxBatch)
	qs := make([]Q, 0, maxBatch)
	var next []*call[Q, R] // a group taken that did not fit the last statement
	for {
		group := next
		if next = nil; group == nil {
			var ok bool
			if group, ok = <-b.calls; !ok {
				return
			}
		}
		batch = append(batch[:0], group...)
	more:
		for len(batch) < maxBatch {
			select {
			case g, ok := <-b.calls:
				if !ok {
					break more
				}
				if len(batch)+len(g) > maxBatch {
					next = g
					break more
				}
				batch = append(batch, g...)
			default:
				break more
			}
		}
		live := batch[:0]
		qs = qs[:0]
		for _, c := range batch {
			if b.ctx.Err() != nil {
				c.err = b.errClosed // queued when the batcher closed
				close(c.done)
				continue
			}
			if err := c.ctx.Err(); err != nil {
				c.err = err // given up on before it was sent
				close(c.done)
				continue
			}
			live = append(live, c)
			qs = append(qs, c.q)
		}
		if len(live) == 0 {
			continue
		}
		rs, err := b.run(b.ctx, qs)
		if err != nil && b.ctx.Err() == nil && b.retry(err, len(live)) {
			// One call's failure is not the others': each goes again on
			// its own, off this sender, which goes on with the queue.
			for _, c := range live {
				b.wg.Go(func() { b.goAlone(c) })
			}
			continue
		}
		if err != nil && b.ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", b.errClosed, err) // ended by close
		}
		for i, c := range live {
			if err != nil {
				c.err = err
			} else {
				c.r = rs[i]
			}
			close(c.done)
		}
	}
}

// goAlone makes c in a statement of its own, on c's context, ended by
// close too.
func (b *batcher[Q, R]) goAlone(c *call[Q, R]) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	defer context.AfterFunc(b.ctx, cancel)()
	c.r, c.err = b.alone(ctx, c.q)
	close(c.done)
}

// retryApart retries apart the calls of a statement PostgreSQL refused:
// several, since one of them may be the cause, or one, when it gave up
// waiting for a lock (lockNotAvailable, compare_and_swap_all's lock
// timeout). A statement that committed and whose flush could not be
// waited for is not retried.
func retryApart(err error, n int) bool {
	var pgErr *pgconn.PgError
	var unflushed *unflushedError
	if !errors.As(err, &pgErr) || errors.As(err, &unflushed) {
		return false
	}
	return n > 1 || pgErr.Code == lockNotAvailable
}

// lockNotAvailable is the SQLSTATE of a lock timeout.
const lockNotAvailable = "55P03"

// loaded is a record as one key's load found it.
type loaded struct {
	found  bool
	rev    int64
	record []byte
}

// swap is one CompareAndSwap: the key, the revision it expects, the record
// and entries encoded, the record's index entry, and, on a fenced ledger,
// the epoch of its lease.
type swap struct {
	key     string
	prev    int64
	record  []byte
	entries [][]byte
	index   indexEntry
	epoch   int64
}

// swapped is what one swap came to: stored (first is its first entry's
// number, 0 with no entries), refused because another worker took the
// lease (fenced), or neither (the revision moved on).
type swapped struct {
	stored, fenced bool
	first          int64
}

// Senders per kind of call: with the pool's other users, loads and swaps
// each keep two statements in flight, revocation reads one.
const (
	loadSenders   = 2
	swapSenders   = 2
	revGenSenders = 1
)

func (l *Ledger) startBatchers() {
	l.loads = startBatcher(loadSenders, ledger.ErrLedgerClosed, l.loadAll, l.loadOne, retryApart)
	l.swaps = startBatcher(swapSenders, ledger.ErrLedgerClosed, l.swapAll, l.swapOne, retryApart)
	l.revGens = startBatcher(revGenSenders, ledger.ErrLedgerClosed, l.readRevGen, l.readRevGenOne,
		func(error, int) bool { return false }) // one statement, whatever the callers
}

func (l *Ledger) stopBatchers() {
	l.loads.close()
	l.swaps.close()
	l.revGens.close()
}

// loadAll reads the records of keys in one query.
func (l *Ledger) loadAll(ctx context.Context, keys []string) ([]loaded, error) {
	out := make([]loaded, len(keys))
	if len(keys) == 1 {
		var err error
		out[0], err = l.loadOne(ctx, keys[0])
		return out, err
	}
	rows, err := l.pool.Query(ctx, l.q.loadAll, keys)
	if err != nil {
		return nil, err
	}
	found := make(map[string]loaded, len(keys))
	var key string
	var got loaded
	if _, err := pgx.ForEachRow(rows, []any{&key, &got.rev, &got.record}, func() error {
		got.found = true
		found[key] = got
		got = loaded{}
		return nil
	}); err != nil {
		return nil, err
	}
	for i, k := range keys {
		out[i] = found[k]
	}
	return out, nil
}

// loadOne reads one record.
func (l *Ledger) loadOne(ctx context.Context, key string) (loaded, error) {
	var got loaded
	err := l.pool.QueryRow(ctx, l.q.load, key).Scan(&got.rev, &got.record)
	if errors.Is(err, pgx.ErrNoRows) {
		return loaded{}, nil
	}
	got.found = err == nil
	return got, err
}

// swapOne carries out one swap through compare_and_swap, which waits for
// its locks as long as ctx lets it.
func (l *Ledger) swapOne(ctx context.Context, s swap) (swapped, error) {
	var owner, epoch any
	if l.leases != nil {
		owner, epoch = l.leases.worker, s.epoch
	}
	var first *int64
	err := l.pool.QueryRow(ctx, l.q.cas, s.key, s.prev, s.record, s.entries, l.retain, trimStep, owner, epoch,
		s.index.subjects, s.index.unknown).Scan(&first)
	if err == nil && first != nil {
		err = l.flushed(ctx)
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == fencedSQLState && owner != nil:
		return swapped{fenced: true}, nil
	case err != nil:
		return swapped{}, err
	case first != nil:
		return swapped{stored: true, first: *first}, nil
	}
	return swapped{}, nil
}

// swapAll carries out swaps in one transaction, in key order (see
// compare_and_swap_all).
func (l *Ledger) swapAll(ctx context.Context, swaps []swap) ([]swapped, error) {
	var owner any
	if l.leases != nil {
		owner = l.leases.worker
	}
	out := make([]swapped, len(swaps))
	order := make([]int, len(swaps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(swaps[a].key, swaps[b].key) })
	keys := make([]string, len(swaps))
	prevs := make([]int64, len(swaps))
	records := make([][]byte, len(swaps))
	counts := make([]int32, len(swaps))
	epochs := make([]int64, len(swaps))
	subjectCounts := make([]int32, len(swaps))
	unknown := make([]bool, len(swaps))
	var bodies [][]byte
	var subjects [][]byte
	for at, i := range order {
		s := swaps[i]
		keys[at], prevs[at], records[at], counts[at], epochs[at] = s.key, s.prev, s.record, int32(len(s.entries)), s.epoch
		bodies = append(bodies, s.entries...)
		subjectCounts[at], unknown[at] = int32(len(s.index.subjects)), s.index.unknown
		subjects = append(subjects, s.index.subjects...)
	}
	var res []*int64
	if err := l.pool.QueryRow(ctx, l.q.casAll, keys, prevs, records, counts, bodies, l.retain, trimStep, owner, epochs,
		subjects, subjectCounts, unknown).Scan(&res); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(res, func(r *int64) bool { return r != nil && *r >= 0 }) {
		if err := l.flushed(ctx); err != nil {
			return nil, err
		}
	}
	if len(res) != len(swaps) {
		return nil, fmt.Errorf("%w: %d results for %d writes", ledger.ErrLedgerCorrupt, len(res), len(swaps))
	}
	for at, i := range order {
		switch r := res[at]; {
		case r == nil:
		case *r < 0:
			out[i].fenced = true
		default:
			out[i] = swapped{stored: true, first: *r}
		}
	}
	return out, nil
}

// flushed returns once every transaction committed before it is on disk:
// the writes of records commit without waiting for their flush, so that
// the locks they hold are let go at once (compare_and_swap_unflushed), and
// are reported only after this. An error says the write may or may not
// be durable, as a connection lost at a commit does.
func (l *Ledger) flushed(ctx context.Context) error {
	if _, err := l.pool.Exec(ctx, l.q.flush); err != nil {
		return &unflushedError{err: err}
	}
	return nil
}

// unflushedError is the failure of the wait for the flush of writes that
// committed: they are not retried, since they may have been made.
type unflushedError struct{ err error }

func (e *unflushedError) Error() string {
	return "wait for the flush of a commit: " + e.err.Error()
}

func (e *unflushedError) Unwrap() error { return e.err }

// readRevGen reads the revocation generation once for every caller
// waiting: each asked before the query was sent.
func (l *Ledger) readRevGen(ctx context.Context, qs []struct{}) ([]int64, error) {
	gen, err := l.readRevGenOne(ctx, struct{}{})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(qs))
	for i := range out {
		out[i] = gen
	}
	return out, nil
}

func (l *Ledger) readRevGenOne(ctx context.Context, _ struct{}) (int64, error) {
	var gen int64
	err := l.pool.QueryRow(ctx, l.q.revGen).Scan(&gen)
	return gen, err
}
