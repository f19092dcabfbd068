package mcpsync

import (
	"container/heap"
	"sync"
	"time"
)

// schedule drives the revalidation and poll reads of every watched URI of
// a Client from one goroutine and one timer: a heap of next-due times, one
// entry per watch, instead of a goroutine and a timer per watch.
type schedule struct {
	mu    sync.Mutex // protects due and byKey
	due   dueHeap
	byKey map[string]*dueEntry
	// wake holds a token when the earliest entry changed, so the loop
	// resets its timer.
	wake chan struct{}
}

// dueEntry is the next periodic read of one watched key.
type dueEntry struct {
	key      string
	at       time.Time
	interval time.Duration
	trigger  Trigger
	index    int // in due; -1 once removed
}

func (s *schedule) init() {
	s.byKey = make(map[string]*dueEntry)
	s.wake = make(chan struct{}, 1)
}

// set schedules key's periodic read every interval (jittered by the
// caller), the first one at first from now, replacing what key had.
func (s *schedule) set(key string, first, interval time.Duration, trigger Trigger) {
	at := time.Now().Add(first)
	s.mu.Lock()
	if e := s.byKey[key]; e != nil && e.index >= 0 {
		heap.Remove(&s.due, e.index)
	}
	e := &dueEntry{key: key, at: at, interval: interval, trigger: trigger}
	s.byKey[key] = e
	heap.Push(&s.due, e)
	earliest := s.due[0] == e
	s.mu.Unlock()
	if earliest {
		s.poke()
	}
}

// remove stops key's periodic reads.
func (s *schedule) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byKey[key]; e != nil {
		if e.index >= 0 { // else taken by the loop, which drops it
			heap.Remove(&s.due, e.index)
		}
		delete(s.byKey, key)
	}
}

func (s *schedule) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next returns when the earliest entry is due, and false when there is
// none.
func (s *schedule) next() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.due) == 0 {
		return time.Time{}, false
	}
	return s.due[0].at, true
}

// takeDue removes and returns the entries due at now; they are
// rescheduled with reschedule once their reads were requested.
func (s *schedule) takeDue(now time.Time) []*dueEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var taken []*dueEntry
	for len(s.due) > 0 && !s.due[0].at.After(now) {
		taken = append(taken, heap.Pop(&s.due).(*dueEntry))
	}
	return taken
}

// reschedule puts e back, due after from now, unless key was removed or
// set anew since e was taken.
func (s *schedule) reschedule(e *dueEntry, after time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey[e.key] != e {
		return
	}
	e.at = time.Now().Add(after)
	heap.Push(&s.due, e)
}

// runSchedule marks the key of every entry as it falls due (Client.tick),
// until the client closes. Jitter is drawn outside the schedule's lock, as
// Client.jittered takes Client.mu, which set and remove may be called under.
func (c *Client) runSchedule() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		at, ok := c.sched.next()
		timer.Stop()
		var fire <-chan time.Time
		if ok {
			timer.Reset(time.Until(at))
			fire = timer.C
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.sched.wake:
			continue
		case <-fire:
		}
		for _, e := range c.sched.takeDue(time.Now()) {
			c.tick(e.key, e.trigger)
			c.sched.reschedule(e, c.jittered(e.interval))
		}
	}
}

// dueHeap orders entries by due time.
type dueHeap []*dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	e := x.(*dueEntry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
