package mcpsynctest

import (
	"maps"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// faultable reports whether notification faults apply to method. Protocol
// control notifications (subscriptions/acknowledged, progress, …) pass
// untouched, so a fault never breaks the handshake it is meant to test.
func faultable(method string) bool {
	return method == mcp.MethodNotificationResourceUpdated ||
		method == mcp.MethodNotificationResourcesListChanged
}

// SetDropRate makes each resources/updated and list_changed notification be
// dropped with probability p, drawn from the seed.
func (t *Transport) SetDropRate(p float64) {
	t.mu.Lock()
	t.dropRate = p
	t.mu.Unlock()
}

// SetDuplicateRate makes each resources/updated and list_changed
// notification be delivered twice with probability p, drawn from the seed.
func (t *Transport) SetDuplicateRate(p float64) {
	t.mu.Lock()
	t.dupRate = p
	t.mu.Unlock()
}

// DropNext drops the next n notifications for uri ("" matches any
// resources/updated or list_changed notification).
func (t *Transport) DropNext(uri string, n int) {
	t.mu.Lock()
	t.dropNext[uri] += n
	t.mu.Unlock()
}

// DuplicateNext delivers each of the next n notifications for uri twice.
func (t *Transport) DuplicateNext(uri string, n int) {
	t.mu.Lock()
	t.dupNext[uri] += n
	t.mu.Unlock()
}

// DelayNext holds the next notification for uri. With d > 0 it is delivered
// when a timer of d fires (virtual time under testing/synctest; the kit never
// sleeps); with d <= 0 it waits for ReleaseNotifications. Notifications that
// arrive meanwhile overtake it.
func (t *Transport) DelayNext(uri string, d time.Duration) {
	t.mu.Lock()
	t.delays = append(t.delays, delayRule{uri: uri, d: d})
	t.mu.Unlock()
}

// ReorderNext holds the next notification for uri and delivers it right
// after the notification that follows it, swapping the two.
func (t *Transport) ReorderNext(uri string) {
	t.mu.Lock()
	t.reorders[uri]++
	t.mu.Unlock()
}

// MapNotificationURIs rewrites the uri of every later resources/updated
// notification with f, before the other faults see it; f must be
// deterministic. With an f that changes only the encoding (%20 for a space,
// an upper-case scheme) it injects URI encoding confusion. nil stops it.
// Fault rules still match the URI the server sent.
func (t *Transport) MapNotificationURIs(f func(uri string) string) {
	t.mu.Lock()
	t.mapURI = f
	t.mu.Unlock()
}

// Held returns how many notifications DelayNext(…, 0) is holding.
func (t *Transport) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// ReleaseNotifications delivers, in arrival order, every notification that
// DelayNext(…, 0) is holding, and returns how many it released.
//
// After Close the held notifications are handed to the handler at once, on
// the caller's goroutine: a notification that was already on its way when
// its session ended, arriving late, as the old-session fault needs.
func (t *Transport) ReleaseNotifications() int {
	t.mu.Lock()
	held := t.held
	t.held = nil
	if len(held) > 0 {
		t.logf("release %d held notifications", len(held))
	}
	if !t.closed {
		t.enqueueLocked(held...)
		t.mu.Unlock()
		return len(held)
	}
	h := t.handler
	t.mu.Unlock()
	for _, n := range held {
		if h != nil {
			h(n)
		}
	}
	return len(held)
}

// takeLocked consumes one unit of a per-URI counter, preferring the exact
// URI over the "" wildcard.
func takeLocked(m map[string]int, uri string) bool {
	for _, k := range []string{uri, ""} {
		if m[k] > 0 {
			m[k]--
			return true
		}
	}
	return false
}

// receive runs on the inner transport's read loop. It decides the faults for
// one notification and only ever appends to queues, so it never blocks.
func (t *Transport) receive(n mcp.JSONRPCNotification) {
	uri, _ := n.Params.AdditionalFields["uri"].(string)
	mapped := uri
	t.mu.Lock()
	f := t.mapURI
	t.mu.Unlock()
	if f != nil && n.Method == mcp.MethodNotificationResourceUpdated {
		mapped = f(uri) // user code: called without t.mu
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.dropped {
		return
	}
	if !faultable(n.Method) {
		t.enqueueLocked(n)
		return
	}
	if mapped != uri {
		t.logf("rewrite %s uri=%q to %q", n.Method, uri, mapped)
		n.Params.AdditionalFields = maps.Clone(n.Params.AdditionalFields)
		n.Params.AdditionalFields["uri"] = mapped
	}
	// Both draws happen for every notification, so the fault of one
	// notification does not shift the random sequence of the next.
	dropDraw, dupDraw := t.rng.Float64(), t.rng.Float64()

	if takeLocked(t.dropNext, uri) || dropDraw < t.dropRate {
		t.logf("drop %s uri=%q", n.Method, uri)
		return
	}
	copies := []mcp.JSONRPCNotification{n}
	if takeLocked(t.dupNext, uri) || dupDraw < t.dupRate {
		t.logf("duplicate %s uri=%q", n.Method, uri)
		copies = append(copies, n)
	}
	for i, r := range t.delays {
		if r.uri != "" && r.uri != uri {
			continue
		}
		t.delays = slices.Delete(t.delays, i, i+1)
		if r.d <= 0 {
			t.logf("hold %s uri=%q until released", n.Method, uri)
			t.held = append(t.held, copies...)
			return
		}
		t.logf("delay %s uri=%q by %s", n.Method, uri, r.d)
		t.timers = append(t.timers, time.AfterFunc(r.d, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.closed {
				return
			}
			t.logf("deliver delayed %s uri=%q", n.Method, uri)
			t.enqueueLocked(copies...)
		}))
		return
	}
	if takeLocked(t.reorders, uri) {
		t.logf("hold %s uri=%q for reordering", n.Method, uri)
		t.reordered = append(t.reordered, copies...)
		return
	}
	t.enqueueLocked(copies...)
	if len(t.reordered) > 0 {
		t.logf("deliver %d reordered notifications", len(t.reordered))
		t.enqueueLocked(t.reordered...)
		t.reordered = nil
	}
}

func (t *Transport) enqueueLocked(ns ...mcp.JSONRPCNotification) {
	t.queue = append(t.queue, ns...)
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued notifications to the client's handler one at a time,
// without holding t.mu, until Close.
func (t *Transport) deliver() {
	defer close(t.loopDone)
	for {
		select {
		case <-t.done:
			return
		case <-t.wake:
		}
		for {
			t.mu.Lock()
			if len(t.queue) == 0 || t.closed {
				t.mu.Unlock()
				break
			}
			n := t.queue[0]
			t.queue = t.queue[1:]
			h := t.handler
			t.mu.Unlock()
			if h != nil {
				h(n)
			}
		}
	}
}
