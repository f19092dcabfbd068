// Package workqueue is a keyed work queue: dirty and processing sets, one worker per key at a time.
package workqueue

import (
	"container/heap"
	"sync"
	"time"
)

// Options configure a Queue; the zero value gives the defaults.
type Options struct {
	// Backoff gives the delay before the n-th consecutive rate-limited requeue of a key (n starts at 1).
	// nil: 5ms doubling to 1000s (like client-go's default item limiter).
	Backoff func(n int) time.Duration
}

// Queue hands keys to workers, one worker per key at a time. A key added
// any number of times before a worker takes it runs once; a key added while
// a worker has it runs once more after Done. Keys may also be added after a
// delay; all delays share one timer.
type Queue[K comparable] struct {
	backoff func(n int) time.Duration

	// mu protects every field below. Between its critical sections:
	//   - a key is in ready if and only if it is in dirty and not in
	//     processing, and it is in ready at most once. Get moves a key from
	//     ready to processing, so no two callers ever hold the same key; Done
	//     puts back a key that was added meanwhile, once however many Adds came.
	//   - waiting holds at most one entry per key (the earliest asked for),
	//     found through delayed; while waiting is not empty, timer is due at
	//     or before waiting[0].at, or a call of fire is on its way.
	//   - after shutdown, ready, dirty, waiting and delayed stay empty.
	mu         sync.Mutex
	nonEmpty   sync.Cond // on mu; signalled when ready gains a key, broadcast on shutdown
	ready      []K       // FIFO of keys for Get
	dirty      map[K]struct{}
	processing map[K]struct{}
	waiting    waitHeap[K]
	delayed    map[K]*delayedKey[K]
	seq        uint64      // orders delayed keys due at the same instant by when they were asked for
	timer      *time.Timer // calls fire; made by the first delayed add
	failures   map[K]int   // rate-limited requeues since the last Forget
	shutdown   bool
}

// New returns an empty queue.
func New[K comparable](opts Options) *Queue[K] {
	q := &Queue[K]{
		backoff:    opts.Backoff,
		dirty:      make(map[K]struct{}),
		processing: make(map[K]struct{}),
		delayed:    make(map[K]*delayedKey[K]),
		failures:   make(map[K]int),
	}
	if q.backoff == nil {
		q.backoff = defaultBackoff
	}
	q.nonEmpty.L = &q.mu
	return q
}

func defaultBackoff(n int) time.Duration {
	const base, limit = 5 * time.Millisecond, 1000 * time.Second
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Add marks k dirty. A key that is neither queued nor processing joins the
// end of the queue; a processing key is queued again by Done. Add is ignored
// after ShutDown.
func (q *Queue[K]) Add(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(k)
}

func (q *Queue[K]) addLocked(k K) {
	if q.shutdown {
		return
	}
	if _, ok := q.dirty[k]; ok {
		return
	}
	q.dirty[k] = struct{}{}
	if _, ok := q.processing[k]; ok {
		return
	}
	q.ready = append(q.ready, k)
	q.nonEmpty.Signal()
}

// AddAfter adds k once d has passed; d <= 0 is Add. A key keeps one pending
// delayed add, the one due first; the delay does not stop an Add meanwhile,
// and when it is due it is an Add like any other. Ignored after ShutDown.
func (q *Queue[K]) AddAfter(k K, d time.Duration) {
	if d <= 0 {
		q.Add(k)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	e, ok := q.delayed[k]
	switch {
	case !ok:
		q.seq++
		e = &delayedKey[K]{key: k, at: at, seq: q.seq}
		heap.Push(&q.waiting, e)
		q.delayed[k] = e
	case at.Before(e.at):
		q.seq++
		e.at, e.seq = at, q.seq
		heap.Fix(&q.waiting, e.index)
	default:
		return
	}
	if q.waiting[0] == e {
		q.armLocked()
	}
}

// armLocked makes the timer due when the first delayed key is.
func (q *Queue[K]) armLocked() {
	d := time.Until(q.waiting[0].at)
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
		return
	}
	q.timer.Reset(d)
}

// fire adds the delayed keys that are due. A Reset racing with a firing
// timer can call it when nothing is due; it then only re-arms the timer.
func (q *Queue[K]) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for len(q.waiting) > 0 && !q.waiting[0].at.After(now) {
		e := heap.Pop(&q.waiting).(*delayedKey[K])
		delete(q.delayed, e.key)
		q.addLocked(e.key)
	}
	if len(q.waiting) > 0 {
		q.armLocked()
	}
}

// AddRateLimited adds k after Backoff(n), n counting the calls for k since
// the last Forget. Ignored after ShutDown.
func (q *Queue[K]) AddRateLimited(k K) {
	q.mu.Lock()
	if q.shutdown {
		q.mu.Unlock()
		return
	}
	q.failures[k]++
	n := q.failures[k]
	q.mu.Unlock()
	q.AddAfter(k, q.backoff(n)) // Backoff is the caller's code: not under mu
}

// Forget resets k's count of rate-limited requeues.
func (q *Queue[K]) Forget(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, k)
}

// NumRequeues returns the number of rate-limited requeues of k since the last Forget.
func (q *Queue[K]) NumRequeues(k K) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[k]
}

// Get waits for a key, marks it processing and returns it; the caller must
// call Done with it. Once the queue is shut down Get returns shutdown true
// at once, for callers already waiting too.
func (q *Queue[K]) Get() (k K, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.shutdown {
		q.nonEmpty.Wait()
	}
	if q.shutdown {
		return k, true
	}
	k = q.ready[0]
	var zero K
	q.ready[0] = zero
	q.ready = q.ready[1:]
	q.processing[k] = struct{}{}
	delete(q.dirty, k)
	return k, false
}

// Done ends the processing of k. If k was added meanwhile, it is queued
// again. Done of a key that is not processing does nothing.
func (q *Queue[K]) Done(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.processing[k]; !ok {
		return
	}
	delete(q.processing, k)
	if _, ok := q.dirty[k]; ok {
		q.ready = append(q.ready, k)
		q.nonEmpty.Signal()
	}
}

// ShutDown drops queued and delayed keys, makes every Get return shutdown
// true and every later add a no-op. Keys being processed may still be
// passed to Done. ShutDown is idempotent.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	q.shutdown = true
	q.ready = nil
	clear(q.dirty)
	q.waiting = nil
	clear(q.delayed)
	if q.timer != nil {
		q.timer.Stop()
	}
	q.nonEmpty.Broadcast()
}

// Len returns the number of keys ready for Get.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// Pending returns the number of keys waiting for a delay.
func (q *Queue[K]) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// delayedKey is a key waiting in the heap until at.
type delayedKey[K comparable] struct {
	key   K
	at    time.Time
	seq   uint64
	index int // in the heap
}

// waitHeap orders delayed keys by when they are due, then by seq.
type waitHeap[K comparable] []*delayedKey[K]

func (h waitHeap[K]) Len() int { return len(h) }

func (h waitHeap[K]) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}

func (h waitHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *waitHeap[K]) Push(x any) {
	e := x.(*delayedKey[K])
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *waitHeap[K]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
