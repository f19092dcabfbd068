package mcpsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/ledger"
)

// ConnectionState says whether a Client's session is keeping the copy fresh.
type ConnectionState string

// Connection states.
const (
	// ConnectionUp: the session answers; subscriptions are kept fresh.
	ConnectionUp ConnectionState = "UP"
	// ConnectionHealing: the session was lost and the client is reconnecting.
	// Every subscription is degraded meanwhile.
	ConnectionHealing ConnectionState = "HEALING"
	// ConnectionFailed: the session was lost and reconnecting gave up (or is
	// switched off); only a Reconnect by the caller brings it back.
	ConnectionFailed ConnectionState = "FAILED"
	// ConnectionClosed: Close was called.
	ConnectionClosed ConnectionState = "CLOSED"
)

// Health is what a Client knows of its connection.
type Health struct {
	State ConnectionState `json:"state"`
	// Reason is why the state was entered (the loss, the last failure).
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// SessionGeneration is the current session's generation.
	SessionGeneration uint64 `json:"sessionGeneration"`
	// Reconnects counts sessions opened after the first; FailedReads counts
	// reads that got no answer.
	Reconnects  uint64 `json:"reconnects"`
	FailedReads uint64 `json:"failedReads"`
	// Degraded is how long the connection has not been up, summed over
	// every loss, the current one included.
	Degraded time.Duration `json:"degradedNanos"`
}

// ReconnectPolicy says how a Client heals a lost session. The zero value
// reconnects for ever, with a backoff from 500 ms doubling to 30 s.
type ReconnectPolicy struct {
	// Disabled leaves a lost session lost (ConnectionFailed) until the caller
	// calls Reconnect.
	Disabled bool
	// MaxAttempts and MaxElapsed end healing (ConnectionFailed, ErrReconnectGaveUp)
	// after that many failed attempts or that much time; 0 means no limit.
	MaxAttempts int
	MaxElapsed  time.Duration
	// Initial and Max bound the backoff between attempts: it starts at
	// Initial and doubles, with full jitter, up to Max. 0 means 500 ms and
	// 30 s.
	Initial, Max time.Duration
}

// ReadError is a read that got no answer (a transport error, a timeout),
// or a read that could not be recorded: one a notification, a follow-up or a
// periodic read asks for whose write failed, or one whose answer could not
// be written. It is told to ClientOptions.OnError; the read is tried again
// while its subscription is open.
type ReadError struct {
	URI     string
	Trigger ledger.Trigger
	Err     error
}

func (e *ReadError) Error() string { return errPrefix + e.text() }

func (e *ReadError) text() string {
	return fmt.Sprintf("read %s (%s): %s", e.URI, e.Trigger, causeText(e.Err))
}

func (e *ReadError) Unwrap() error { return e.Err }

// ReopenError is a watched URI whose subscription could not be opened
// again after its session or its listen stream changed (a ledger write
// failed). It is told to ClientOptions.OnError; until the URI's
// subscription is open again, Client.Lookup says the copy is degraded, and
// the URI's next revalidation tries again.
type ReopenError struct {
	URI string
	Err error
}

func (e *ReopenError) Error() string { return errPrefix + e.text() }

func (e *ReopenError) text() string {
	return fmt.Sprintf("open %s again: %s", e.URI, causeText(e.Err))
}

func (e *ReopenError) Unwrap() error { return e.Err }

// ConnectionError reports the loss of a session, or a failed attempt to
// open its successor.
type ConnectionError struct {
	// SessionGeneration is the generation that was lost (for a failed
	// attempt, the last one that was up).
	SessionGeneration uint64
	// Attempt is 0 for the loss itself, then the number of the failed
	// reconnect attempt.
	Attempt int
	Err     error
}

func (e *ConnectionError) Error() string { return errPrefix + e.text() }

func (e *ConnectionError) text() string {
	if e.Attempt == 0 {
		return fmt.Sprintf("session %d lost: %s", e.SessionGeneration, causeText(e.Err))
	}
	return fmt.Sprintf("reconnect attempt %d failed: %s", e.Attempt, causeText(e.Err))
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// errPingTimeout is the loss a heartbeat reports when the server did not
// answer within PingTimeout: a half-open connection, or a hung server.
var errPingTimeout = errors.New("no answer to ping")

// transportLost reports whether err says the connection itself is gone, as
// opposed to one request failing: the transport is closed (a stdio server
// exited), the HTTP session is gone, or nothing accepts connections.
func transportLost(err error) bool {
	var netErr *net.OpError
	return errors.Is(err, transport.ErrTransportClosed) || errors.Is(err, transport.ErrSessionTerminated) ||
		errors.Is(err, ErrFramingViolation) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &netErr)
}

// report tells the caller of a failure: OnError and the logger.
func (c *Client) report(err error) {
	if c.opts.Logger != nil {
		c.opts.Logger.Warn("mcpsync", "err", err)
	}
	if c.opts.OnError != nil {
		c.errs.push(err)
	}
}

// errorQueue hands failures to OnError, and outcomes to OnOutcome, on a
// goroutine of its own, in order: the goroutines that fail or read are the
// client's, which Close waits for and which may hold the reconnect token
// or a URI's lock, so a callback that calls Close or Reconnect, or panics,
// must not run on them.
type errorQueue struct {
	mu    sync.Mutex // protects items and marked
	items []event
	// marked holds the keys queued for the Handler (markChanged), each
	// once, with the evidence of a deletion confirmed meanwhile.
	marked map[string]*ledger.DeletionEvidence
	ready  chan struct{} // holds a token while items is non-empty
	done   chan struct{} // closed when the delivering goroutine ends
	// goroutine is the ID of the delivering goroutine (goroutineID), 0
	// until it starts: a Close on it, from inside a callback, does not
	// wait for it, and a Close on any other goroutine does.
	goroutine atomic.Uint64
}

// onDeliverer reports whether the caller runs on the delivering goroutine,
// that is, inside a callback.
func (q *errorQueue) onDeliverer() bool {
	id := q.goroutine.Load()
	return id != 0 && id == goroutineID()
}

// goroutineID returns the ID of the calling goroutine, read from the
// header of its stack trace ("goroutine 42 [running]:"): Go names a
// goroutine nowhere else. The runtime never gives an ID twice.
func goroutineID() uint64 {
	var buf [32]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	var id uint64
	for _, d := range b {
		if d < '0' || d > '9' {
			break
		}
		id = id*10 + uint64(d-'0')
	}
	return id
}

// event is one callback to make: OnError with err, OnOutcome with out,
// the Handler's for key (tell) or for a sweep of keys (handleSweep).
type event struct {
	err   error
	out   *Outcome
	key   string
	sweep *sweep
}

func (q *errorQueue) push(err error) { q.add(event{err: err}) }

func (q *errorQueue) pushOutcome(out Outcome) { q.add(event{out: &out}) }

func (q *errorQueue) add(ev event) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	q.wake()
}

// wake tells the delivering goroutine that items has something.
func (q *errorQueue) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// deliverErrors runs OnError for every queued failure until the client is
// stopped (closed, none of its goroutines running), then delivers what is
// left and ends.
func (c *Client) deliverErrors() {
	q := &c.errs
	defer close(q.done)
	q.goroutine.Store(goroutineID())
	for {
		select {
		case <-q.ready:
		case <-c.stopped:
		}
		q.mu.Lock()
		items := q.items
		q.items = nil
		q.mu.Unlock()
		for _, ev := range items {
			c.deliver(ev)
		}
		select {
		case <-c.stopped:
			// No goroutine of the client is left to tell anything: once
			// what they told is delivered, delivery ends.
			q.mu.Lock()
			empty := len(q.items) == 0
			q.mu.Unlock()
			if empty {
				return
			}
		default:
		}
	}
}

// deliver makes one callback; a panic in OnOutcome or the Handler is
// reported to OnError, one in OnError is logged.
func (c *Client) deliver(ev event) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("mcpsync: a callback panicked: %v", p)
			if c.opts.Logger != nil {
				c.opts.Logger.Error("mcpsync", "err", err)
			}
			if ev.err == nil && c.opts.OnError != nil {
				c.deliver(event{err: err})
			}
		}
	}()
	switch {
	case ev.out != nil:
		c.opts.OnOutcome(*ev.out)
	case ev.key != "":
		c.handleMarked(ev.key)
	case ev.sweep != nil:
		c.handleSweep(ev.sweep)
	default:
		c.opts.OnError(ev.err)
	}
}

// Health returns the state of the client's connection.
func (c *Client) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.health
	h.SessionGeneration = c.conn.gen
	h.FailedReads = c.failedReads.Load()
	if h.State == ConnectionHealing || h.State == ConnectionFailed {
		h.Degraded += time.Since(h.Since)
	}
	return h
}

// setHealth moves the connection state; c.mu must be held.
func (c *Client) setHealth(state ConnectionState, reason string) {
	now := time.Now()
	if was := c.health.State; was == ConnectionHealing || was == ConnectionFailed {
		c.health.Degraded += now.Sub(c.health.Since)
	}
	c.health.State, c.health.Reason, c.health.Since = state, reason, now
	c.progress.notify()
}

// degradedReason says why key is not being kept fresh now, or "".
func (c *Client) degradedReason(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health.State != ConnectionUp && c.health.State != ConnectionClosed {
		return fmt.Sprintf("session %s: %s", c.health.State, c.health.Reason)
	}
	if why := c.unopened[key]; why != "" {
		return why
	}
	if why := c.owedReasonLocked(key); why != "" {
		return why
	}
	return c.failing[key]
}

// lose handles the loss of conn: once per connection, and only for the
// current one, the client moves to HEALING and reconnects in the background
// (or to FAILED when reconnecting is off).
func (c *Client) lose(conn *connection, err error) {
	c.mu.Lock()
	if c.closed || c.conn != conn || conn.lost {
		c.mu.Unlock()
		return
	}
	conn.lost = true
	if fatal := conn.mon.Err(); fatal != nil {
		c.endedBy = fatal
	}
	state := ConnectionHealing
	if c.opts.Reconnect.Disabled {
		state = ConnectionFailed
	}
	c.setHealth(state, err.Error())
	c.mu.Unlock()
	c.report(&ConnectionError{SessionGeneration: conn.gen, Err: err})
	if state == ConnectionHealing {
		c.markSession(0) // its pass heals
	}
}

// ping sends one JSON-RPC ping through the session's transport. mcp-go
// (v1.2.1) sends none on a 2026-07-28 session, where the method is gone;
// any response, an error for an unknown method included, proves liveness.
func (conn *connection) ping(ctx context.Context, n int) error {
	_, err := conn.tr.SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: "2.0", ID: mcp.NewRequestId("mcpsync-ping-" + strconv.Itoa(n)), Method: "ping",
	})
	return err
}

// failedRead records a read that got no answer. One that Close ended
// (it closes the transport first) failed nothing a caller can act on:
// OnError is not told.
func (c *Client) failedRead(conn *connection, t ledger.Ticket, err error) {
	c.failedReads.Add(1)
	c.mu.Lock()
	closed := c.closed
	c.failing[t.URI] = err.Error()
	c.mu.Unlock()
	if closed {
		return
	}
	c.report(&ReadError{URI: t.URI, Trigger: t.Trigger, Err: err})
	switch {
	case transportLost(err):
		c.lose(conn, err)
	case errors.Is(err, context.DeadlineExceeded):
		c.probe(conn)
	}
}

// answered records a read the server answered.
func (c *Client) answered(key string) {
	c.mu.Lock()
	delete(c.failing, key)
	c.mu.Unlock()
}
