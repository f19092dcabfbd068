package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/mcpsync/mcpsync/internal/workqueue"
	"github.com/mcpsync/mcpsync/ledger"
)

// The session controller, level-triggered like a Kubernetes controller.
//
// What the caller wants of each key is its desired record: Client.watches
// holds a watch for every key the caller watches (the spelling the server
// is asked with is data on it), and Client.epochs counts the caller's
// changes of each key. What the server and the engine have is observed
// state: the engine's record, read fresh on every pass, and what the
// connection told the server (its listen stream, the requests still out,
// the spellings to put right). Every event only marks a key dirty in one
// keyed work queue; a worker takes the key and runs syncKey, which compares
// the two and takes the next step. A key is never worked on by two workers
// at once, and a key marked while it is worked on is worked on again.
//
// Callers (Subscribe, Unsubscribe) change the desired record, mark the key
// and wait for the first pass that began after their change: their context
// bounds the wait, never the work.

// syncWorkers is how many keys are worked on at once. A pass may wait on
// the server (a resources/subscribe before 2026-07-28; never on a listen
// stream, whose answer marks the key), so this also bounds the requests
// the controller has out.
const syncWorkers = 64

// retryPolicy is the one backoff type of the session layer: it starts at
// initial, doubles, stops growing at max, and varies each wait by up to
// ±jitter of it. The client's own (RetryInitial, RetryMax, ±50%) paces a
// failed pass of a key, a read that got no answer, a put-right of the
// server and the rounds of a resume; the reconnect policy's paces healing
// (full jitter); a stream the server ended is re-established on one from a
// second to RevalidateEvery, and a refused stream is tried again on one
// from PollEvery to RevalidateEvery, without jitter.
type retryPolicy struct {
	initial, max time.Duration
	jitter       float64
}

// exponential returns a fresh backoff sequence of the policy.
func (p retryPolicy) exponential() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: p.initial, RandomizationFactor: p.jitter, Multiplier: 2, MaxInterval: p.max}
}

// delay is the wait before the n-th consecutive retry (n from 1).
func (p retryPolicy) delay(n int) time.Duration {
	d := p.initial
	for i := 1; i < n && d < p.max; i++ {
		d *= 2
	}
	d = min(d, p.max)
	return time.Duration(float64(d) * (1 + p.jitter*(2*rand.Float64()-1)))
}

// waiter is a caller waiting for the first pass over a key that begins at
// its epoch or later; done gets what the pass left.
type waiter struct {
	epoch uint64
	done  chan passResult // buffered: a pass never waits on a caller
}

// passResult is what one pass over a key left: the pass's failure (nil
// when it took its step) and the key's subscription as the pass left it.
type passResult struct {
	err    error
	sub    Subscription
	subErr error
}

// newQueue makes the controller's queue.
func (c *Client) newQueue() {
	c.queue = workqueue.New[string](workqueue.Options{Backoff: c.retry.delay})
	c.sessionq = workqueue.New[string](workqueue.Options{})
}

// serve starts n workers that run pass over the keys of q until it shuts
// down (Close shuts both of the client's queues down).
func (c *Client) serve(q *workqueue.Queue[string], n int, pass func(key string)) {
	for range n {
		c.goAsync(func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				pass(key)
				q.Done(key)
			}
		})
	}
}

// runPass runs one pass of syncKey over key, requeues it as the pass asks
// and tells the callers waiting on it. A failed pass is retried with the
// retry policy's backoff and told to OnError.
func (c *Client) runPass(key string) {
	c.mu.Lock()
	epoch := c.epochs[key]
	c.mu.Unlock()
	again, err := c.syncKey(key)
	// A pass that left its answer to the listen stream (errComing) is
	// marked by that answer: the callers waiting on it wait for the pass
	// the answer triggers.
	coming := errors.Is(err, errComing)
	if coming {
		err = nil
	}
	switch {
	case err != nil || c.leftToPutRight(key):
		// A spelling left to put right (its request failed) is retried
		// with the backoff too, without failing the caller's step.
		c.queue.AddRateLimited(key)
	case again > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, again)
	default:
		c.queue.Forget(key)
	}
	if coming {
		c.progress.notify()
		c.settled.notify(key)
		return
	}
	c.tellPassed(key, epoch, err)
	c.progress.notify()
	c.settled.notify(key)
}

// tellPassed tells the callers waiting for a pass over key at epoch or before
// what the pass left: err, and the key's subscription as it is now.
func (c *Client) tellPassed(key string, epoch uint64, err error) {
	var res passResult
	c.mu.Lock()
	told := len(c.waiters[key]) > 0
	c.mu.Unlock()
	if told {
		// Read before the next pass can change it: a caller gets what its
		// own pass left.
		res = passResult{err: err}
		res.sub, res.subErr = c.engine.Subscription(key)
	}
	c.mu.Lock()
	waiting := c.waiters[key][:0]
	for _, w := range c.waiters[key] {
		if w.epoch <= epoch {
			w.done <- res
		} else {
			waiting = append(waiting, w)
		}
	}
	if len(waiting) == 0 {
		delete(c.waiters, key)
	} else {
		c.waiters[key] = waiting
	}
	c.mu.Unlock()
}

// leftToPutRight reports whether the current connection has a spelling of
// key to put right that no request still out will mark it for.
func (c *Client) leftToPutRight(key string) bool {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	conn.mu.Lock()
	defer conn.mu.Unlock()
	for raw := range conn.putRights[key] {
		if !conn.held[raw] {
			return true
		}
	}
	return false
}

// wantLocked records a change of the caller's intent for key, c.mu held,
// and returns the waiter that the first pass to see the change tells.
func (c *Client) wantLocked(key string) *waiter {
	c.epochs[key]++
	w := &waiter{epoch: c.epochs[key], done: make(chan passResult, 1)}
	c.waiters[key] = append(c.waiters[key], w)
	return w
}

// mark has key worked on soon.
func (c *Client) mark(key string) { c.queue.Add(key) }

// awaitPass waits, bounded by ctx, for the pass w waits for, and returns
// what it left.
func (c *Client) awaitPass(ctx context.Context, key string, w *waiter) passResult {
	select {
	case res := <-w.done:
		return res
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	c.dropWaiter(key, w)
	select {
	case res := <-w.done: // the pass ended as the wait did
		return res
	default:
	}
	if ctx.Err() != nil {
		return passResult{err: ctx.Err()}
	}
	return passResult{err: ErrClientClosed}
}

// dropWaiter takes w off the callers waiting on key.
func (c *Client) dropWaiter(key string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiters[key] = slices.DeleteFunc(c.waiters[key], func(x *waiter) bool { return x == w })
	if len(c.waiters[key]) == 0 {
		delete(c.waiters, key)
	}
}

// syncKey takes key's next step toward what the caller wants of it. It
// returns how long until it must look again (0: not before an event marks
// it), or a failure, retried with the retry policy's backoff.
func (c *Client) syncKey(key string) (time.Duration, error) {
	c.mu.Lock()
	conn, closed, w := c.conn, c.closed, c.watches[key]
	lost := conn.lost
	var tick ledger.Trigger
	var untilTick time.Duration
	asked, owed := false, false
	if w != nil {
		tick, untilTick = c.dueTickLocked(w)
		asked, w.asked = w.asked, false
		owed = w.owed != ""
	}
	c.mu.Unlock()
	if untilTick > 0 {
		c.queue.AddAfter(key, untilTick) // the next periodic read
	}
	if closed {
		return 0, nil
	}
	// A spelling the server must be told about again is put right first;
	// its failure leaves it marked (runPass retries it) and stops the
	// caller's step only when it is the spelling the caller watches. A
	// lost session's server is told nothing: the next session starts from
	// nothing, and nothing changes while none is up.
	var failed map[string]bool
	var err error
	if !lost {
		failed, err = c.putRight(conn, key, w)
	}
	if w == nil {
		return 0, c.syncUnwatched(conn, key)
	}
	var again time.Duration
	if err != nil && !failed[w.raw] {
		c.reopenFailed(key, err) // Degraded while the server is being put right
		err = nil
	}
	if err == nil {
		again, err = c.syncWatched(conn, key, w, tick, asked, lost)
	}
	if err != nil {
		// Tried again by the next pass, with what this one was to do.
		c.mu.Lock()
		w.asked = w.asked || asked
		if tick != "" && !errors.Is(err, errComing) {
			w.tickAt = time.Now() // the periodic read is due at once
		}
		c.mu.Unlock()
	}
	if errors.Is(err, errComing) {
		return 0, err
	}
	if err != nil {
		c.mu.Lock()
		opened := w.opened && c.watches[key] == w
		c.mu.Unlock()
		if opened {
			c.reopenFailed(key, err)
		}
		return 0, err
	}
	if tick != "" && !lost {
		c.requestRead(key, tick)
	}
	if owed && !lost {
		// A lost session's is settled by the next session's first read.
		if d := c.askOwed(key, w); d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	return again, nil
}

// openChunk is how many first subscriptions subscribeAll writes at once
// when each URI is subscribed by a request of its own.
const openChunk = 256

// subscribeAll is SubscribeAll with the error of each URI apart: every
// URI's intent is set and its key marked at once, then each is waited for.
// From 2026-07-28 on, the URIs not watched yet are put on the listen
// stream the connection opens next, so that its first replacement carries
// them all.
func (c *Client) subscribeAll(ctx context.Context, uris []string) ([]Subscription, []error) {
	subs := make([]Subscription, len(uris))
	errs := make([]error, len(uris))
	err := c.engine.refuseRevoked(c.opts.Subject) // no read of the subject will ever pass the fence
	if err == nil {
		err = ctx.Err() // nothing started
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return subs, errs
	}
	type asked struct {
		key    string
		w      *watch
		waiter *waiter
	}
	all := make([]asked, len(uris))
	// The keys no Subscribe kept yet, and their spellings, read under c.mu.
	var fresh, freshRaws []string
	// Every key asked, once, with the spelling its watch has: what its pass
	// would open.
	var keys, raws []string
	opening := make(map[string]bool, len(uris))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		for i := range errs {
			errs[i] = ErrClientClosed
		}
		return subs, errs
	}
	conn := c.conn
	for i, uri := range uris {
		key, err := normalizeKey(uri)
		if err != nil {
			errs[i] = err
			continue
		}
		w, had := c.watches[key]
		if !had {
			w = newWatch(key, uri, c.epochs[key]+1) // the change wantLocked makes below
			c.watches[key] = w
		}
		w.asked = true
		w.pending++
		all[i] = asked{key: key, w: w, waiter: c.wantLocked(key)}
		if !w.kept {
			fresh, freshRaws = append(fresh, key), append(freshRaws, w.raw)
		}
		if !opening[key] {
			opening[key] = true
			keys, raws = append(keys, key), append(raws, w.raw)
		}
	}
	c.mu.Unlock()
	// The first subscriptions of the keys the ledger has never seen are
	// written together before any request for them leaves, as each must be
	// durable by then: one at a time in the passes, each would wait for a
	// commit of its own, shared with as many as the passes run at once.
	// What the ledger did not write (a write failed, a record was there,
	// the ledger takes no batch) is opened by the key's pass. With a
	// request each, the passes of one chunk start while the next is
	// written; one stream carries every URI, so all are written first. A
	// caller that gave up, or a Close, stops the chunks: what was not
	// started is not opened (its wait says why).
	stream := conn.era == EraModern && conn.caps.Subscribe && conn.deaf == ""
	chunk := openChunk
	if stream {
		chunk = len(keys)
	}
	for len(keys) > 0 && ctx.Err() == nil && !c.isClosed() {
		n := min(chunk, len(keys))
		var done opened
		if n > 1 {
			// Counted, so that a Close meanwhile closes what it writes.
			c.counted(func() {
				var err error
				if done, err = c.engine.openFirst(keys[:n], raws[:n], c.opts.Subject); err != nil {
					c.report(err)
				}
			})
		}
		if stream && n > 1 {
			// A stream names only URIs whose subscription is written (the
			// pass of any other key may send one at once): the others are
			// put on it by their passes, once opened.
			for i, key := range fresh {
				if done.gen == conn.gen && done.keys[key] || c.engine.openIn(key, freshRaws[i], c.opts.Subject, conn.gen) {
					conn.setWanted(freshRaws[i], true)
				}
			}
		}
		for _, key := range keys[:n] {
			c.mark(key)
		}
		keys, raws = keys[n:], raws[n:]
	}
	for i, a := range all {
		if a.key == "" {
			continue
		}
		subs[i], errs[i] = c.subscribed(ctx, a.key, a.w, a.waiter)
		errs[i] = c.settleSubscribe(a.key, a.w, errs[i])
	}
	return subs, errs
}

// settleSubscribe records how one Subscribe of w ended, and returns what
// the Subscribe returns. A watch no Subscribe has kept yet (the first ones
// in flight, none succeeded) is taken back when the last of them fails or
// is given up on: nothing stays watched that no caller has, and the next
// pass closes what was opened and takes its spelling off the listen
// stream. One that Close took back first (closeUnwatched) has its
// generation closed: its Subscribes fail with ErrClientClosed.
func (c *Client) settleSubscribe(key string, w *watch, err error) error {
	c.mu.Lock()
	w.pending--
	if w.givenUp {
		c.mu.Unlock()
		return ErrClientClosed
	}
	if err == nil || errors.Is(err, ErrNotFound) {
		w.kept = true
	}
	drop := !w.kept && w.pending == 0 && c.watches[key] == w && !c.closed
	if drop {
		c.dropWatch(key)
	}
	conn := c.conn
	c.mu.Unlock()
	if !drop {
		return err
	}
	if conn.era == EraModern {
		conn.setWanted(w.raw, false)
		c.putRightLater(conn, key, w.raw) // a stream sent meanwhile may carry it
	}
	c.mark(key)
	return err
}

// subscribed waits for the pass that took up a Subscribe of key (pw), then
// for its first read, bounded by ctx and RequestTimeout. A later pass may
// open the key anew meanwhile (a reconnect, a stream the server ended):
// the caller then waits for that pass too, so that what it gets back is an
// open subscription with its first read in it.
func (c *Client) subscribed(ctx context.Context, key string, w *watch, pw *waiter) (Subscription, error) {
	for {
		err := c.awaitPass(ctx, key, pw).err
		if err == nil && ctx.Err() != nil {
			// Given up as the pass ended: a select between the two picks either.
			err = ctx.Err()
		}
		if err != nil {
			return Subscription{}, err
		}
		notFound := c.awaitRead(ctx, key)
		// Waiting before the state is read: a pass that opens it after the
		// read tells next, and one before shows in the read.
		next := c.nextPass(key)
		sub, err := c.engine.Subscription(key)
		if err == nil && (sub.State == ledger.StateSubscribing || sub.State == ledger.StateDiscovered) && ctx.Err() == nil && !c.isClosed() {
			pw = next // being opened anew
			continue
		}
		c.dropWaiter(key, next)
		if err == nil && notFound {
			err = fmt.Errorf("%w: %s", ErrNotFound, w.raw)
		}
		if err == nil && c.isClosed() {
			return sub, ErrClientClosed
		}
		return sub, err
	}
}

// nextPass returns a waiter for the next pass over key to end, the one
// under way included, without a change of intent.
func (c *Client) nextPass(key string) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{epoch: c.epochs[key], done: make(chan passResult, 1)}
	c.waiters[key] = append(c.waiters[key], w)
	return w
}

// startWatch schedules the jittered revalidation (or poll) reads of a
// watched URI, replacing the ones it had: the controller's queue holds the
// next one as a delayed mark of the key, and the key's pass that finds it
// due reads (syncKey).
func (c *Client) startWatch(key string, interval time.Duration, trigger ledger.Trigger) {
	c.mu.Lock()
	w := c.watches[key]
	if w == nil || c.closed {
		c.mu.Unlock()
		return
	}
	w.every, w.periodic = interval, trigger
	w.tickAt = time.Now().Add(c.jitteredLocked(interval))
	first := time.Until(w.tickAt)
	c.mu.Unlock()
	c.queue.AddAfter(key, first)
}

// dueTickLocked reports the periodic read of w due now, if any, and
// schedules the next one; untilTick is how long until that. c.mu is held.
func (c *Client) dueTickLocked(w *watch) (due ledger.Trigger, untilTick time.Duration) {
	if w.every <= 0 {
		return "", 0
	}
	now := time.Now()
	if !now.Before(w.tickAt) {
		due = w.periodic
		w.tickAt = now.Add(c.jitteredLocked(w.every))
	}
	return due, w.tickAt.Sub(now)
}

// jitteredLocked returns d varied by up to ±Jitter; c.mu is held.
func (c *Client) jitteredLocked(d time.Duration) time.Duration {
	f := 1 + c.opts.Jitter*(2*c.rng.Float64()-1)
	return time.Duration(float64(d) * f)
}
