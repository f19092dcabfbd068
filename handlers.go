package mcpsync

import (
	"slices"

	"github.com/mcpsync/mcpsync/ledger"
)

// Change handlers. A Client with a Handler keeps, on the goroutine that
// delivers OnError and OnOutcome, the last entry it told the handler of each
// URI, and whenever a write may have changed what Lookup serves the client's
// subject for a URI (a read the fence accepted, a tombstone a catalog
// confirmed, a revocation, a Forget), it marks the URI; delivering the mark
// compares what Lookup serves now with that last entry and makes the one
// call that tells the difference. The handler's view is thus always what
// Lookup served at some instant, in order per URI; marks of one URI that
// arrive before the first is delivered make one call.

// ResourceHandler is told how the entries the client's subject may be served
// change, in the shape of client-go's ResourceEventHandler. Its methods run
// on one goroutine (the one that runs OnError and OnOutcome), one call at a
// time, outside every lock; they may call any method of the Client but
// WaitForSync, and a Close on another goroutine returns once the method
// running has returned. A panic in one is recovered and reported to OnError.
// Changes made through another engine on a shared ledger are told when
// this client next reads the URI.
type ResourceHandler interface {
	// OnAdd is told of an entry Lookup serves and the handler was not told
	// of: the versions the engine holds when the Client connects, each
	// first version of a URI, and a URI served again after OnDelete.
	OnAdd(entry Entry)
	// OnUpdate is told of new content of a URI the handler holds: old is
	// the entry last told, new the one Lookup serves now. A read that
	// confirms the same content is not told.
	OnUpdate(old, new Entry)
	// OnDelete is told when Lookup no longer serves a URI the handler
	// holds: last is the entry last told, d says why.
	OnDelete(last Entry, d Deletion)
}

// Deletion says why a URI's entry is no longer served.
type Deletion struct {
	// Refusal is what Lookup now answers for the URI:
	//   - LookupTombstonePending: the server said not found; the deletion
	//     is not confirmed yet. If the server has the URI again, OnAdd
	//     follows; if a catalog confirms the deletion, nothing more is told
	//     (the outbox's tombstone entry carries that evidence).
	//   - LookupTombstoned: the deletion is confirmed; Evidence says how.
	//   - LookupQuarantined: the server's newest content was refused by the
	//     content guard; OnAdd follows once content passes again.
	//   - LookupRevoked: the subject, or the version, was revoked.
	//   - LookupForbidden: the version now current was read for another
	//     subject.
	//   - LookupNoVersion: the version was evicted (Forget).
	Refusal LookupRefusal
	// Evidence is what confirmed a deletion told as LookupTombstoned;
	// nil otherwise.
	Evidence *ledger.DeletionEvidence
}

// ResourceHandlerFuncs is a ResourceHandler made of functions; a nil one is
// not called.
type ResourceHandlerFuncs struct {
	AddFunc    func(entry Entry)
	UpdateFunc func(old, new Entry)
	DeleteFunc func(last Entry, d Deletion)
}

// OnAdd calls AddFunc if it is set.
func (f ResourceHandlerFuncs) OnAdd(entry Entry) {
	if f.AddFunc != nil {
		f.AddFunc(entry)
	}
}

// OnUpdate calls UpdateFunc if it is set.
func (f ResourceHandlerFuncs) OnUpdate(old, new Entry) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(old, new)
	}
}

// OnDelete calls DeleteFunc if it is set.
func (f ResourceHandlerFuncs) OnDelete(last Entry, d Deletion) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(last, d)
	}
}

// changeHook is told, after the write, of a write of key that moved its
// current version, with the evidence of a deletion the write confirmed. It
// runs on the writer's goroutine and must not block.
type changeHook func(key string, ev *ledger.DeletionEvidence)

// movedCurrent tells the engine's change hook, if any, of a write of key
// that left next over cur, when it moved the current version.
func (e *Engine) movedCurrent(key string, cur, next *ledger.Record, entries []OutboxEntry) {
	hook := e.changed.Load()
	if hook == nil || next == nil {
		return
	}
	var was *ledger.StoredVersion
	if cur != nil {
		was = cur.Current
	}
	if was == next.Current {
		return
	}
	(*hook)(key, tombstoneEvidence(entries))
}

// tombstoneEvidence is the evidence of the tombstone among entries, if any.
func tombstoneEvidence(entries []OutboxEntry) *ledger.DeletionEvidence {
	for i := range entries {
		if entries[i].Reason == ledger.InvalidateTombstoned && entries[i].Evidence != nil {
			ev := *entries[i].Evidence
			return &ev
		}
	}
	return nil
}

// sweep is a delivery that compares every key of keys (nil: every key the
// subject may be served) with what the handler was told, then closes done.
type sweep struct {
	keys []string
	done chan struct{}
}

// markChanged queues key for the handler: what Lookup serves for it may
// have changed. ev is the evidence of a deletion confirmed with the
// change, if any.
func (c *Client) markChanged(key string, ev *ledger.DeletionEvidence) {
	q := &c.errs
	q.mu.Lock()
	if prev, queued := q.marked[key]; queued {
		if ev != nil || prev == nil {
			q.marked[key] = ev
		}
		q.mu.Unlock()
		return
	}
	q.marked[key] = ev
	q.items = append(q.items, event{key: key})
	q.mu.Unlock()
	q.wake()
}

// syncHandler queues a sweep of keys (nil: every key of the subject) and
// returns the channel closed once the handler was told of each.
func (c *Client) syncHandler(keys []string) <-chan struct{} {
	s := &sweep{keys: keys, done: make(chan struct{})}
	c.errs.add(event{sweep: s})
	return s.done
}

// handleMarked delivers the mark of key.
func (c *Client) handleMarked(key string) {
	q := &c.errs
	q.mu.Lock()
	ev := q.marked[key]
	delete(q.marked, key)
	q.mu.Unlock()
	c.tell(key, ev)
}

// handleSweep delivers a sweep: every key the handler was told of and
// every key Lookup may serve, or the sweep's keys.
func (c *Client) handleSweep(s *sweep) {
	defer close(s.done)
	keys := s.keys
	if keys == nil {
		cands, err := c.engine.candidates(c.ctx, c.opts.Subject, "")
		switch {
		case err != nil && c.ctx.Err() != nil:
			return // the client is closing: nothing is told any more
		case err != nil:
			c.report(errorf("tell the handler: %w", err))
		}
		for key := range c.told {
			cands = append(cands, key)
		}
		slices.Sort(cands)
		keys = slices.Compact(cands)
	}
	for _, key := range keys {
		c.deliver(event{key: key}) // a panic in the handler skips one key
	}
}

// tell compares what Lookup serves for key now with the entry last told
// and tells the handler the difference. It runs on the delivering
// goroutine, which alone touches c.told.
func (c *Client) tell(key string, ev *ledger.DeletionEvidence) {
	h := c.opts.Handler
	last, had := c.told[key]
	now, err := c.engine.Lookup(c.opts.Subject, key)
	if err != nil {
		refusal, ok := RefusalOf(err)
		switch {
		case !ok:
			c.report(errorf("tell the handler of %s: %w", key, err))
		case had:
			delete(c.told, key)
			d := Deletion{Refusal: refusal}
			if refusal == LookupTombstoned {
				d.Evidence = ev
			}
			h.OnDelete(last, d)
		}
		return
	}
	// What the handler was told is what it holds: a version with the same
	// contents tells it nothing and leaves that as it is, so that the old
	// entry of the next update is one it saw.
	switch {
	case !had:
		c.told[key] = now
		h.OnAdd(now)
	case now.Version.Digest != last.Version.Digest:
		c.told[key] = now
		h.OnUpdate(last, now)
	}
}
