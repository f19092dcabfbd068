package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/workqueue"
	"github.com/mcpsync/mcpsync/ledger"
)

// The read path. A ticket the engine hands out (a notification's read, a
// revalidation, a follow-up) is queued by its key in the reads queue, which
// its own workers drain: a read that hangs on the server never holds a pass
// of the controller, and one key's reads go out one at a time, in order.
// A queued read waits CoalesceWindow first (a Subscribe's first read
// does not: its caller waits for it), so that duplicate pulses arriving
// meanwhile are covered by it (the engine has ConfirmSends, which
// Connect turns on); reads a reconnect asks for are paced by a window
// of reads out at once (readWindow), and by ReconnectReads when set. A read that gets no answer (a transport error, a timeout)
// is asked for again after the retry policy's backoff while its
// subscription is open, so the pulse that asked for it is not lost.

// readWorkers is how many reads are out at once.
const readWorkers = 64

// readsOf holds, per key, the tickets waiting to be sent and the read that
// got no answer, to be asked for again.
type readsOf struct {
	mu      sync.Mutex // protects pending
	pending map[string]*keyReads
}

type keyReads struct {
	next   []ledger.Ticket
	failed *ledger.Ticket
}

// newReadQueue makes the read path's queue.
func (c *Client) newReadQueue() {
	c.readq = workqueue.New[string](workqueue.Options{Backoff: c.retry.delay})
	c.reads.pending = make(map[string]*keyReads)
}

// dispatch queues the read of ticket t.
func (c *Client) dispatch(t ledger.Ticket) {
	c.reads.mu.Lock()
	kr := c.reads.pending[t.URI]
	if kr == nil {
		kr = &keyReads{}
		c.reads.pending[t.URI] = kr
	}
	kr.next = append(kr.next, t)
	c.reads.mu.Unlock()
	delay := c.opts.CoalesceWindow
	switch t.Trigger {
	case ledger.TriggerInitial:
		delay = 0 // a caller waits for it, and no pulse came before it to cover
	case ledger.TriggerReconnect:
		delay = max(delay, c.paced.Reserve().Delay())
	}
	c.readq.AddAfter(t.URI, delay)
}

// readPass sends key's next read: a queued ticket, or the read that got no
// answer, asked for again. A reconnect's read waits for room in the
// reconnect window.
func (c *Client) readPass(key string) {
	t, ok := c.nextRead(key)
	if !ok {
		return
	}
	if t.Trigger == ledger.TriggerReconnect {
		if !c.window.take() {
			c.reads.mu.Lock()
			kr := c.reads.pending[key]
			if kr == nil {
				kr = &keyReads{}
				c.reads.pending[key] = kr
			}
			kr.next = append([]ledger.Ticket{t}, kr.next...)
			c.reads.mu.Unlock()
			c.readq.AddAfter(key, windowWait)
			return
		}
	}
	out, err := c.read(c.ctx, t)
	if t.Trigger == ledger.TriggerReconnect {
		c.window.give(!errors.Is(err, errReadFailed))
	}
	switch {
	case out.FollowUp != nil:
		c.readq.Forget(key)
		c.dispatch(*out.FollowUp)
	case errors.Is(err, errReadFailed) && c.ctx.Err() == nil:
		c.reads.mu.Lock()
		kr := c.reads.pending[key]
		if kr == nil {
			kr = &keyReads{}
			c.reads.pending[key] = kr
		}
		kr.failed = &t
		c.reads.mu.Unlock()
		c.readq.AddRateLimited(key)
	default:
		c.readq.Forget(key)
	}
	c.reads.mu.Lock()
	more := c.reads.pending[key] != nil && len(c.reads.pending[key].next) > 0
	c.reads.mu.Unlock()
	if more {
		c.readq.Add(key)
	}
}

// nextRead takes key's next read to send.
func (c *Client) nextRead(key string) (ledger.Ticket, bool) {
	c.reads.mu.Lock()
	kr := c.reads.pending[key]
	if kr == nil {
		c.reads.mu.Unlock()
		return ledger.Ticket{}, false
	}
	if len(kr.next) > 0 {
		t := kr.next[0]
		kr.next = kr.next[1:]
		if len(kr.next) == 0 && kr.failed == nil {
			delete(c.reads.pending, key)
		}
		c.reads.mu.Unlock()
		return t, true
	}
	failed := kr.failed
	delete(c.reads.pending, key)
	c.reads.mu.Unlock()
	if failed == nil {
		return ledger.Ticket{}, false
	}
	t, ok, err := c.engine.RequestRead(failed.URI, failed.Trigger)
	if writeFailed(err) {
		c.owe(failed.URI, failed.Trigger, false, err) // asked again by its passes
	}
	return t, err == nil && ok
}

// windowWait is how long a reconnect's read waits before it looks for
// room in the window again.
const windowWait = 10 * time.Millisecond

// readWindow bounds the reads a reconnect has out at once, the way TCP
// bounds a connection's: it starts small, grows by one with every read the
// server answers and halves at every one it does not (an error, a
// timeout), so that a restarted server gets reads as fast as it answers
// them, and no faster.
type readWindow struct {
	mu       sync.Mutex // protects limit and inflight
	limit    int
	inflight int
}

const (
	windowStart = 8
	windowMax   = readWorkers
)

func (w *readWindow) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.limit == 0 {
		w.limit = windowStart
	}
	if w.inflight >= w.limit {
		return false
	}
	w.inflight++
	return true
}

func (w *readWindow) give(answered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	if answered {
		w.limit = min(w.limit+1, windowMax)
	} else {
		w.limit = max(w.limit/2, 1)
	}
}

// failPending gives the engine back every queued read once the client is
// closed, so that another Client of the engine finds its read queue free.
func (c *Client) failPending() {
	c.reads.mu.Lock()
	pending := c.reads.pending
	c.reads.pending = make(map[string]*keyReads)
	c.reads.mu.Unlock()
	for _, kr := range pending {
		for _, t := range kr.next {
			_, _ = c.engine.Fail(t)
		}
	}
}

// read sends the read of ticket t on the session that issued it, and hands
// the answer to the fence. A read of a session that is gone is abandoned:
// the fence would refuse its answer anyway.
func (c *Client) read(ctx context.Context, t ledger.Ticket) (Outcome, error) {
	c.mu.Lock()
	conn, raw := c.conn, t.URI
	if w := c.watches[t.URI]; w != nil {
		raw = w.raw
	}
	c.mu.Unlock()
	if conn.gen != t.SessionGeneration {
		defer c.settled.notify(t.URI)
		next, err := c.engine.Fail(t)
		c.oweFollowUp(err)
		return Outcome{FollowUp: next}, err
	}
	c.engine.Sending(t)
	res, err := c.readResource(ctx, conn, raw)
	var result ReadResult
	refused, answered := refusedRead(err)
	switch {
	case err == nil:
		result = ReadResultFromMCP(res)
	case answered:
		result = refused
	default:
		c.metrics.read(t.Trigger, "FAILED")
		c.failedRead(conn, t, err)
		next, ferr := c.engine.Fail(t)
		c.oweFollowUp(ferr)
		c.progress.notify()
		c.settled.notify(t.URI)
		return Outcome{FollowUp: next}, errors.Join(errorf("%w: %s: %w", errReadFailed, raw, err), ferr)
	}
	c.answered(t.URI)
	out, err := c.engine.FinishRead(t, result)
	switch {
	case out.Accepted:
		c.settle(t)
	case writeFailed(err):
		// The answer could not be written (the ledger failed): what it
		// said is lost, and the key owes the read again.
		c.owe(t.URI, t.Trigger, false, err)
	}
	c.oweFollowUp(out.FollowUpErr)
	c.noteRefusal(t.URI, out, err)
	if errors.Is(err, ErrNotLeaseholder) {
		c.report(err) // refused by the ledger: another worker took key
	}
	c.progress.notify()
	c.settled.notify(t.URI)
	c.metrics.read(t.Trigger, outcomeOf(out))
	if c.opts.OnOutcome != nil {
		c.errs.pushOutcome(out)
	}
	if c.opts.Handler != nil && out.Accepted && out.Decision() != DecisionUnchanged {
		// A write in place on the memory ledger tells no change hook.
		var ev *ledger.DeletionEvidence
		if out.Tombstone != nil {
			ev = &out.Tombstone.Evidence
		}
		c.markChanged(t.URI, ev)
	}
	return out, err
}

// readResource sends the resources/read of raw on conn, bounded by ctx and
// RequestTimeout. A caller's deadline that comes first bounds it alone: a
// context of the timeout would change nothing but cost its allocations.
func (c *Client) readResource(ctx context.Context, conn *connection, raw string) (*mcp.ReadResourceResult, error) {
	req := mcp.ReadResourceRequest{}
	req.Params.URI = raw
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.opts.RequestTimeout {
		return conn.mc.ReadResource(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	return conn.mc.ReadResource(ctx, req)
}

// refusedRead returns the result a read's error stands for when the server
// answered it, but not with contents: the server has no such resource, or
// the answer passed a limit (refused with a receipt; the session goes on).
// ok is false for a read that got no answer.
func refusedRead(err error) (result ReadResult, ok bool) {
	if err == nil {
		return ReadResult{}, false
	}
	if rpc, ok := errors.AsType[*RPCError](err); ok && rpc.ResourceNotFound() {
		return NotFoundResult(), true
	}
	if lim, ok := errors.AsType[*LimitError](err); ok && lim.Method == string(mcp.MethodResourcesRead) {
		return limitResult(lim), true
	}
	return ReadResult{}, false
}

// awaitRead waits, bounded by ctx and RequestTimeout, until key has no
// read queued or in flight, and reports whether the server said it has no
// such resource.
func (c *Client) awaitRead(ctx context.Context, key string) (notFound bool) {
	// A timer of its own, made only once there is something to wait for,
	// rather than a context derived from the caller's: ten thousand
	// Subscribes at once would each register a child with one parent.
	var timeout <-chan time.Time
	for {
		wake := c.settled.wait(key)
		sub, err := c.engine.Subscription(key)
		if err != nil {
			return false
		}
		switch sub.State {
		case ledger.StateUpdateSeen, ledger.StateReadPending:
		default:
			return sub.State == ledger.StateTombstonePending || sub.State == ledger.StateTombstoned
		}
		if timeout == nil {
			t := time.NewTimer(c.opts.RequestTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wake:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		case <-c.ctx.Done():
			return false
		}
	}
}

// Read sends one fenced read of a subscribed URI now, outside the
// coalescing queue, and returns what the fence decided.
func (c *Client) Read(ctx context.Context, uri string) (Outcome, error) {
	if c.isClosed() {
		return Outcome{}, ErrClientClosed
	}
	t, err := c.engine.IssueTicket(uri, ledger.TriggerRevalidate)
	if err != nil {
		return Outcome{}, err
	}
	out, err := c.read(ctx, t)
	if out.FollowUp != nil {
		// A pulse that waited for room under the read cap: the Client sends
		// it, like every queued read.
		c.dispatch(*out.FollowUp)
	}
	return out, err
}

// Lookup returns the current version of uri if it may be served to the
// client's subject (Engine.Lookup).
//
// The entry's Degraded says why the copy is not being kept fresh now, if it
// is not: the session is lost, or the URI's reads keep failing.
func (c *Client) Lookup(uri string, opts ...LookupOption) (Entry, error) {
	entry, err := c.engine.Lookup(c.opts.Subject, uri, opts...)
	if err == nil {
		c.degrade(&entry)
	}
	return entry, err
}

// degrade sets entry.Degraded: why the copy is not being kept fresh now.
func (c *Client) degrade(entry *Entry) {
	entry.Degraded = c.degradedReason(entry.Version.URI)
	if age := time.Since(entry.ValidatedAt); entry.Degraded == "" && entry.StalenessBound > 0 && age > entry.StalenessBound {
		// Nothing has failed yet (a read may be hanging), but the copy
		// is already older than promised: say so.
		entry.Degraded = fmt.Sprintf("last confirmed %v ago, past its staleness bound of %v", age.Round(time.Millisecond), entry.StalenessBound)
	}
}
