package mcpsync

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/ledger"
)

// The URI sync: one pass over one key, comparing what the caller wants
// (its watch, or none) with what the engine and the server have, and
// taking the next step. Every case the session layer knows is a branch
// here, read side by side:
//
//   - the server told something the caller no longer wants, or left
//     unsure by a request that settled late (putRight);
//   - a watched key not open in the current session: opened, a new
//     generation when the old one belongs to a dead session or was
//     abandoned after its lease moved (open);
//   - a close that stopped half way: finished first;
//   - open in push mode from 2026-07-28 on, but no acknowledged stream
//     carries it: opened anew (needsReopen);
//   - polling because a stream naming it was refused: tried on a stream
//     again at its poll ticks (needsReopen);
//   - open and heard: Degraded cleared (converged);
//   - an unwatched key still open: closed, the server told (syncUnwatched).

// syncWatched brings watched key to an open subscription in conn's
// session. While conn is lost, an open subscription keeps its generation
// and mode: the next session opens it anew.
func (c *Client) syncWatched(conn *connection, key string, w *watch, tick ledger.Trigger, asked, lost bool) (time.Duration, error) {
	sub, err := c.engine.Subscription(key)
	if err != nil && !errors.Is(err, ErrUnknownURI) {
		return 0, err
	}
	// Open here: in conn's session and not closing, past its activation;
	// a tombstoned one stays until a caller's Subscribe asks for it anew.
	here := err == nil && sub.SessionGeneration == conn.gen && sub.CloseEpoch == 0 &&
		sub.State != ledger.StateSubscribing && sub.State != ledger.StateDiscovered && !(asked && sub.State == ledger.StateTombstoned) &&
		!c.abandonedGeneration(key, sub) // its lease came back: open opens a new one
	if spelled := cmp.Or(sub.RawURI, key); !lost && err == nil && sub.SessionGeneration == conn.gen && sub.CloseEpoch == 0 &&
		(here || sub.State == ledger.StateSubscribing) && spelled != w.raw {
		// Opened, or being opened, under a spelling the caller no longer
		// watches (it was unsubscribed, or its Subscribe gave up, and
		// another subscribed before this pass): the server is told to stop
		// that one, and the next generation is opened under the caller's,
		// so that a generation's spelling is always the one its server was
		// asked with, which its close takes off.
		c.putRightLater(conn, key, spelled)
		c.putRight(conn, key, w)
		return 0, c.open(conn, key, w, true)
	}
	if here {
		if lost {
			return 0, nil
		}
		reopen, again := c.needsReopen(conn, key, w, sub, tick)
		if !reopen {
			c.takeOver(key, w, sub)
			c.converged(conn, key, w, sub)
			return again, nil
		}
		return 0, c.open(conn, key, w, true)
	} else if err == nil && sub.SessionGeneration == conn.gen && sub.State == ledger.StateUnsubscribing {
		// A close that stopped half way (its last write failed, or, from
		// 2026-07-28 on, the stream's answer is still coming): finished
		// first, told when the stream without it was acknowledged, and
		// not known otherwise. The callers of the changes before the one
		// that made the key watched again (the Unsubscribe) get that
		// close; those of the Subscribes since wait for it to be open.
		acked := false
		if conn.era == EraModern && !lost {
			err := c.serverUnsubscribe(c.ctx, conn, key, cmp.Or(sub.RawURI, key))
			if errors.Is(err, errComing) {
				return 0, err
			}
			acked = err == nil
		}
		if _, err := c.engine.FinishClose(key, acked); err != nil {
			return 0, err
		}
		c.tellPassed(key, w.since-1, nil)
	}
	return 0, c.open(conn, key, w, false)
}

// abandonedGeneration reports whether sub is the generation an Unsubscribe
// let go of without closing it, its lease having moved.
func (c *Client) abandonedGeneration(key string, sub Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, ok := c.abandoned[key]
	return ok && gen == [2]uint64{sub.SessionGeneration, sub.SubscriptionGeneration}
}

// needsReopen reports whether key's open generation must be closed and a
// new one opened: from 2026-07-28 on, in push mode while no stream carries
// it (the stream ended, was refused, or was acknowledged without it) or the
// stream it was carried by ended (notifications sent since reached nobody,
// so a new generation opens and reads it); or,
// at a poll tick, polling because a stream naming it was refused, which
// may have been for the moment, or at once when a stream acknowledged late
// carries it. Each URI tries a stream again no sooner
// than PollEvery after its fall-back (its first poll tick), then twice as
// long after each that fails, up to RevalidateEvery. again is when to look
// once more, for a stream the server ended and whose re-establishment is
// paced.
func (c *Client) needsReopen(conn *connection, key string, w *watch, sub Subscription, tick ledger.Trigger) (reopen bool, again time.Duration) {
	if conn.era != EraModern || !sub.State.Open() {
		return false, 0
	}
	c.mu.Lock()
	ended := w.streamEnded
	c.mu.Unlock()
	switch sub.Mode {
	case ledger.ModePush:
		// A stream that will carry it is coming: its answer marks key.
		if heard, coming := conn.hearing(key, w.raw, !ended); (heard || coming) && !ended {
			return false, 0
		}
		if wait := conn.reopenWait(); wait > 0 {
			return false, wait
		}
		return true, 0
	case ledger.ModePoll:
		if !conn.caps.Subscribe || conn.deaf != "" || !strings.HasPrefix(sub.ModeReason, subscribeFailed) {
			return false, 0
		}
		if heard, _ := conn.hearing(key, w.raw, false); heard {
			// Acknowledged after its Subscribe gave up on it: the stream
			// that carries it is the server's answer, late.
			return true, 0
		}
		if tick != ledger.TriggerPoll {
			return false, 0
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if time.Now().Before(w.retryAt) {
			return false, 0
		}
		w.retryAt = time.Now().Add(retryPolicy{initial: c.opts.PollEvery, max: c.opts.RevalidateEvery}.delay(int(w.retries) + 1))
		w.retries++
		return true, 0
	}
	return false, 0
}

// cadence is how often, and as what, an open subscription of mode is read
// when nothing notifies it: revalidation in push mode, polls in poll mode.
func (c *Client) cadence(mode ledger.SubscriptionMode) (time.Duration, ledger.Trigger) {
	if mode == ledger.ModePoll {
		return c.opts.PollEvery, ledger.TriggerPoll
	}
	return c.opts.RevalidateEvery, ledger.TriggerRevalidate
}

// takeOver makes w the watch of sub, the open generation it found: a watch
// made again while its generation stayed open (an Unsubscribe and a
// Subscribe between two passes of the key) was opened by no pass, so it
// gets the periodic reads of sub's mode here, as open gives them.
func (c *Client) takeOver(key string, w *watch, sub Subscription) {
	c.mu.Lock()
	adopted := w.opened
	w.opened = true
	c.mu.Unlock()
	if !adopted {
		interval, trig := c.cadence(sub.Mode)
		c.startWatch(key, interval, trig)
	}
}

// converged is the pass over a key that is open as wanted: what
// reopenFailed said of it is taken back once it is open in the current
// session and, in push mode from 2026-07-28 on, on a stream the server
// acknowledged with it, and nothing is left to put right on the server.
// A URI kept on a stream for a whole revalidation period has its stream
// retries start afresh.
func (c *Client) converged(conn *connection, key string, w *watch, sub Subscription) {
	heard := true
	if conn.era == EraModern && sub.Mode == ledger.ModePush {
		heard, _ = conn.hearing(key, w.raw, false)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if heard && conn.era == EraModern && sub.Mode == ledger.ModePush && time.Since(w.pushedAt) >= c.opts.RevalidateEvery {
		w.retries = 0
	}
	if heard && !conn.puttingRight(key) && c.conn == conn {
		delete(c.unopened, key)
	}
}

// open opens watched key's subscription generation on conn and requests
// its first read: ledger.TriggerInitial the first time after the caller's
// Subscribe, ledger.TriggerReconnect after that. With replace, or when the
// generation open is one an Unsubscribe let go of (its lease had moved;
// the server was told to stop then), that generation is replaced, closed
// and the next opened in one write (reopen): a crash between the two
// would leave a watched URI closed, which a restart does not resume. It
// does nothing when the engine's session is already newer than conn's:
// the next pass opens it there.
func (c *Client) open(conn *connection, key string, w *watch, replace bool) error {
	raw := w.raw
	var sub Subscription
	var err error
	if replace {
		sub, err = c.engine.reopen(raw, c.opts.Subject)
	} else {
		sub, err = c.engine.Subscribe(raw, c.opts.Subject)
	}
	if err == nil && sub.State != ledger.StateSubscribing && c.wasAbandoned(key, sub) {
		sub, err = c.engine.reopen(raw, c.opts.Subject)
	}
	if err != nil || sub.SessionGeneration != conn.gen || sub.State != ledger.StateSubscribing {
		return err // already open in this session, or a newer one's
	}
	mode, reason := ledger.ModePoll, ""
	switch {
	case !conn.caps.Subscribe:
		reason = "the server does not declare resources.subscribe"
	case conn.deaf != "":
		reason = conn.deaf
	default:
		if err := c.serverSubscribe(c.ctx, conn, key, raw); err != nil {
			if c.ctx.Err() != nil {
				return ErrClientClosed
			}
			if errors.Is(err, errComing) {
				return err // left SUBSCRIBING: the stream's answer marks key
			}
			reason = subscribeFailed + causeText(err)
		} else {
			mode = ledger.ModePush
		}
	}
	interval, trig := c.cadence(mode)
	// Activated with its staleness bound in one write: how old the copy
	// may get before the next revalidation (or poll) confirms it. A copy
	// counts as confirmed when its read was issued, so the bound holds the
	// longest jittered interval and the next read's answer.
	bound := interval + time.Duration(float64(interval)*c.opts.Jitter) + c.opts.RequestTimeout
	if _, err := c.engine.activate(raw, mode, reason, bound); err != nil {
		if errors.Is(err, ErrIllegalTransition) {
			return nil // its session ended meanwhile
		}
		if mode == ledger.ModePush && conn.era == EraLegacy {
			// The server notifies raw, which may be watched by nobody
			// once this pass fails (a Subscribe that fails takes back its
			// watch): the server is told what the caller wants then.
			c.putRightLater(conn, key, raw)
		}
		return err
	}
	c.mu.Lock()
	delete(c.unopened, key) // open again
	first := !w.opened
	w.opened, w.streamEnded = true, false
	if mode == ledger.ModePush {
		w.pushedAt = time.Now()
	}
	c.mu.Unlock()
	c.startWatch(key, interval, trig)
	if first {
		c.requestRead(key, ledger.TriggerInitial)
	} else {
		c.requestRead(key, ledger.TriggerReconnect)
	}
	return nil
}

// closeUnwatched takes, for every key the caller stopped watching, the
// step toward closed that its pass had not taken when the client closed
// (an Unsubscribe whose wait ended, or that raced Close): the unwatched
// branch of the key's sync, on a connection that is lost now, so the
// generation is closed on the engine, and the server, which forgets a
// session that ends, is not told. A watch no Subscribe kept yet is given
// up here too: its first Subscribes fail with ErrClientClosed
// (settleSubscribe). Only generations of this client's engine are closed:
// a key another engine on the ledger opened since is that engine's. A
// Client that opens the ledger next resumes nothing the caller gave up.
// It runs once no goroutine of the client does, and no SubscribeAll
// writes its first subscriptions (counted), so nothing races it.
func (c *Client) closeUnwatched() {
	c.mu.Lock()
	conn := c.conn
	conn.lost = true
	var keys []string
	for key := range c.epochs {
		if w := c.watches[key]; w != nil {
			if w.kept {
				continue
			}
			w.givenUp = true
			c.dropWatch(key)
		}
		keys = append(keys, key)
	}
	c.mu.Unlock()
	// As many at once as the controller works keys, so that a durable
	// ledger commits their writes together.
	var wg sync.WaitGroup
	slots := make(chan struct{}, syncWorkers)
	for _, key := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if sub, err := c.engine.Subscription(key); err != nil || sub.Capabilities.Engine != c.engine.id {
				return
			}
			if err := c.syncUnwatched(conn, key); err != nil {
				c.report(errorf("close %s: %w", key, err))
			}
		})
	}
	wg.Wait()
}

// syncUnwatched closes the generation of a key nobody watches: the fence is
// frozen first (BeginClose), then the server is told. A lost or timed-out
// ack leaves the generation UNSUBSCRIBE_UNKNOWN, silent and never reopened;
// the server is put right on the same session (putRight). On a ledger
// shared by many workers, a URI whose lease another worker took is only
// let go: the server is told, and the ledger row, that worker's now, is
// left alone.
func (c *Client) syncUnwatched(conn *connection, key string) error {
	before, err := c.engine.Subscription(key)
	if errors.Is(err, ErrUnknownURI) {
		return nil
	}
	if err != nil {
		return err
	}
	raw := before.RawURI
	if raw == "" {
		raw = key
	}
	c.mu.Lock()
	lost := conn.lost
	c.mu.Unlock()
	// A legacy subscribe that failed may still have been recorded by the
	// server (and its notifications keep coming), so the server is told
	// whenever it can subscribe at all; a 2026-07-28 stream is told
	// whenever it may carry the URI. A lost session's server keeps nothing.
	tell := !lost && (before.Mode == ledger.ModePush || (conn.era == EraLegacy && conn.caps.Subscribe) ||
		(conn.era == EraModern && conn.wants(raw)))
	if before.CloseEpoch != 0 {
		return c.closeClosed(conn, key, raw, before, tell)
	}
	if _, err := c.engine.BeginClose(key); err != nil {
		if !errors.Is(err, ErrNotLeaseholder) {
			return err
		}
		// Another worker took the URI's lease: the ledger row is its
		// own now, and this client only stops asking the server, again
		// until the server acknowledges it.
		if tell && c.serverUnsubscribe(c.ctx, conn, key, raw) != nil {
			c.putRightLater(conn, key, raw)
		}
		c.mu.Lock()
		c.abandoned[key] = [2]uint64{before.SessionGeneration, before.SubscriptionGeneration}
		c.mu.Unlock()
		return nil
	}
	acked := true
	if tell && before.SessionGeneration == conn.gen {
		if conn.era == EraLegacy && conn.deferUntilSettled(key, raw) {
			// A subscribe given up on may still reach the server after an
			// unsubscribe sent now; the unsubscribe waits for it, and the
			// generation's outcome is unknown until then.
			_, err := c.engine.FinishClose(key, false)
			return err
		}
		err := c.serverUnsubscribe(c.ctx, conn, key, raw)
		if errors.Is(err, errComing) {
			return err // its next pass finishes the close (closeClosed)
		}
		if acked = err == nil; !acked {
			// Put right on the same session: the unsubscribe (or the
			// stream without raw) is tried again until the server
			// acknowledges it or the session ends.
			c.putRightLater(conn, key, raw)
		}
	}
	_, err = c.engine.FinishClose(key, acked)
	return err
}

// closeClosed is the pass over an unwatched generation whose close began
// already: finished, or stopped half way by a failed write or by the
// stream's answer still coming (its generation UNSUBSCRIBING, which this
// finishes). A 2026-07-28 stream may still carry the URI: it is told too.
// One whose session was replaced meanwhile is finished unknown: whether
// the server heard before its session ended is not known.
func (c *Client) closeClosed(conn *connection, key, raw string, before Subscription, tell bool) error {
	if before.State == ledger.StateUnsubscribing && before.SessionGeneration != conn.gen {
		_, err := c.engine.FinishClose(key, false)
		return err
	}
	stuck := before.State == ledger.StateUnsubscribing
	carried := conn.era == EraModern && conn.wants(raw)
	if !stuck && !carried {
		return nil
	}
	acked := true
	if tell {
		err := c.serverUnsubscribe(c.ctx, conn, key, raw)
		if errors.Is(err, errComing) {
			return err
		}
		if acked = err == nil; !acked {
			c.putRightLater(conn, key, raw)
		}
	}
	if stuck {
		_, err := c.engine.FinishClose(key, acked)
		return err
	}
	return nil
}

// putRightLater has the server's subscription of raw on conn put right by
// key's next pass (putRight), once every request of raw still out settled:
// a pass that leaves a spelling to put right is retried with the retry
// policy's backoff (runPass).
func (c *Client) putRightLater(conn *connection, key, raw string) {
	conn.mu.Lock()
	conn.markPutRightLocked(key, raw)
	conn.mu.Unlock()
}

// putRight makes the server's subscription of each spelling of key marked
// on conn what the caller wants now, closing an UNSUBSCRIBE_UNKNOWN
// generation once the server acknowledged. Before 2026-07-28 the server is
// subscribed while the caller watches that spelling in push mode,
// unsubscribed otherwise; from then on the listen stream stops carrying it
// unless the caller watches it under that spelling. A spelling with
// requests still out waits for them: the last to settle marks key again.
//
// It returns the spellings that failed, which stay marked, and the first
// failure.
func (c *Client) putRight(conn *connection, key string, w *watch) (failed map[string]bool, first error) {
	for _, raw := range conn.toPutRight(key) {
		err := c.putRightOnce(conn, key, raw, w)
		if errors.Is(err, errComing) {
			continue // still marked; the stream's answer marks key
		}
		if err != nil {
			if failed == nil {
				failed = make(map[string]bool)
			}
			failed[raw] = true
			first = cmp.Or(first, err)
			continue
		}
		conn.putRightDone(key, raw)
	}
	return failed, first
}

func (c *Client) putRightOnce(conn *connection, key, raw string, w *watch) error {
	watched := w != nil && w.raw == raw
	if conn.era == EraModern {
		if watched {
			return nil
		}
		if err := c.serverUnsubscribe(c.ctx, conn, key, raw); err != nil {
			if errors.Is(err, errComing) {
				return err
			}
			err = errorf("take %s off the listen stream: %w", raw, err)
			c.report(err)
			return err
		}
		c.resolveUnknown(conn, key, w)
		return nil
	}
	sub, err := c.engine.Subscription(key)
	if watched && (err != nil || sub.SessionGeneration != conn.gen) {
		return nil
	}
	if !watched {
		if err := c.serverUnsubscribe(c.ctx, conn, key, raw); err != nil {
			err = errorf("unsubscribe %s: %w", raw, err)
			c.report(err)
			return err
		}
		c.resolveUnknown(conn, key, w)
		return nil
	}
	if sub.Mode != ledger.ModePush || !readable(sub.State) {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	defer cancel()
	req := mcp.SubscribeRequest{}
	req.Params.URI = raw
	if err := conn.mc.Subscribe(c.tracked(ctx, conn, key, raw), req); err != nil {
		// The server no longer notifies raw and will not again: its
		// generation is opened anew, which polls, saying why, when the
		// server refuses once more.
		c.report(errorf("subscribe %s again: %w", raw, err))
		return c.open(conn, key, w, true)
	}
	// A late unsubscribe may have left the server silent about raw for a
	// while: what changed meanwhile is read now.
	c.requestRead(key, ledger.TriggerRevalidate)
	return nil
}

// resolveUnknown closes key's UNSUBSCRIBE_UNKNOWN generation in conn's
// session once the server acknowledged that it stopped, if nobody watches
// key.
func (c *Client) resolveUnknown(conn *connection, key string, w *watch) {
	if w != nil {
		return
	}
	if sub, err := c.engine.Subscription(key); err == nil && sub.SessionGeneration == conn.gen && sub.State == ledger.StateUnsubscribeUnknown {
		_, _ = c.engine.ResolveUnsubscribe(key)
	}
}

// requestRead asks the engine for a coalesced read of key and dispatches
// it if one is due now. A key that cannot be read (not open in the
// current session) is marked: its pass opens it again.
func (c *Client) requestRead(key string, trigger ledger.Trigger) {
	if c.skipRefresh(key, trigger) {
		return // outside the refresh fraction (rollout.go)
	}
	t, ok, err := c.engine.RequestRead(key, trigger)
	switch {
	case err == nil && ok:
		c.dispatch(t)
	case errors.Is(err, ErrNotLeaseholder):
		c.report(err) // another worker holds key; its shard lets it go
	case err != nil && (!writeFailed(err) || !c.owe(key, trigger, false, err)):
		c.mark(key) // its pass decides what the key needs now
	}
}

// wasAbandoned reports whether sub is the generation an Unsubscribe let go
// of without closing it (its lease had moved), and forgets it.
func (c *Client) wasAbandoned(key string, sub Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, ok := c.abandoned[key]
	delete(c.abandoned, key)
	return ok && gen == [2]uint64{sub.SessionGeneration, sub.SubscriptionGeneration}
}

// reopenFailed makes a failed reopen of key visible: OnError is told (a
// *ReopenError), and Lookup says the copy is not kept fresh until key's
// subscription is open again. The watch's next tick tries again (request).
//
// Its pass is retried with the retry policy's backoff; a failure that
// lasts is told again once a revalidation period at most, not at every
// retry.
func (c *Client) reopenFailed(key string, err error) {
	c.mu.Lock()
	w := c.watches[key]
	tell := w != nil && !c.closed && time.Since(w.toldAt) >= c.opts.RevalidateEvery
	if w != nil && !c.closed {
		c.unopened[key] = "its subscription could not be opened again: " + causeText(err)
	}
	if tell {
		w.toldAt = time.Now()
	}
	c.mu.Unlock()
	if tell {
		c.report(&ReopenError{URI: key, Err: err})
	}
}
