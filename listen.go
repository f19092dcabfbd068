package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// The 2026-07-28 listen stream, and what the server was told. A session of
// that era has one subscriptions/listen stream whose filter names every URI
// it notifies; a key's pass asks for its URI to be on it (serverSubscribe,
// relisten) or off it, and a replacement carries every URI wanted then.
// Before 2026-07-28 the server is told with resources/subscribe and
// unsubscribe, each counted until the transport is done with it (tracked),
// so that a late one is put right by the key's next pass (putRight).

// serverSubscribe asks the server for notifications on raw: resources/subscribe
// before 2026-07-28; from then on a subscriptions/listen stream whose filter
// names every subscribed URI, subscribed once the server acknowledges raw.
func (c *Client) serverSubscribe(ctx context.Context, conn *connection, raw string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if conn.era == EraLegacy {
		req := mcp.SubscribeRequest{}
		req.Params.URI = raw
		return conn.mc.Subscribe(c.tracked(ctx, conn, spelledKey(raw), raw), req)
	}
	return c.relisten(ctx, conn, raw, true) // not acknowledged: taken off the next stream
}

// serverUnsubscribe tells the server to stop notifying raw:
// resources/unsubscribe before 2026-07-28; from then on a listen stream
// without raw replaces the current one (or none, when nothing is left).
func (c *Client) serverUnsubscribe(ctx context.Context, conn *connection, raw string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if conn.era == EraLegacy {
		req := mcp.UnsubscribeRequest{}
		req.Params.URI = raw
		return conn.mc.Unsubscribe(c.tracked(ctx, conn, spelledKey(raw), raw), req)
	}
	return c.relisten(ctx, conn, raw, false)
}

// spelledKey is the key of raw, a spelling the client subscribed, so normalized
// once already.
func spelledKey(raw string) string {
	key, err := normalizeKey(raw)
	if err != nil {
		return raw
	}
	return key
}

// listenStream is one subscriptions/listen request, open until cancelled.
type listenStream struct {
	cancel context.CancelFunc
	uris   []string
	// id is the JSON-RPC id of its listen request, which the server puts
	// in _meta of every message on the stream; set just before it is sent.
	id      string
	acked   chan struct{} // closed at the stream's acknowledgement
	ackURIs []string      // the URIs it acknowledged, once acked is closed
	// sent and ackedAt are when it was sent and acknowledged; protected
	// by connection.mu.
	sent, ackedAt time.Time
	// carried is uris as a set, built when first asked for (carries);
	// ackSet is ackURIs as a set, written with it. Both are protected by
	// connection.mu.
	carried map[string]bool
	ackSet  map[string]bool
	// ended is closed once the server is done with the stream's request
	// (listenEnded); wired is set once its request reached the transport.
	// outlived is the stream that replaced it before that, and suspect
	// marks a stream sent before the server was done with one it
	// replaced, once that end came; both protected by connection.mu.
	ended    chan struct{}
	endOnce  sync.Once
	wired    atomic.Bool
	outlived *listenStream
	suspect  bool
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

// tracked counts a resources/subscribe or unsubscribe of raw as unsettled
// from the moment the transport sends it until it is done with it; one
// the caller gave up on may still reach the server after requests sent
// later, so the server-side subscription of raw is put right by key's next
// pass once the last one settles. One never sent (its context ended first)
// is not counted: nothing would ever settle it.
func (c *Client) tracked(ctx context.Context, conn *connection, key, raw string) context.Context {
	return wire.WithSettled(ctx, func() func(bool) {
		conn.mu.Lock()
		conn.unsettled[raw]++
		conn.mu.Unlock()
		return func(abandoned bool) {
			conn.mu.Lock()
			if abandoned {
				conn.markPutRightLocked(key, raw)
				conn.held[raw] = true
			}
			conn.unsettled[raw]--
			mark := false
			if conn.unsettled[raw] <= 0 {
				delete(conn.unsettled, raw)
				mark = conn.held[raw]
				delete(conn.held, raw)
			}
			conn.mu.Unlock()
			if mark {
				c.mark(key)
			}
		}
	})
}

// deferUntilSettled reports whether raw has unsettled requests; if so, the
// server-side subscription is put right once they settle.
func (conn *connection) deferUntilSettled(key, raw string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.unsettled[raw] == 0 {
		return false
	}
	conn.markPutRightLocked(key, raw)
	conn.held[raw] = true
	return true
}

// markPutRightLocked has raw, a spelling of key, put right by key's next
// pass; conn.mu is held.
func (conn *connection) markPutRightLocked(key, raw string) {
	if conn.putRights[key] == nil {
		conn.putRights[key] = make(map[string]bool)
	}
	conn.putRights[key][raw] = true
}

// toPutRight returns the spellings of key to put right now: marked, and
// with no request still out.
func (conn *connection) toPutRight(key string) []string {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	var raws []string
	for raw := range conn.putRights[key] {
		if conn.unsettled[raw] == 0 {
			raws = append(raws, raw)
		} else {
			conn.held[raw] = true
		}
	}
	slices.Sort(raws)
	return raws
}

// putRightDone takes back the mark of raw, put right.
func (conn *connection) putRightDone(key, raw string) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	delete(conn.putRights[key], raw)
	if len(conn.putRights[key]) == 0 {
		delete(conn.putRights, key)
	}
}

// puttingRight reports whether a spelling of key waits to be put right.
func (conn *connection) puttingRight(key string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return len(conn.putRights[key]) > 0
}

// setWanted adds raw to, or removes it from, the URIs the next stream must
// carry.
func (conn *connection) setWanted(raw string, wanted bool) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.wanted == nil {
		conn.wanted = make(map[string]bool)
	}
	switch {
	case wanted && !conn.wanted[raw]:
		conn.want = append(conn.want, raw)
		conn.wanted[raw] = true
		conn.wantEdits++
	case !wanted:
		conn.unwantLocked(raw)
	}
}

// unwantLocked takes raw off the URIs the next stream must carry; conn.mu
// is held.
func (conn *connection) unwantLocked(raw string) {
	if conn.wanted[raw] {
		conn.want = slices.DeleteFunc(conn.want, func(u string) bool { return u == raw })
		delete(conn.wanted, raw)
		conn.wantEdits++
	}
}

// relisten makes the connection's listen stream carry raw (add) or not, and
// returns once the server acknowledged a stream that does. A server keeps no
// subscription state across streams (2026-07-28), so a new stream carries
// every wanted URI; mcp-go (v1.2.1) cancels the old stream when it opens the
// new one, so notifications sent in between reach nobody, and every URI
// carried over is read again once the new stream is acknowledged.
// Replacements are serialized; a caller whose URI a newer stream already
// settled sends nothing.
func (c *Client) relisten(ctx context.Context, conn *connection, raw string, add bool) (err error) {
	conn.setWanted(raw, add)
	select {
	case conn.relisten <- struct{}{}:
	case <-ctx.Done():
		if add {
			conn.setWanted(raw, false)
		}
		return ctx.Err()
	}
	defer func() {
		if err != nil && add {
			// Not acknowledged: the next stream need not carry it. It is
			// taken off before the next replacement can go out: one sent
			// meanwhile would carry it, and be refused with it.
			conn.setWanted(raw, false)
		}
		<-conn.relisten
	}()
	conn.mu.Lock()
	old := conn.listen
	if old != nil && old.isAcked() && !old.suspect && old.ackSet[raw] == add && (add || !old.carries(raw)) {
		conn.mu.Unlock()
		return nil
	}
	if old == nil && !add {
		conn.mu.Unlock()
		return nil
	}
	conn.mu.Unlock()
	if !c.gather(ctx, conn) {
		return ctx.Err()
	}
	conn.mu.Lock()
	old = conn.listen
	if !add {
		// This pass decides raw: a Subscribe of it meanwhile puts it on a
		// stream of its own pass.
		conn.unwantLocked(raw)
	}
	if len(conn.want) == 0 {
		if old != nil {
			old.cancel()
			conn.listen = nil
		}
		conn.mu.Unlock()
		return nil
	}
	// The new stream is the connection's from now on, on its way (not
	// acknowledged: what it carries is coming, not heard), though it is
	// sent only once the server is done with the old one.
	lctx, cancel := context.WithCancel(c.ctx)
	stream := &listenStream{cancel: cancel, uris: slices.Clone(conn.want), acked: make(chan struct{}), sent: time.Now(), ended: make(chan struct{})}
	conn.listen = stream
	if old != nil {
		old.cancel()
	}
	patience := min(max(4*conn.listenTook, listenEndPatience), c.opts.RequestTimeout/10)
	conn.mu.Unlock()
	// The server is done with the old stream before the new one goes out:
	// a server may clean up an ended stream by unsubscribing its URIs for
	// the whole session (the official Go SDK does, once the stream's
	// handler returns), which would silence the same URIs on the new one.
	ended := old == nil || c.awaitListenEnd(old, patience)

	conn.mu.Lock()
	// What is wanted now, the wait included.
	stream.uris, stream.carried, stream.sent = slices.Clone(conn.want), nil, time.Now()
	if len(stream.uris) == 0 || conn.listen != stream {
		if conn.listen == stream {
			conn.listen = nil
		}
		conn.mu.Unlock()
		cancel()
		return nil
	}
	if !ended {
		select {
		case <-old.ended:
		default:
			// Not done yet: once it is, this stream may have lost what
			// the server cleaned up (listenEnded).
			old.outlived = stream
		}
	}
	conn.mu.Unlock()

	lctx = wire.WithRequestID(lctx, func(id string) {
		stream.wired.Store(true)
		conn.mu.Lock()
		stream.id = id
		conn.mu.Unlock()
	})
	lctx = wire.WithAnswerAwaited(lctx, c.opts.RequestTimeout, func(answered bool) {
		c.listenEnded(conn, stream, answered)
	})
	ended2 := make(chan error, 1)
	if !c.goAsync(func() {
		err := conn.mc.Listen(lctx, mcp.SubscriptionFilter{ResourceSubscriptions: stream.uris})
		if !stream.wired.Load() {
			c.listenEnded(conn, stream, true) // never sent: nothing to wait for
		}
		ended2 <- err
		if lctx.Err() == nil {
			// The server ended a stream nobody cancelled: every subscription
			// it carried has lost its notifications.
			c.notes.push(note{gen: conn.gen, conn: conn, streamEnded: stream})
		}
	}) {
		cancel()
		return ErrClientClosed
	}
	sent := time.Now()
	select {
	case <-stream.acked:
		conn.mu.Lock()
		conn.listenAcked = time.Now()
		conn.listenTook = conn.listenAcked.Sub(sent)
		conn.mu.Unlock()
	case err := <-ended2:
		if err == nil {
			err = errors.New("mcpsync: listen stream ended before it was acknowledged")
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	if stream.ackSet[raw] != add {
		if add {
			return fmt.Errorf("mcpsync: subscriptions/listen acknowledged without %s", raw)
		}
		return fmt.Errorf("mcpsync: subscriptions/listen still acknowledges %s", raw)
	}
	return nil
}

// listenEndPatience is the least a replacement waits for the server to be
// done with the stream it replaces (four times what the last stream took
// to be acknowledged, when longer; a tenth of RequestTimeout at most).
const listenEndPatience = 250 * time.Millisecond

// awaitListenEnd waits, at most patience, until the server is done with the
// cancelled stream s (its request settled: answered, or given up on where
// the transport cannot tell), and reports whether it is.
func (c *Client) awaitListenEnd(s *listenStream, patience time.Duration) bool {
	timer := time.NewTimer(patience)
	defer timer.Stop()
	select {
	case <-s.ended:
		return true
	case <-timer.C:
	case <-c.ctx.Done():
	}
	return false
}

// listenEnded records that the server is done with stream s. A stream that
// replaced s before the server answered it (s outlived its patience) may
// have lost to the server's clean-up of s the URIs it carries: the stream
// open now is no longer trusted, and every URI it carries is opened anew by
// its pass. A server that never answered tells nothing, and a stream is not
// replaced again for it: against a server that does not answer cancelled
// requests that would replace streams for ever.
func (c *Client) listenEnded(conn *connection, s *listenStream, answered bool) {
	s.endOnce.Do(func() {
		close(s.ended)
		conn.mu.Lock()
		late := s.outlived != nil && answered
		cur := conn.listen
		if late && cur != nil {
			cur.suspect = true
		}
		conn.mu.Unlock()
		if late && cur != nil {
			for _, raw := range cur.uris {
				c.mark(spelledKey(raw))
			}
		}
	})
}

// Replacements of a listen stream come in bursts (a caller subscribing a
// catalog): the URIs carried across them are read again once
// relistenQuiet passes without one, or relistenQuietMax after the first
// unread gap, whichever is sooner, each once however many gaps it crossed.
const (
	relistenQuiet    = time.Second
	relistenQuietMax = 10 * time.Second
)

// noteGapLocked, at the acknowledgement of stream, notes the URIs it
// carries over from the newest stream acknowledged before it: mcp-go
// (v1.2.1) ends the old stream before it sends the new one, so a change in
// between reaches neither, and each of them is read again (readGap).
// Reading them at every replacement would make a burst of n Subscribes
// cost O(n²) reads. It reports whether the session pass must be marked to
// read it. conn.mu is held.
func (conn *connection) noteGapLocked(stream *listenStream) bool {
	before := conn.lastAcked
	conn.lastAcked = stream.ackURIs
	for _, u := range before {
		if stream.ackSet[u] {
			if conn.gap == nil {
				conn.gap = make(map[string]bool)
			}
			conn.gap[u] = true
		}
	}
	if len(conn.gap) == 0 {
		return false
	}
	now := time.Now()
	if conn.gapSince.IsZero() {
		conn.gapSince = now
	}
	conn.gapLast = now
	start := !conn.gapReader
	conn.gapReader = true
	return start
}

// gather holds a stream replacement that follows another within its window
// back while Subscribes and Unsubscribes keep arriving, so that one stream
// carries them all: it returns once a tick passes without a change to the
// wanted URIs, or at the end of the window: CoalesceWindow or four times
// what the last stream took to be acknowledged, whichever is longer, and
// never more than a tenth of RequestTimeout. A stream carries every URI,
// so each replacement costs O(n), and a burst of n Subscribes, replaced
// one window at a time, spends about a fifth of its time on replacements
// at most. A replacement after a quiet spell goes at once. It reports
// false when ctx ends first.
func (c *Client) gather(ctx context.Context, conn *connection) bool {
	if c.opts.CoalesceWindow <= 0 {
		return ctx.Err() == nil
	}
	tick := max(c.opts.CoalesceWindow/10, time.Millisecond)
	conn.mu.Lock()
	edits, window, last := conn.wantEdits, max(c.opts.CoalesceWindow, 4*conn.listenTook), conn.listenAcked
	conn.mu.Unlock()
	// Callers queued behind this one wait within their RequestTimeout.
	window = min(window, c.opts.RequestTimeout/10)
	if last.IsZero() || time.Since(last) >= window {
		return ctx.Err() == nil
	}
	deadline := time.Now().Add(window)
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false
		case <-c.ctx.Done():
			return false
		}
		conn.mu.Lock()
		now := conn.wantEdits
		conn.mu.Unlock()
		if now == edits || !time.Now().Before(deadline) {
			return true
		}
		edits = now
		timer.Reset(tick)
	}
}

// acknowledged records a notifications/subscriptions/acknowledged for the
// stream whose request id it names; one for a replaced stream is ignored.
// It reports whether a gap reader must start (noteGapLocked), and the URIs
// whose pass must look again: those the stream asked for and the server
// left out that the stream before carried (no stream notifies them any
// more, so each is opened anew, and polled, should the server leave it out
// again), and those acknowledged after their Subscribe gave up waiting.
func (conn *connection) acknowledged(uris []string, streamID string) (bool, []string) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	s := conn.listen
	if s == nil || s.isAcked() || (streamID != "" && s.id != "" && streamID != s.id) {
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
	s.ackURIs, s.ackSet, s.ackedAt = asked, setOf(asked), time.Now()
	close(s.acked)
	var changed []string
	if len(conn.lastAcked) > 0 {
		before := setOf(conn.lastAcked)
		for _, u := range s.uris {
			if before[u] && !s.ackSet[u] {
				changed = append(changed, u)
			}
		}
	}
	for _, u := range asked {
		if !conn.wanted[u] {
			// Its Subscribe gave up waiting: acknowledged late.
			changed = append(changed, u)
		}
	}
	return conn.noteGapLocked(s), changed
}

func (conn *connection) stopListen() {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.listen != nil {
		conn.listen.cancel()
		conn.listen = nil
	}
}

// wants reports whether the listen stream carries raw or the next one would.
func (conn *connection) wants(raw string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.wanted[raw] || (conn.listen != nil && conn.listen.carries(raw))
}

// hearing reports whether the server acknowledged a listen stream of conn
// naming raw (heard), or whether one naming it went out less than patience
// ago and is not acknowledged yet (coming).
func (conn *connection) hearing(raw string, patience time.Duration) (heard, coming bool) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	s := conn.listen
	switch {
	case s == nil:
		return false, false
	case s.isAcked():
		return s.ackSet[raw] && !s.suspect, false
	}
	return false, s.carries(raw) && time.Since(s.sent) < patience
}

// streamEnded handles a listen stream the server ended: the subscriptions
// it carried lost their notifications, so each key it carried is marked,
// and its pass opens anew one still open in push mode that no newer stream
// carries (needsReopen). A server that keeps ending acknowledged streams
// gets them back no faster than a doubling backoff allows, up to
// RevalidateEvery; the backoff starts afresh once a stream stayed up for a
// quarter of RevalidateEvery (streamSteady). One it refused, or ended
// before acknowledging it, is followed at once.
func (c *Client) streamEnded(conn *connection, stream *listenStream) {
	conn.mu.Lock()
	current := conn.listen == stream
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
	for _, raw := range stream.uris {
		c.queue.AddAfter(spelledKey(raw), delay)
	}
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

// acknowledgedURIs returns the resource URIs a subscriptions/acknowledged
// notification names. It carries every URI of the stream, so the common
// shapes (mcp-go's in-process Go value, a decoded JSON array) are read
// without the JSON round trip of decodeParams.
func acknowledgedURIs(params map[string]any) []string {
	switch f := params["notifications"].(type) {
	case mcp.SubscriptionFilter:
		return f.ResourceSubscriptions
	case map[string]any:
		if uris, ok := stringList(f["resourceSubscriptions"]); ok {
			return uris
		}
	}
	var ack struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	decodeParams(params, &ack)
	return ack.Notifications.ResourceSubscriptions
}

// stringList returns v as a []string if it is a JSON array of strings.
func stringList(v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// currentStream reports whether id names the newest stream (or there is
// none whose id is known, so there is nothing to compare with).
func (conn *connection) currentStream(id string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.listen == nil || conn.listen.id == "" || conn.listen.id == id
}
