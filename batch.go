package mcpsync

import (
	"sync"
	"sync/atomic"
	"time"
)

// Engine calls for many URIs at once.
//
// A worker that subscribes, resumes or re-reads thousands of URIs makes the
// same decisions for each; made one after another on a durable ledger,
// each waits for a commit of its own. These calls make them at once
// instead, so that they reach the ledger together and share its commits
// (group commit: one transaction and one fsync on the bolt ledger, one
// statement on PostgreSQL, for as many as arrive while the last was
// written), while each URI keeps its own result: a refusal refuses that URI
// only. The decisions are those of the call for one URI, with the same
// checks; only their timing differs.

// batchWidth bounds how many decisions a call for many URIs has under way
// at once.
const batchWidth = 64

// forEach runs fn(i) for each i below n: on a durable ledger from up to
// batchWidth goroutines at once, so that their writes arrive together; on
// the memory ledger, whose writes are made in place under its lock and
// never wait for a disk, one after another.
func (e *Engine) forEach(n int, fn func(i int)) {
	if e.mem != nil || n <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, batchWidth) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// SubscribeAll is Subscribe of each of rawURIs for subject, at once: it
// returns, for each, its subscription or its error, in order.
func (e *Engine) SubscribeAll(rawURIs []string, subject string) ([]Subscription, []error) {
	subs, errs := make([]Subscription, len(rawURIs)), make([]error, len(rawURIs))
	e.forEach(len(rawURIs), func(i int) { subs[i], errs[i] = e.Subscribe(rawURIs[i], subject) })
	return subs, errs
}

// Activation is the server's confirmation of one URI's subscription, as
// ActivateAll records it.
type Activation struct {
	URI  string
	Mode SubscriptionMode
	// Reason says why a subscription polls (SubscriptionInfo.ModeReason).
	Reason string
	// StalenessBound, when positive, is published with the activation
	// (PublishStalenessBound), in the same write.
	StalenessBound time.Duration
}

// ActivateAll is Activate of each of acts at once, each with its reason
// and staleness bound in the same write: it returns, for each, its
// subscription or its error, in order.
func (e *Engine) ActivateAll(acts []Activation) ([]Subscription, []error) {
	subs, errs := make([]Subscription, len(acts)), make([]error, len(acts))
	e.forEach(len(acts), func(i int) {
		a := acts[i]
		subs[i], errs[i] = e.activate(a.URI, a.Mode, a.Reason, a.StalenessBound)
	})
	return subs, errs
}

// ReadRequest is what RequestReads decided for one URI: when Send is set,
// the read of Ticket is to be sent now (and reported with Sending, and its
// answer with FinishRead or Fail); otherwise a read already in flight
// covers the request, or Err says why none is issued.
type ReadRequest struct {
	Ticket Ticket
	Send   bool
	Err    error
}

// RequestReads is RequestRead of each of rawURIs for trigger at once
// (after a reconnect, trigger reconnect): it returns, for each, its read
// request, in order. Tickets are issued, not sent: the caller sends them at
// the pace it chooses.
func (e *Engine) RequestReads(rawURIs []string, trigger Trigger) []ReadRequest {
	out := make([]ReadRequest, len(rawURIs))
	e.forEach(len(rawURIs), func(i int) {
		r := &out[i]
		r.Ticket, r.Send, r.Err = e.RequestRead(rawURIs[i], trigger)
	})
	return out
}
