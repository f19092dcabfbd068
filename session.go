package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The session pass. The connection is one more item of the controller's
// queue (sessionKey), worked on by the same workers as the URI keys: its
// pass pings the server every PingEvery (a probe asks for one at once), heals
// a lost session with a capped, jittered backoff, and ends the catch-up after
// dropped notifications. It runs again when it asks to or when an event
// marks it: a loss, a probe, a flood.

// sessionKey is the queue item of the session; no URI key is empty.
const sessionKey = ""

// healing is how a lost session is being healed; protected by Client.mu.
type healing struct {
	lost    *connection // the session being healed; nil when none is
	attempt int
	start   time.Time
	backoff *backoff.ExponentialBackOff
}

// syncSession takes the session's next step and returns when to look again.
func (c *Client) syncSession() time.Duration {
	c.mu.Lock()
	conn, closed := c.conn, c.closed
	lost, flooding := conn.lost, conn.flooding
	c.mu.Unlock()
	if closed {
		return 0
	}
	if lost {
		return c.heal(conn)
	}
	var again time.Duration
	if flooding {
		again = c.floodOver(conn)
	}
	for _, next := range []time.Duration{c.readGap(conn), c.heartbeat(conn)} {
		if next > 0 && (again == 0 || next < again) {
			again = next
		}
	}
	return again
}

// readGap reads, once replacements of conn's listen stream paused, every
// URI carried across a replacement that the current stream still carries,
// and otherwise says when to look again (0: no gap waits).
func (c *Client) readGap(conn *connection) time.Duration {
	conn.mu.Lock()
	if !conn.gapReader {
		conn.mu.Unlock()
		return 0
	}
	due := conn.gapLast.Add(relistenQuiet)
	if latest := conn.gapSince.Add(relistenQuietMax); latest.Before(due) {
		due = latest
	}
	wait := time.Until(due)
	if cur := conn.listen; wait <= 0 && cur != nil && !cur.isAcked() {
		// A replacement waits for its acknowledgement: the gap is read
		// once a stream carries it, not dropped.
		wait = relistenQuiet
	}
	if wait > 0 {
		conn.mu.Unlock()
		return wait
	}
	var uris []string
	cur := conn.listen
	for u := range conn.gap {
		if cur != nil && cur.isAcked() && cur.ackSet[u] {
			uris = append(uris, u)
		}
	}
	conn.gap, conn.gapSince, conn.gapLast, conn.gapReader = nil, time.Time{}, time.Time{}, false
	conn.mu.Unlock()
	slices.Sort(uris)
	for _, u := range uris {
		c.requestRead(spelledKey(u), TriggerRevalidate)
	}
	return 0
}

// heal makes one attempt to replace the lost session conn. It reports when
// to try again, or 0 when it is healed, healed by someone else, closed, or
// given up (ConnectionFailed, ErrReconnectGaveUp).
func (c *Client) heal(conn *connection) time.Duration {
	p := c.opts.Reconnect
	if p.Disabled {
		return 0
	}
	c.mu.Lock()
	h := &c.healing
	if h.lost != conn {
		*h = healing{lost: conn, start: time.Now(),
			backoff: &backoff.ExponentialBackOff{InitialInterval: p.Initial, RandomizationFactor: 1, Multiplier: 2, MaxInterval: p.Max}}
	}
	h.attempt++
	attempt, start, b := h.attempt, h.start, h.backoff
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	err := c.reconnect(ctx, conn)
	cancel()
	if err == nil || errors.Is(err, errSuperseded) || errors.Is(err, ErrClientClosed) || c.isClosed() {
		return 0 // healed, healed by someone else, or closed: nothing failed
	}
	c.report(&ConnectionError{SessionGeneration: conn.gen, Attempt: attempt, Err: err})
	if (p.MaxAttempts > 0 && attempt >= p.MaxAttempts) || (p.MaxElapsed > 0 && time.Since(start) >= p.MaxElapsed) {
		c.mu.Lock()
		c.setHealth(ConnectionFailed, err.Error())
		c.mu.Unlock()
		c.report(fmt.Errorf("%w after %d attempts: %w", ErrReconnectGaveUp, attempt, err))
		return 0
	}
	return b.NextBackOff()
}

// heartbeat pings the server of conn when a ping is due (every PingEvery,
// or at once when probed) and returns when the next one is. A ping without
// an answer within PingTimeout, or a transport that is gone, is the loss of
// the session. Any answer counts, an error included: it proves the server
// reads and writes.
func (c *Client) heartbeat(conn *connection) time.Duration {
	if c.opts.PingEvery <= 0 {
		return 0
	}
	c.mu.Lock()
	now := time.Now()
	if conn.pingAt.IsZero() {
		conn.pingAt = now.Add(c.opts.PingEvery) // a new session answered its initialize
	}
	due := conn.probed || !now.Before(conn.pingAt)
	conn.probed = false
	if due {
		conn.pings++
	}
	n, at := conn.pings, conn.pingAt
	c.mu.Unlock()
	if !due {
		return time.Until(at)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.PingTimeout)
	err := conn.ping(ctx, n)
	cancel()
	c.mu.Lock()
	current := c.conn == conn && !c.closed
	conn.pingAt = time.Now().Add(c.opts.PingEvery)
	c.mu.Unlock()
	if err != nil && current && c.ctx.Err() == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w within %v", errPingTimeout, c.opts.PingTimeout)
		}
		c.lose(conn, err)
		return 0
	}
	return c.opts.PingEvery
}

// probe asks the session pass of conn to ping now (a read timed out: the
// session may be half-open).
func (c *Client) probe(conn *connection) {
	c.mu.Lock()
	conn.probed = true
	c.mu.Unlock()
	c.mark(sessionKey)
}

// flooded handles notifications dropped over Limits.NotificationsPerSecond
// on conn: a resources/updated may have been among them, and a pulse must
// never be lost, so every watched URI is degraded (saying why) and read
// again once a whole second passed without a drop (floodOver). It runs on
// the transport's read loop and only marks the session.
func (c *Client) flooded(conn *connection) {
	c.mu.Lock()
	if conn.flooding || c.closed {
		c.mu.Unlock()
		return
	}
	conn.flooding = true
	conn.dropped = conn.mon.Dropped()
	for key := range c.watches {
		c.failing[key] = "notifications dropped over the rate limit; every subscription is read again once it falls"
	}
	c.mu.Unlock()
	c.queue.AddAfter(sessionKey, time.Second)
}

// floodOver ends a flood on conn once a whole second passed without a
// dropped notification, reading every watched URI again, and otherwise
// says when to look again.
func (c *Client) floodOver(conn *connection) time.Duration {
	now := conn.mon.Dropped()
	c.mu.Lock()
	if now != conn.dropped {
		conn.dropped = now
		c.mu.Unlock()
		return time.Second
	}
	conn.flooding = false
	keys := slices.Collect(maps.Keys(c.watches))
	c.mu.Unlock()
	for _, key := range keys {
		c.requestRead(key, TriggerRevalidate)
	}
	return 0
}
