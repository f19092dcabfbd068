package boltledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync/ledger"
)

// Group commit.
//
// Every write of the ledger is a function of a bbolt transaction handed to
// one goroutine, the committer, which runs every write queued while it was
// committing the last group in one transaction, with one fsync, and then
// tells each writer its own result. Nothing waits for a group to fill: a
// writer alone is committed at once, and sixty-four writers arriving
// together wait for the commit under way and then share the next. A write
// that fails fails alone: the group is rolled back, that write gets its
// error, and the others are run again, without it, in a new transaction.
//
// Deferred writes (CompareAndSwapDeferred) are not queued: they are kept
// in memory, visible to Load at once. The next durable write of the same
// key, made from the deferred record, supersedes it and writes the key's
// state whole; a flush (Range, Export, the index, Close) writes every
// deferred record first in the transaction of its group. So no write of a
// key is ever on disk before a deferred write of that key made before it,
// and the committer encodes no record that a later write replaces.

// maxGroup bounds the writes one transaction carries.
const maxGroup = 1024

// write is one queued write: fn runs in the group's transaction, perhaps
// more than once (the group's transaction may be rolled back for another
// write's failure), so it sets whatever it reports afresh on each run;
// its caller reads err, and what fn reported, once done is closed.
type write struct {
	fn   func(tx *bolt.Tx) error
	err  error
	done chan struct{}
}

// deferredRecord is a record written by CompareAndSwapDeferred and not yet
// committed, over the key's record at revision base in the file. It is
// encoded by the flush that writes it, if one does before a durable write
// of the key supersedes it.
type deferredRecord struct {
	key  string
	rec  *ledger.Record
	base uint64
}

// committer is the ledger's group commit: its queue and the goroutine that
// drains it.
type committer struct {
	mu       sync.Mutex // protects queue and stopping
	wake     sync.Cond  // on mu: a write was queued, or the committer stops
	queue    []*write
	stopping bool          // Close began: no write is queued any more
	stopped  chan struct{} // closed when the committer returns
	// count is how many transactions the committer committed.
	count atomic.Uint64
	// superseded are the deferred records the writes of the transaction
	// being run replaced (supersede); only the committer touches it, and
	// it forgets them in the same step as the commit, before the next
	// group, whose flush would otherwise write them over what replaced
	// them.
	superseded []*deferredRecord
}

// startCommitter starts the committer of l.
func (l *Ledger) startCommitter() {
	c := &l.commits
	c.wake.L = &c.mu
	c.stopped = make(chan struct{})
	go l.commitLoop()
}

// update runs fn in a write transaction, with the writes queued beside it,
// and returns once that transaction committed (or fn's error); a nil fn
// writes nothing but the deferred records (flush). fn may run
// more than once: it sets every result it captures afresh on each run, and
// the caller acts on them (the cache, wake-ups) only once update returned.
// Once update was called, the write is carried out whatever ctx does.
func (l *Ledger) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	w := &write{fn: fn, done: make(chan struct{})}
	if err := l.enqueue(ctx, w); err != nil {
		return err
	}
	<-w.done
	return w.err
}

// updateAll is update of each of fns, queued at once, so that they share
// a group (up to maxGroup writes a transaction), each with its own result:
// errs[i] is fns[i]'s.
func (l *Ledger) updateAll(ctx context.Context, fns []func(*bolt.Tx) error) (errs []error) {
	errs = make([]error, len(fns))
	ws := make([]*write, len(fns))
	for i, fn := range fns {
		ws[i] = &write{fn: fn, done: make(chan struct{})}
	}
	if err := l.enqueue(ctx, ws...); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, w := range ws {
		<-w.done
		errs[i] = w.err
	}
	return errs
}

// enqueue hands ws to the committer, in order.
func (l *Ledger) enqueue(ctx context.Context, ws ...*write) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	c := &l.commits
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return ledger.ErrLedgerClosed
	}
	c.queue = append(c.queue, ws...)
	c.wake.Signal()
	return nil
}

// flush commits the deferred writes, if there are any; read paths that
// read records from the file (Range, Export, the index) call it first, so
// that they see every write that returned before them. A flush is a write
// of no function (fn nil).
func (l *Ledger) flush(ctx context.Context) error {
	l.cacheMu.RLock()
	n := len(l.deferred)
	l.cacheMu.RUnlock()
	if n == 0 {
		return nil
	}
	return l.update(ctx, nil)
}

// stopCommitter commits what is queued and deferred and stops the
// committer; writes made after it began fail with ErrLedgerClosed. It
// returns the error of that last commit.
func (l *Ledger) stopCommitter() error {
	// No write is deferred from now on: the last group's flush finds
	// every one made before.
	l.cacheMu.Lock()
	l.closing = true
	l.cacheMu.Unlock()
	c := &l.commits
	last := &write{done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, last)
	c.stopping = true
	c.wake.Signal()
	c.mu.Unlock()
	<-c.stopped
	return last.err
}

// commitLoop is the committer: it takes every write queued, up to
// maxGroup, commits them as one group, and goes on with what was queued
// meanwhile, until Close.
func (l *Ledger) commitLoop() {
	c := &l.commits
	defer close(c.stopped)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.stopping {
			c.wake.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		n := min(len(c.queue), maxGroup)
		group := slices.Clone(c.queue[:n])
		c.queue = slices.Delete(c.queue, 0, n)
		c.mu.Unlock()
		l.commitGroup(group)
	}
}

// commitGroup commits group in one transaction, with every deferred record
// when group holds a flush. The deferred records are taken after the group
// was: each is written before the writes of the group, and a write made
// from one (its revision) finds it written.
func (l *Ledger) commitGroup(group []*write) {
	var deferred []*deferredRecord
	var vals [][]byte
	if slices.ContainsFunc(group, func(w *write) bool { return w.fn == nil }) {
		deferred, vals = l.encodeDeferred(l.takeDeferred())
	}
	for {
		if len(deferred) == 0 && !writes(group) {
			// Flushes alone, with nothing deferred: no transaction.
			for _, w := range group {
				close(w.done)
			}
			return
		}
		failed, ferr := -1, error(nil)
		l.commits.superseded = l.commits.superseded[:0]
		err := l.db.Update(func(tx *bolt.Tx) error {
			records := tx.Bucket(bucketRecords)
			for i, d := range deferred {
				if err := records.Put([]byte(d.key), vals[i]); err != nil {
					return fmt.Errorf("deferred write of %s: %w", d.key, err)
				}
				if err := index(tx, []byte(d.key), d.rec); err != nil {
					return fmt.Errorf("deferred write of %s: %w", d.key, err)
				}
			}
			for i, w := range group {
				if w.fn == nil {
					continue
				}
				if err := w.fn(tx); err != nil {
					failed, ferr = i, err
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			// Rolled back for one write: it fails alone, and the rest go
			// again without it.
			w := group[failed]
			w.err = ferr
			close(w.done)
			group = slices.Delete(group, failed, failed+1)
			continue
		}
		if err == nil {
			l.commits.count.Add(1)
			l.committed(deferred, l.commits.superseded)
		}
		for _, w := range group {
			w.err = err
			close(w.done)
		}
		return
	}
}

// writes reports whether group holds a write other than a flush.
func writes(group []*write) bool {
	return slices.ContainsFunc(group, func(w *write) bool { return w.fn != nil })
}

// takeDeferred returns the deferred records, in key order; they stay
// deferred until committed says they were written.
func (l *Ledger) takeDeferred() []*deferredRecord {
	l.cacheMu.RLock()
	defer l.cacheMu.RUnlock()
	if len(l.deferred) == 0 {
		return nil
	}
	out := make([]*deferredRecord, 0, len(l.deferred))
	for _, d := range l.deferred {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *deferredRecord) int { return cmp.Compare(a.key, b.key) })
	return out
}

// encodeDeferred returns the stored form of each of deferred, and deferred
// without any that cannot be encoded (none can: each is a record of the
// same types the ledger encoded before it). Such a record is dropped,
// as a crash would drop it, and the cache forgets it.
func (l *Ledger) encodeDeferred(deferred []*deferredRecord) ([]*deferredRecord, [][]byte) {
	vals := make([][]byte, 0, len(deferred))
	kept := deferred[:0]
	for _, d := range deferred {
		val, err := encodeRecord(d.rec)
		if err != nil || len(val) > bolt.MaxValueSize {
			l.cacheMu.Lock()
			if l.deferred[d.key] == d {
				delete(l.deferred, d.key)
				delete(l.cache, d.key)
			}
			l.cacheMu.Unlock()
			continue
		}
		kept, vals = append(kept, d), append(vals, val)
	}
	return kept, vals
}

// supersede records, from a write run in the committer's transaction, that
// the write replaces deferred record d.
func (l *Ledger) supersede(d *deferredRecord) {
	l.commits.superseded = append(l.commits.superseded, d)
}

// committed forgets the deferred records a commit wrote or replaced,
// unless a later deferred write of the same key replaced them meanwhile.
func (l *Ledger) committed(written, superseded []*deferredRecord) {
	if len(written) == 0 && len(superseded) == 0 {
		return
	}
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	for _, d := range append(written, superseded...) {
		if l.deferred[d.key] == d {
			delete(l.deferred, d.key)
		}
	}
}
