package ledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// The memory ledger: the embedded default, one process's ledger in memory.
//
// It never blocks on I/O, so a context can only have ended before a call:
// each method then refuses, like a durable ledger's, so that a caller's
// cancellation means the same on every ledger.

var (
	_ Index    = (*memoryLedger)(nil)
	_ Batching = (*memoryLedger)(nil)
)

// NewMemory returns a Ledger kept in memory; opts may be nil.
func NewMemory(opts *Options) Ledger {
	return &memoryLedger{
		records:   make(map[string]*Record),
		counters:  make(map[Counter]uint64),
		revoked:   make(map[string]RevokedSubject),
		consumers: make(map[string]uint64),
		retain:    opts.Retention(),
		out:       outboxLog{first: 1},
		exports:   make(map[*exportView]struct{}),
		bySubject: make(map[string]map[string]struct{}),
		unknown:   make(map[string]struct{}),
		slots:     make(map[string]*memSlot),
	}
}

// No method of the memory ledger holds its lock for work proportional to the
// whole ledger: Range and Export visit the keys in chunks of ledgerChunk,
// releasing the lock between chunks, and the passes the engine makes over
// every record (a revocation's sweep, a new session's end of unknown
// closes) read indexes kept up to date by each write instead (Index).
type memoryLedger struct {
	mu sync.Mutex // protects every field below
	// records holds each key's record: one a caller stored, never modified,
	// or one of the ledger's private copies (memSlot), which only the
	// ledger sees and which it hands out as an immutable copy (publish).
	records  map[string]*Record
	keys     keyIndex           // the keys of records, in order
	counters map[Counter]uint64 // last value handed out
	revoked  map[string]RevokedSubject
	// revokeGen is RevokedGeneration: how many subjects joined revoked.
	// It is written under mu and read without it: every accept reads it.
	revokeGen atomic.Uint64
	joined    []string // revoked subjects in the order they joined; len == revokeGen
	// slots holds the private copy of every key the ledger wrote in place
	// (memTx), for the key's next write.
	slots map[string]*memSlot
	// draft is where a write in place is built, and scratch the room of its
	// outbox entries; both are reused by the next one.
	draft   memSlot
	scratch []OutboxEntry
	tx      memTx // the write in place under way
	// exports are the exports in progress; each keeps the record, as of
	// its instant, of every key written since.
	exports map[*exportView]struct{}
	// bySubject maps a subject to the keys whose record a revocation of it
	// changes (subjectsOf); unknown holds the keys in UNSUBSCRIBE_UNKNOWN.
	bySubject map[string]map[string]struct{}
	unknown   map[string]struct{}
	out       outboxLog
	consumers map[string]uint64 // acknowledged position of each consumer
	lowest    uint64            // minPosition(consumers), kept as they move
	retain    uint64            // entries kept at most
	dropped   uint64            // entries the bound dropped unpassed
	droppedTo uint64            // newest of them
	// appended is made by the first WaitOutbox that sleeps and closed by
	// the next append; nil while nobody waits, so an append with no waiter
	// allocates nothing for it.
	appended chan struct{}
}

// storeLocked stores r under key, keeping what the exports in progress and
// the indexes need.
func (l *memoryLedger) storeLocked(key string, r *Record) {
	old, known := l.records[key]
	l.keepLocked(key, old)
	if !known {
		l.keys.add(key)
	}
	l.records[key] = r
	l.indexLocked(key, old, r)
}

// keepLocked hands old, the record of key about to be replaced, to every
// export in progress that has not kept the key's record yet.
func (l *memoryLedger) keepLocked(key string, old *Record) {
	if len(l.exports) == 0 {
		return
	}
	for v := range l.exports {
		if _, kept := v.before[key]; !kept {
			v.before[key] = l.publishLocked(old)
		}
	}
}

// indexLocked moves key in the indexes from where old put it to where r
// puts it.
func (l *memoryLedger) indexLocked(key string, old, r *Record) {
	if r.State == StateUnsubscribeUnknown {
		l.unknown[key] = struct{}{}
	} else if old != nil && old.State == StateUnsubscribeUnknown {
		delete(l.unknown, key)
	}
	if sameSubjects(old, r) {
		return
	}
	was, is := subjectsOf(old), subjectsOf(r)
	for _, s := range was {
		if !slices.Contains(is, s) {
			keys := l.bySubject[s]
			delete(keys, key)
			if len(keys) == 0 {
				delete(l.bySubject, s)
			}
		}
	}
	for _, s := range is {
		keys := l.bySubject[s]
		if keys == nil {
			keys = make(map[string]struct{})
			l.bySubject[s] = keys
		}
		keys[key] = struct{}{}
	}
}

func (l *memoryLedger) SubjectKeys(ctx context.Context, subject string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	keys := slices.Collect(maps.Keys(l.bySubject[subject]))
	l.mu.Unlock()
	slices.Sort(keys)
	return keys, nil
}

func (l *memoryLedger) UnknownCloses(ctx context.Context) ([]string, []*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := slices.Sorted(maps.Keys(l.unknown))
	recs := make([]*Record, len(keys))
	for i, k := range keys {
		recs[i] = l.publishLocked(l.records[k])
	}
	return keys, recs, nil
}

func (l *memoryLedger) RevokedAfter(ctx context.Context, gen uint64) ([]string, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.revokeGen.Load()
	if gen > now {
		return nil, 0, fmt.Errorf("mcpsync: revoked generation %d is ahead of the ledger's %d", gen, now)
	}
	return slices.Clone(l.joined[gen:]), now, nil
}

func (l *memoryLedger) Load(ctx context.Context, key string) (*Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	r := l.publishLocked(l.records[key])
	l.mu.Unlock()
	return r, nil
}

func (l *memoryLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *Record, entries []OutboxEntry) (uint64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[key].revision() != prev {
		return 0, false, nil
	}
	if _, err := Reserve(CounterOutbox, l.out.last, uint64(len(entries))); err != nil {
		return 0, false, err
	}
	l.storeLocked(key, next)
	if len(entries) == 0 {
		return 0, true, nil
	}
	var sub *SubscriptionInfo
	if next != nil {
		sub = next.Sub
	}
	first := l.out.last + 1
	for _, e := range entries {
		e.Seq = l.out.last + 1
		l.out.append(&e, sub)
	}
	l.trimLocked()
	l.wakeLocked()
	return first, true, nil
}

// LoadAll implements Batching: each key in turn, as Load.
func (l *memoryLedger) LoadAll(ctx context.Context, keys []string) ([]*Record, error) {
	return LoadEach(ctx, l, keys)
}

// CompareAndSwapAll implements Batching: each swap in turn, as
// CompareAndSwap (there is no commit to share). A key an earlier swap of
// the call named, and a revision that does not follow the one it
// replaces, are refused with an error, as on every ledger that takes
// batches.
func (l *memoryLedger) CompareAndSwapAll(ctx context.Context, swaps []Swap) []SwapResult {
	results := make([]SwapResult, len(swaps))
	seen := make(map[string]bool, len(swaps))
	for i, s := range swaps {
		r := &results[i]
		switch {
		case seen[s.Key]:
			r.Err = errorf("%s: written twice in one batch", s.Key)
		case s.Next == nil || s.Next.Revision != s.Prev+1:
			r.Err = errorf("%s: revision must go from %d to %d", s.Key, s.Prev, s.Prev+1)
		default:
			r.FirstSeq, r.OK, r.Err = l.CompareAndSwap(ctx, s.Key, s.Prev, s.Next, s.Entries)
		}
		seen[s.Key] = true
	}
	return results
}

// publishLocked returns r as a caller may hold it: r itself, or, for a
// private copy, an immutable copy of it. The copy is not kept: a key read
// after each write costs a copy each time, and none stays in memory.
func (l *memoryLedger) publishLocked(r *Record) *Record {
	if r == nil || r.slot == nil {
		return r
	}
	p := *r
	p.slot = nil
	p.Tickets = slices.Clone(r.Tickets)
	if p.Current == &r.slot.ver {
		v := *p.Current
		p.Current = &v
	}
	return &p
}

// wakeLocked wakes every WaitOutbox sleeping on the outbox.
func (l *memoryLedger) wakeLocked() {
	if l.appended != nil {
		close(l.appended)
		l.appended = nil
	}
}

// trimLocked discards what every consumer passed and what exceeds the
// retention bound, counting the latter when a consumer (or a consumer yet to
// come, if none is registered) had not passed it.
func (l *memoryLedger) trimLocked() {
	if len(l.consumers) > 0 {
		l.out.discardThrough(l.lowest)
	}
	if n := l.out.len(); n > l.retain {
		through := l.out.first + (n - l.retain) - 1
		l.dropped += through - l.out.first + 1
		l.droppedTo = through
		l.out.discardThrough(through)
	}
}

func (l *memoryLedger) Range(ctx context.Context, fn func(string, *Record) bool) error {
	keys := make([]string, 0, ledgerChunk)
	recs := make([]*Record, 0, ledgerChunk)
	for from := false; ; from = true {
		if err := ctx.Err(); err != nil {
			return err
		}
		var last string
		if len(keys) > 0 {
			last = keys[len(keys)-1]
		}
		l.mu.Lock()
		keys = l.keys.after(keys[:0], last, from, ledgerChunk)
		recs = recs[:0]
		for _, k := range keys {
			recs = append(recs, l.publishLocked(l.records[k]))
		}
		l.mu.Unlock()
		// fn runs without the lock: it may call back into the ledger.
		for i, k := range keys {
			if !fn(k, recs[i]) {
				return nil
			}
		}
		if len(keys) < ledgerChunk {
			return nil
		}
	}
}

func (l *memoryLedger) Next(ctx context.Context, c Counter, n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("mcpsync: reserve 0 values of %s", c)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextLocked(c, n)
}

// nextLocked is Next under the ledger's lock.
func (l *memoryLedger) nextLocked(c Counter, n uint64) (uint64, error) {
	last, err := Reserve(c, l.counters[c], n)
	if err != nil {
		return 0, err
	}
	l.counters[c] = last
	return last - n + 1, nil
}

func (l *memoryLedger) Revoke(ctx context.Context, r RevokedSubject) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if _, known := l.revoked[r.Subject]; !known {
		l.revokeGen.Add(1)
		l.joined = append(l.joined, r.Subject)
	}
	l.revoked[r.Subject] = r
	l.mu.Unlock()
	return nil
}

func (l *memoryLedger) Revoked(ctx context.Context) ([]RevokedSubject, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	all := slices.Collect(maps.Values(l.revoked))
	l.mu.Unlock()
	return sortRevoked(all), nil
}

func (l *memoryLedger) RevokedGeneration(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return l.revokeGen.Load(), nil
}

func (l *memoryLedger) Outbox(ctx context.Context, after uint64, max int) ([]OutboxEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max64(after+1, l.out.first)
	if from > l.out.last {
		return nil, nil
	}
	n := l.out.last - from + 1
	if max > 0 && n > uint64(max) {
		n = uint64(max)
	}
	out := make([]OutboxEntry, 0, n)
	for seq := from; seq < from+n; seq++ {
		out = append(out, l.out.at(seq))
	}
	return out, nil
}

func (l *memoryLedger) Ack(ctx context.Context, consumer string, seq uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seq = min(seq, l.out.last)
	pos, known := l.consumers[consumer]
	if !known {
		pos = l.out.first - 1
	}
	l.consumers[consumer] = max64(pos, seq)
	l.lowest = minPosition(l.consumers)
	l.trimLocked()
	return nil
}

func (l *memoryLedger) OutboxState(ctx context.Context) (OutboxState, error) {
	if err := ctx.Err(); err != nil {
		return OutboxState{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked(), nil
}

func (l *memoryLedger) stateLocked() OutboxState {
	return OutboxState{
		Last: l.out.last, First: l.out.first, Dropped: l.dropped, DroppedThrough: l.droppedTo,
		Consumers: maps.Clone(l.consumers),
	}
}

func (l *memoryLedger) WaitOutbox(ctx context.Context, after uint64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		if l.out.last > after {
			l.mu.Unlock()
			return nil
		}
		if l.appended == nil {
			l.appended = make(chan struct{})
		}
		ch := l.appended
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Export reads the ledger as of the instant it registers its view: the
// counters, the revoked subjects, the outbox (a view of its chunks, whose
// entries never change) and, under the same lock, the view that from then
// on keeps the record of every key written before the export reads it. The
// records are then read ledgerChunk keys at a time, releasing the lock
// between chunks, each from the view if it was written since the instant.
func (l *memoryLedger) Export(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	v := &exportView{before: make(map[string]*Record)}
	l.mu.Lock()
	l.exports[v] = struct{}{}
	snap := Snapshot{
		Schema:   SchemaSnapshot,
		Counters: maps.Clone(l.counters),
		State:    l.stateLocked(),
	}
	revoked := slices.Collect(maps.Values(l.revoked))
	out := l.out.view()
	n := len(l.records)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.exports, v)
		l.out.unview()
		l.mu.Unlock()
	}()
	snap.Revoked = sortRevoked(revoked)
	snap.Outbox = out.entries()
	// Records handed out are immutable, so the snapshot shares them.
	snap.Records = make(map[string]*Record, n)
	keys := make([]string, 0, ledgerChunk)
	for from := false; ; from = true {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, err
		}
		var last string
		if len(keys) > 0 {
			last = keys[len(keys)-1]
		}
		l.mu.Lock()
		keys = l.keys.after(keys[:0], last, from, ledgerChunk)
		for _, k := range keys {
			r, written := v.before[k]
			if !written {
				r = l.publishLocked(l.records[k])
			}
			if r != nil {
				snap.Records[k] = r
			}
		}
		l.mu.Unlock()
		if len(keys) < ledgerChunk {
			return snap, nil
		}
	}
}

func (l *memoryLedger) Restore(ctx context.Context, snap Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	snap, err := snap.ForRestore()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.records) > 0 || len(l.counters) > 0 || len(l.revoked) > 0 || l.out.last > 0 || len(l.consumers) > 0 {
		return ErrLedgerNotEmpty
	}
	for _, k := range slices.Sorted(maps.Keys(snap.Records)) {
		l.storeLocked(k, snap.Records[k])
	}
	maps.Copy(l.counters, snap.Counters)
	for _, r := range snap.Revoked {
		if _, known := l.revoked[r.Subject]; !known {
			l.joined = append(l.joined, r.Subject)
		}
		l.revoked[r.Subject] = r
	}
	l.revokeGen.Store(uint64(len(l.revoked)))
	maps.Copy(l.consumers, snap.State.Consumers)
	l.lowest = minPosition(l.consumers)
	l.dropped, l.droppedTo = snap.State.Dropped, snap.State.DroppedThrough
	l.out = outboxLog{first: snap.State.Last + 1, last: snap.State.Last, views: l.out.views}
	if len(snap.Outbox) > 0 {
		l.out.first, l.out.last = snap.Outbox[0].Seq, snap.Outbox[0].Seq-1
	}
	// Entries are packed against a copy of their record's subscription,
	// made once per key: the records are the caller's, and what it does
	// with them after this must not change what the outbox says.
	subs := make(map[string]*SubscriptionInfo)
	for i := range snap.Outbox {
		e := &snap.Outbox[i]
		sub, ok := subs[e.URI]
		if r := l.records[e.URI]; !ok && r != nil && r.Sub != nil {
			c := *r.Sub
			sub = &c
			subs[e.URI] = sub
		}
		l.out.append(e, sub)
	}
	l.out.last = snap.State.Last
	l.trimLocked()
	l.wakeLocked()
	return nil
}

// NewMemoryFrom returns a memory ledger holding snap (Restore).
func NewMemoryFrom(snap Snapshot) (Ledger, error) {
	l := NewMemory(nil)
	if err := Restore(context.Background(), l, snap); err != nil {
		return nil, err
	}
	return l, nil
}
