package mcpsync

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// The stream sync: the only writer of a 2026-07-28 connection's
// subscriptions/listen stream. A session of that era has one stream whose
// filter names every URI it notifies; the server keeps no subscription
// state across streams, so a new stream carries every URI wanted then, and
// mcp-go (v1.2.1) cancels the old stream when it opens the new one.
//
// A key's pass declares whether its URI is to be carried (askStream) and
// reads the answer the stream has for it: heard (a stream acknowledged with
// it, or, for a URI to be taken off, none the server holds carries it),
// refused (acknowledged without it, ended before its acknowledgement, or
// not acknowledged within RequestTimeout), or coming (errComing). A pass
// that reads "coming" is recorded as waiting, on the stream that will
// answer it or, until the stream sync takes its declaration up, on the
// connection; whoever answers, replaces, abandons or cancels that stream
// marks every key waiting on it, under the same lock. No pass waits.
//
// The stream sync is the item streamKey of the session's queue. It builds
// the stream from the declared URIs, replaces the stream when the current
// one (acknowledged or in flight) differs from them, sends a replacement
// only once the server is done with the stream it replaces (or after a
// patience), paces a stream after one the server ended, and batches the
// declarations of a short window into one replacement (the queue's
// AddAfter; nothing waits in between).

// streamKey is the stream sync's item of the session's queue.
const streamKey = "stream"

// errComing: the listen stream's answer for a URI is not in yet; the key
// waiting for it is marked when it is.
var errComing = errors.New("mcpsync: the listen stream's answer is not in yet")

// errNotAcknowledged: no acknowledgement within RequestTimeout of the ask.
var errNotAcknowledged = errors.New("mcpsync: subscriptions/listen not acknowledged within the request timeout")

// listenStream is one subscriptions/listen request: made by the stream
// sync, sent (out) once the server is done with the stream it replaces,
// open until cancelled or ended by the server.
type listenStream struct {
	cancel context.CancelFunc
	ctx    context.Context
	// The fields below are protected by connection.mu.
	uris []string // its filter, set when it is sent
	// id is the JSON-RPC id of its listen request, which the server puts
	// in _meta of every message on the stream; set just before it is sent.
	id      string
	out     bool          // sent
	acked   chan struct{} // closed at the stream's acknowledgement
	ackURIs []string      // the URIs it acknowledged, once acked is closed
	// sent and ackedAt are when it was sent and acknowledged; sendBy is
	// when it goes out at the latest while the stream it replaces (prev)
	// is not done; overdue is set once it was not acknowledged within
	// RequestTimeout.
	sent, ackedAt, sendBy time.Time
	prev                  *listenStream
	overdue               bool
	// carried is uris as a set, built when first asked for (carries);
	// ackSet is ackURIs as a set, written with it.
	carried map[string]bool
	ackSet  map[string]bool
	// waiting holds the keys whose pass waits for this stream's answer;
	// first is the one that waited first.
	waiting map[string]streamAsk
	first   string
	// ended is closed once the server is done with the stream's request,
	// or may never say (listenEnded); wired is set once its request
	// reached the transport. outlived is the stream that replaced it
	// before that, and suspect marks a stream sent before the server was
	// done with one it replaced, once that end came, or open
	// RequestTimeout after a stream was cut.
	ended    chan struct{}
	endOnce  sync.Once
	wired    atomic.Bool
	outlived *listenStream
	suspect  bool
}

// streamAsk is what a key's pass asked of the stream: raw carried (add) or
// not.
type streamAsk struct {
	raw string
	add bool
	at  time.Time // when the pass first asked it: refused RequestTimeout later
}

// streamRefusal is the stream's "no" to a key's ask, kept until its pass reads it.
type streamRefusal struct {
	add bool
	err error
}

func (c *Client) newStream(prev *listenStream) *listenStream {
	ctx, cancel := context.WithCancel(c.ctx)
	return &listenStream{ctx: ctx, cancel: cancel, prev: prev, acked: make(chan struct{}), ended: make(chan struct{})}
}

// carries reports whether the stream's filter names raw; connection.mu
// must be held.
func (s *listenStream) carries(raw string) bool {
	if s.carried == nil {
		s.carried = setOf(s.uris)
	}
	return s.carried[raw]
}

func setOf(uris []string) map[string]bool {
	m := make(map[string]bool, len(uris))
	for _, u := range uris {
		m[u] = true
	}
	return m
}

func (s *listenStream) isAcked() bool {
	select {
	case <-s.acked:
		return true
	default:
		return false
	}
}

func (s *listenStream) isEnded() bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

// inFlight reports whether s is sent and its answer may still come.
func (s *listenStream) inFlight() bool { return s.out && !s.overdue && !s.isAcked() }

// wait records key as waiting for s's answer; connection.mu is held.
func (s *listenStream) wait(key string, ask streamAsk) {
	if s.waiting == nil {
		s.waiting = make(map[string]streamAsk)
	}
	if len(s.waiting) == 0 {
		s.first = key
	}
	s.waiting[key] = ask
}

// markStream has the stream sync run after d (at once for 0).
func (c *Client) markStream(d time.Duration) { c.sessionq.AddAfter(streamKey, d) }

// streamTick is how long a declaration waits for others before the stream
// sync looks: those of one tick become one replacement.
func (c *Client) streamTick() time.Duration {
	if c.opts.CoalesceWindow <= 0 {
		return 0
	}
	return max(c.opts.CoalesceWindow/10, time.Millisecond)
}

// runStream runs one pass of the stream sync and has it run again when it
// asks to.
func (c *Client) runStream() {
	if again := c.syncStream(); again > 0 {
		c.markStream(again)
	}
}

// syncStream takes the listen stream's next step toward the declared URIs
// and returns when to look again (0: not before an event marks it):
//
//   - a stream not acknowledged within RequestTimeout refuses the keys
//     waiting on it (it stays open: a late acknowledgement still counts);
//   - a replacement waiting for the server to be done with the stream it
//     replaces is sent once it is, or once its patience ran out, carrying
//     every URI wanted then;
//   - a stream in flight is left to its answer, which marks this item;
//   - otherwise a stream that differs from the declared URIs (or is
//     suspect) is replaced: not before the pace after a stream the server
//     ended, and, within the window of the last replacement, not while
//     declarations keep arriving; with nothing wanted, it is cancelled.
//
// Keys waiting for a declaration nothing is to change for are marked: their
// answer is in.
func (c *Client) syncStream() time.Duration {
	c.mu.Lock()
	conn, closed := c.conn, c.closed
	lost := conn.lost
	c.mu.Unlock()
	if closed || conn.era != EraModern {
		return 0
	}
	var (
		marks  []string
		launch *listenStream
		again  time.Duration
	)
	soonest := func(d time.Duration) {
		if d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	now := time.Now()
	conn.mu.Lock()
	// An ask is answered within RequestTimeout whatever the connection
	// does: healing may never replace a lost session.
	marks, next := conn.expireLocked(now, c.opts.RequestTimeout)
	soonest(next)
	cur := conn.listen
	marks = append(marks, c.suspectAfterCutLocked(conn, now, soonest)...)
	switch {
	case conn.stopped:
	case lost:
		// No stream goes out on a lost session; the keys still waiting
		// are marked when it is replaced (stopListen), or refused above
		// once their ask is RequestTimeout old.
	case cur != nil && !cur.out:
		if cur.prev != nil && !cur.prev.isEnded() && now.Before(cur.sendBy) {
			conn.takeAwaitingLocked(cur)
			soonest(cur.sendBy.Sub(now))
			break
		}
		var sent []string
		sent, launch = conn.sendLocked(cur, now)
		marks = append(marks, sent...)
	case cur != nil && cur.inFlight() && now.Sub(cur.sent) >= c.opts.RequestTimeout:
		// Not acknowledged in time: each key waiting on it is refused and
		// polls (a late acknowledgement marks it again), and no ask waits
		// on it any more.
		cur.overdue = true
		marks = append(marks, conn.answerLocked(cur, errNotAcknowledged)...)
		soonest(c.streamTick()) // what waits for a stream looks again
	case cur != nil && cur.inFlight():
		soonest(c.opts.RequestTimeout - now.Sub(cur.sent))
	case !conn.needsReplacementLocked():
		marks = append(marks, conn.takeAwaitingLocked(nil)...)
	case now.Before(conn.reopenAt):
		soonest(conn.reopenAt.Sub(now))
	default:
		if hold := c.holdLocked(conn, now); hold > 0 {
			soonest(hold)
			break
		}
		if len(conn.want) == 0 {
			marks = append(marks, conn.cancelListenLocked()...)
			break
		}
		s := c.newStream(cur)
		conn.listen = s
		if cur != nil {
			cur.cancel()
			for key, ask := range cur.waiting {
				s.wait(key, ask) // still asked: the replacement answers
			}
			cur.waiting = nil
		}
		if cur == nil || cur.isEnded() {
			var sent []string
			sent, launch = conn.sendLocked(s, now)
			marks = append(marks, sent...)
			break
		}
		// The server is done with the old stream before the new one goes
		// out: a server may clean up an ended stream by unsubscribing its
		// URIs for the whole session (the official Go SDK does, once the
		// stream's handler returns), which would silence the same URIs on
		// the new one. listenEnded marks this item when it is.
		patience := min(max(4*conn.listenTook, listenEndPatience), c.opts.RequestTimeout/10)
		s.sendBy = now.Add(patience)
		conn.takeAwaitingLocked(s)
		soonest(patience)
	}
	if launch != nil {
		soonest(c.opts.RequestTimeout)
	}
	conn.mu.Unlock()
	for _, key := range marks {
		c.mark(key)
	}
	if launch != nil {
		c.sendStream(conn, launch)
	}
	return again
}

// needsReplacementLocked reports whether the current stream differs from
// the declared URIs: a key's ask waits for the stream sync (askStream
// leaves one there only when the current stream does not answer it), one
// wanted is not carried (not acknowledged, for an acknowledged stream),
// one to be taken off is, or the stream is suspect. conn.mu is held.
func (conn *connection) needsReplacementLocked() bool {
	if len(conn.awaiting) > 0 {
		return true // without a look at every wanted URI, at each ask
	}
	cur := conn.listen
	if cur == nil {
		return len(conn.want) > 0
	}
	acked := cur.isAcked()
	if acked && cur.suspect {
		return true
	}
	for _, raw := range conn.want {
		if (acked && !cur.ackSet[raw]) || (!acked && !cur.carries(raw)) {
			return true
		}
	}
	for raw := range conn.drop {
		if cur.carries(raw) {
			return true
		}
	}
	return false
}

// holdLocked holds a replacement that follows another within its window
// back while declarations keep arriving, so that one stream carries them
// all: it returns how long to wait for the next look while the declared
// URIs changed less than a tick ago (however often the item was marked
// meanwhile), until the end of the window:
// CoalesceWindow or four times what the last stream took to be
// acknowledged, whichever is longer, and never more than a tenth of
// RequestTimeout. A stream carries every URI, so each replacement costs
// O(n), and a burst of n Subscribes, replaced one window at a time, spends
// about a fifth of its time on replacements at most. A replacement after a
// quiet spell goes at once. conn.mu is held.
func (c *Client) holdLocked(conn *connection, now time.Time) time.Duration {
	if c.opts.CoalesceWindow <= 0 {
		return 0
	}
	window := min(max(c.opts.CoalesceWindow, 4*conn.listenTook), c.opts.RequestTimeout/10)
	if conn.listenAcked.IsZero() || now.Sub(conn.listenAcked) >= window {
		conn.batchUntil, conn.batchAt = time.Time{}, time.Time{}
		return 0
	}
	tick := c.streamTick()
	if conn.batchUntil.IsZero() {
		conn.batchUntil = now.Add(window)
	}
	if conn.wantEdits != conn.batchEdits || conn.batchAt.IsZero() {
		conn.batchEdits, conn.batchAt = conn.wantEdits, now // a change: quiet from now on
	}
	// Quiet once a whole tick passed without a change, however often the
	// item was marked meanwhile.
	if quiet := now.Sub(conn.batchAt); quiet < tick && now.Before(conn.batchUntil) {
		return min(tick-quiet, conn.batchUntil.Sub(now))
	}
	conn.batchUntil, conn.batchAt = time.Time{}, time.Time{}
	return 0
}

// sendLocked makes s, the stream to be sent, carry every URI wanted now and
// returns it to be sent (sendStream), with every key waiting for the
// stream sync now waiting on it; with nothing wanted it is cancelled
// instead, and the keys waiting on it are marked. conn.mu is held.
func (conn *connection) sendLocked(s *listenStream, now time.Time) ([]string, *listenStream) {
	if len(conn.want) == 0 {
		return conn.cancelListenLocked(), nil
	}
	if p := s.prev; p != nil && !p.isEnded() {
		// Not done yet: once it is, this stream may have lost what the
		// server cleaned up (listenEnded).
		p.outlived = s
	}
	s.prev = nil
	s.uris, s.carried, s.out, s.sent = slices.Clone(conn.want), nil, true, now
	conn.batchUntil, conn.batchAt = time.Time{}, time.Time{}
	conn.takeAwaitingLocked(s)
	return nil, s
}

// cancelListenLocked cancels the current stream, leaving none: nothing is
// wanted. Every key waiting on it, or on the stream sync, is marked: the
// server holds no stream that carries its URI. conn.mu is held.
func (conn *connection) cancelListenLocked() []string {
	var marks []string
	if s := conn.listen; s != nil {
		s.cancel()
		for key := range s.waiting {
			marks = append(marks, key)
		}
		s.waiting = nil
		conn.listen = nil
	}
	clear(conn.drop)
	return append(marks, conn.takeAwaitingLocked(nil)...)
}

// takeAwaitingLocked hands the keys waiting for the stream sync to s, the
// stream that will answer them, or, for nil, returns them to be marked.
// conn.mu is held.
func (conn *connection) takeAwaitingLocked(s *listenStream) []string {
	var marks []string
	for key, ask := range conn.awaiting {
		if s != nil {
			s.wait(key, ask)
		} else {
			marks = append(marks, key)
		}
	}
	clear(conn.awaiting)
	return marks
}

// answerLocked records err, the end of s before its acknowledgement (or
// its lateness), as the refusal of every key waiting on it, takes their
// URIs off the wanted ones, and returns the keys to mark. conn.mu is held.
func (conn *connection) answerLocked(s *listenStream, err error) []string {
	marks := make([]string, 0, len(s.waiting))
	for key, ask := range s.waiting {
		marks = append(marks, key)
		conn.refuseLocked(ask, err)
	}
	s.waiting = nil
	return marks
}

// refuseLocked records err as the answer to ask, and takes its URI off the
// wanted ones; conn.mu is held.
func (conn *connection) refuseLocked(ask streamAsk, err error) {
	if ask.add && !conn.wanted[ask.raw] {
		return // taken back meanwhile: nothing to refuse
	}
	conn.refused[ask.raw] = streamRefusal{add: ask.add, err: err}
	if ask.add {
		conn.unwantLocked(ask.raw)
	}
}

// expireLocked refuses every ask that has waited RequestTimeout (timeout)
// for its answer, as a request not answered in time would be, and returns
// the keys to mark and how long until the next ask is due. conn.mu is
// held.
func (conn *connection) expireLocked(now time.Time, timeout time.Duration) ([]string, time.Duration) {
	var marks []string
	var next time.Duration
	expire := func(waiting map[string]streamAsk) {
		for key, ask := range waiting {
			if left := timeout - now.Sub(ask.at); left > 0 {
				if next == 0 || left < next {
					next = left
				}
				continue
			}
			delete(waiting, key)
			conn.refuseLocked(ask, errNotAcknowledged)
			marks = append(marks, key)
		}
	}
	expire(conn.awaiting)
	if s := conn.listen; s != nil {
		expire(s.waiting)
	}
	return marks, next
}

// refuseFirstLocked answers the end of s before its acknowledgement: it is
// the refusal of the ask that waited on it first (as if that ask had sent
// it alone), and every other ask is asked again of the next stream, so
// that a server that refuses k streams costs k URIs their push and about
// 2k streams, however many URIs each carried. With no ask waiting on it
// (SubscribeAll names its URIs before their passes ask), it is the refusal
// of the first URI it carried that is still wanted, for the same cost: the
// next stream carries the others, and is not the stream refused. conn.mu is
// held.
func (conn *connection) refuseFirstLocked(s *listenStream, err error) []string {
	ask, ok := s.waiting[s.first]
	if !ok {
		for key, a := range s.waiting {
			s.first, ask, ok = key, a, true
			break
		}
	}
	if !ok {
		for _, raw := range s.uris {
			if conn.wanted[raw] {
				conn.refused[raw] = streamRefusal{add: true, err: err}
				conn.unwantLocked(raw)
				return []string{spelledKey(raw)}
			}
		}
		return nil
	}
	delete(s.waiting, s.first)
	first := &listenStream{waiting: map[string]streamAsk{s.first: ask}}
	marks := conn.answerLocked(first, err)
	for key, ask := range s.waiting {
		conn.awaiting[key] = ask
	}
	s.waiting = nil
	return marks
}

// sendStream sends s, whose filter is set, and has its end handled: the
// server is done with it (listenEnded), or it ended without being cancelled
// (streamEnded, through the notification queue).
func (c *Client) sendStream(conn *connection, s *listenStream) {
	lctx := wire.WithRequestID(s.ctx, func(id string) {
		s.wired.Store(true)
		conn.mu.Lock()
		s.id = id
		conn.mu.Unlock()
	})
	lctx = wire.WithAnswerAwaited(lctx, c.opts.RequestTimeout, func(how wire.Ending) {
		c.listenEnded(conn, s, how)
	})
	if !c.goAsync(func() {
		err := conn.mc.Listen(lctx, mcp.SubscriptionFilter{ResourceSubscriptions: s.uris})
		if !s.wired.Load() {
			c.listenEnded(conn, s, wire.Answered) // never sent: nothing to wait for
		}
		if s.ctx.Err() == nil {
			// The server ended a stream nobody cancelled: every
			// subscription it carried has lost its notifications.
			if err == nil {
				err = errors.New("mcpsync: listen stream ended before it was acknowledged")
			}
			c.notes.push(note{gen: conn.gen, conn: conn, streamEnded: s, streamErr: err})
		}
	}) {
		s.cancel()
	}
}

// suspectAfterCutLocked distrusts, once RequestTimeout has passed since a
// stream was cut (it ended with no answer from the server), the stream
// open then: the server cleans a cut stream up whenever it learns of the
// end, and one that cleans up for the whole session, as the official Go
// SDK server does, silences the same URIs on every stream sent before that
// clean-up. The suspect stream is replaced once (the replacement waits for
// the server to be done with it), and the keys of what it carries are
// returned to be marked: none is heard from it meanwhile. Until then it
// has soonest look again at the moment. conn.mu is held.
func (c *Client) suspectAfterCutLocked(conn *connection, now time.Time, soonest func(time.Duration)) []string {
	if conn.cutAt.IsZero() {
		return nil
	}
	by := conn.cutAt.Add(c.opts.RequestTimeout)
	if now.Before(by) {
		soonest(by.Sub(now))
		return nil
	}
	conn.cutAt = time.Time{}
	cur := conn.listen
	if cur == nil || !cur.out || cur.suspect {
		return nil
	}
	return distrustLocked(cur)
}

// distrustLocked marks stream s suspect, so that nothing is heard from it
// until it is replaced, and returns the keys of the URIs it carries, whose
// passes are to look again. conn.mu is held.
func distrustLocked(s *listenStream) []string {
	s.suspect = true
	keys := make([]string, len(s.uris))
	for i, raw := range s.uris {
		keys[i] = spelledKey(raw)
	}
	return keys
}

// listenEndPatience is the least a replacement waits for the server to be
// done with the stream it replaces (four times what the last stream took
// to be acknowledged, when longer; a tenth of RequestTimeout at most).
const listenEndPatience = 250 * time.Millisecond

// listenEnded records that the server is done with stream s (or that it
// may never say so), and has a replacement waiting for that sent. A stream
// that replaced s before the server answered it (s outlived its patience)
// may have lost to the server's clean-up of s the URIs it carries: the
// stream open now is no longer trusted, and every URI it carries is opened
// anew by its pass. A stream cut on its way (no answer: the connection or
// a proxy ended it, whoever cancelled it) is cleaned up by the server
// whenever it learns of the end, which nothing tells: the cut is recorded
// for suspectAfterCutLocked. A server that never answered tells nothing,
// and a stream is not replaced again for it: against a server that does
// not answer cancelled requests that would replace streams for ever.
func (c *Client) listenEnded(conn *connection, s *listenStream, how wire.Ending) {
	s.endOnce.Do(func() {
		close(s.ended)
		conn.mu.Lock()
		late := s.outlived != nil && how == wire.Answered
		if how == wire.Cut {
			conn.cutAt = time.Now()
		}
		var keys []string
		if cur := conn.listen; late && cur != nil && cur.out {
			keys = distrustLocked(cur)
		}
		conn.mu.Unlock()
		for _, key := range keys {
			c.mark(key)
		}
		c.markStream(0)
	})
}

// acknowledged records a notifications/subscriptions/acknowledged for the
// stream whose request id it names; one for a replaced stream is ignored.
// It reports whether a gap reader must start (noteGapLocked), and the keys
// to mark: those waiting on the stream, and those whose membership
// changed: asked for and left out (refused: taken off the wanted URIs, so
// each polls, saying why), carried by the stream acknowledged before it
// and left out, or acknowledged after their pass stopped asking.
func (conn *connection) acknowledged(uris []string, streamID string) (bool, []string) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	s := conn.listen
	if s == nil || !s.out || s.isAcked() || (streamID != "" && s.id != "" && streamID != s.id) {
		return false, nil
	}
	// A URI the stream did not ask for is not subscribed by naming it:
	// nothing would notify it.
	asked := uris[:0:0]
	for _, u := range uris {
		if s.carries(u) {
			asked = append(asked, u)
		}
	}
	now := time.Now()
	s.ackURIs, s.ackSet, s.ackedAt = asked, setOf(asked), now
	close(s.acked)
	conn.listenAcked, conn.listenTook = now, now.Sub(s.sent)
	var changed []string
	for key := range s.waiting {
		changed = append(changed, key)
	}
	s.waiting = nil
	before := setOf(conn.lastAcked)
	for _, u := range s.uris {
		if s.ackSet[u] {
			continue
		}
		if conn.wanted[u] {
			conn.refused[u] = streamRefusal{add: true, err: errorf("subscriptions/listen acknowledged without %s", u)}
			conn.unwantLocked(u)
			changed = append(changed, spelledKey(u))
		} else if before[u] {
			changed = append(changed, spelledKey(u))
		}
	}
	for _, u := range asked {
		if !conn.wanted[u] {
			// Its pass stopped asking (refused as late, or taken back):
			// acknowledged late.
			changed = append(changed, spelledKey(u))
		}
	}
	for raw := range conn.drop {
		if !s.carries(raw) {
			delete(conn.drop, raw)
		}
	}
	return conn.noteGapLocked(s), changed
}

// stopListen cancels conn's stream as its session is replaced or closed,
// and marks every key waiting on the stream or the stream sync: its pass
// runs on the next session once one is up, or asks again on this one,
// which sends nothing and refuses the ask once RequestTimeout old
// (askStream).
func (c *Client) stopListen(conn *connection) {
	conn.mu.Lock()
	conn.stopped = true
	marks := conn.cancelListenLocked()
	conn.mu.Unlock()
	for _, key := range marks {
		c.mark(key)
	}
}

// streamEnded handles a listen stream the server ended (err says how): the
// keys waiting on it are refused, the subscriptions it carried lost their
// notifications, so each key it carried is marked, and its pass opens
// anew one still open in push mode that no newer stream carries
// (needsReopen). A server that keeps ending acknowledged streams gets them
// back no faster than a doubling backoff allows, up to RevalidateEvery;
// the backoff starts afresh once a stream stayed up for a quarter of
// RevalidateEvery (streamSteady). One it refused, or ended before
// acknowledging it, is followed at once.
func (c *Client) streamEnded(conn *connection, stream *listenStream, err error) {
	conn.mu.Lock()
	current := conn.listen == stream
	var marks []string
	if !stream.isAcked() {
		marks = conn.refuseFirstLocked(stream, errorf("subscriptions/listen: %w", err))
	}
	if current {
		stream.cancel()
		conn.listen = nil
		conn.lastAcked = nil // what it carried is opened anew and read
	}
	var delay time.Duration
	if stream.isAcked() {
		if conn.ends == nil || time.Since(stream.ackedAt) >= c.opts.RevalidateEvery/streamSteady {
			conn.ends = retryPolicy{initial: time.Second, max: c.opts.RevalidateEvery, jitter: 0.5}.exponential()
		}
		delay = conn.ends.NextBackOff()
		conn.reopenAt = time.Now().Add(delay)
	}
	conn.mu.Unlock()
	if current {
		// Every generation it carried lost its notifications, whatever
		// carries it next: each is opened anew, a new generation, and read.
		c.mu.Lock()
		for _, raw := range stream.uris {
			if w := c.watches[spelledKey(raw)]; w != nil && w.raw == raw {
				w.streamEnded = true
			}
		}
		c.mu.Unlock()
	}
	for _, key := range marks {
		c.mark(key)
	}
	for _, raw := range stream.uris {
		c.queue.AddAfter(spelledKey(raw), delay)
	}
	c.markStream(0)
}

// reopenWait is how long the URIs of the stream the server ended last must
// wait before they are opened anew.
func (conn *connection) reopenWait() time.Duration {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return time.Until(conn.reopenAt)
}

// An acknowledged listen stream must stay up for RevalidateEvery /
// streamSteady for the backoff between re-establishments to start afresh
// when it ends: a server that ends streams faster costs at most about
// streamSteady re-establishments (each reading every URI again) per
// revalidation period.
const streamSteady = 4
