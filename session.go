package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
	"github.com/mcpsync/mcpsync/ledger"
)

// The session: connecting (dial, initialize, capability receipt), replacing
// a session (Reconnect), and the session pass. The session is the item of a
// queue of its own with one worker, apart from the URI keys, so that passes
// stuck on a server never hold it up: its pass pings the server every
// PingEvery (a probe asks for one at once), heals a lost session with a
// capped, jittered backoff, ends the catch-up after dropped notifications
// and reads what a listen stream replacement may have missed (readGap). It runs again when it asks
// to or when an event marks it: a loss, a probe, a flood, an
// acknowledgement. A lost session marks no URI key; once a new one is up,
// every watched key is marked once.

// sessionKey is the one item of the session's queue.
const sessionKey = "session"

// markSession has the session pass run after d (at once for 0).
func (c *Client) markSession(d time.Duration) { c.sessionq.AddAfter(sessionKey, d) }

// runSessionItem runs the pass of an item of the session's queue: the
// session's or the listen stream's (stream.go). Two workers serve the
// queue, so neither item waits on the other, and each is still worked on
// by one at a time.
func (c *Client) runSessionItem(key string) {
	if key == streamKey {
		c.runStream()
		return
	}
	c.runSession()
}

// runSession runs one session pass and has it run again when it asks to.
func (c *Client) runSession() {
	if again := c.syncSession(); again > 0 {
		c.markSession(again)
	}
}

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
	due := conn.gapLast.Add(replaceQuiet)
	if latest := conn.gapSince.Add(replaceQuietMax); latest.Before(due) {
		due = latest
	}
	wait := time.Until(due)
	if cur := conn.listen; wait <= 0 && cur != nil && !cur.isAcked() {
		// A replacement waits for its acknowledgement: the gap is read
		// once a stream carries it, not dropped.
		wait = replaceQuiet
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
		c.requestRead(spelledKey(u), ledger.TriggerRevalidate)
	}
	return 0
}

// Replacements of a listen stream come in bursts (a caller subscribing a
// catalog): the URIs carried across them are read again once
// replaceQuiet passes without one, or replaceQuietMax after the first
// unread gap, whichever is sooner, each once however many gaps it crossed.
const (
	replaceQuiet    = time.Second
	replaceQuietMax = 10 * time.Second
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
			backoff: retryPolicy{initial: p.Initial, max: p.Max, jitter: 1}.exponential()}
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
	c.markSession(0)
}

// flooded handles notifications dropped over Limits.NotificationsPerSecond
// on conn: a resources/updated may have been among them, and a pulse must
// never be lost, so every watched URI is degraded (saying why) and read
// again once a whole second passed without a drop (floodOver). It runs on
// the transport's read loop and only marks the session.
func (c *Client) flooded(conn *connection) {
	c.mu.Lock()
	if conn.flooding || c.closed || c.conn != conn {
		c.mu.Unlock()
		return // a replaced session's flood: the new one reads everything
	}
	conn.flooding = true
	conn.dropped = conn.mon.Dropped()
	for key := range c.watches {
		c.failing[key] = "notifications dropped over the rate limit; every subscription is read again once it falls"
	}
	c.mu.Unlock()
	c.markSession(time.Second)
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
		if c.skipRefresh(key, ledger.TriggerRevalidate) {
			// Outside the refresh fraction: not read, so not left saying
			// it will be.
			c.mu.Lock()
			delete(c.failing, key)
			c.mu.Unlock()
			continue
		}
		c.requestRead(key, ledger.TriggerRevalidate)
	}
	return 0
}

// connection is one initialized session.
type connection struct {
	mc   *mcpclient.Client
	tr   transport.Interface // the wrapped transport mc sends through
	gen  uint64
	era  Era
	caps ledger.CapabilityReceipt
	mon  *wire.Monitor // limits of the session; its Err ends the session

	// deaf, when set, says why the session cannot receive notifications
	// (so subscriptions poll, saying so).
	deaf     string
	lost     bool  // the loss was handled; protected by Client.mu
	flooding bool  // catching up after dropped notifications; protected by Client.mu
	dropped  int64 // notifications dropped when last looked at, while flooding; protected by Client.mu
	// pingAt is when the heartbeat pings next, probed asks for a ping now,
	// pings counts them (session.go); protected by Client.mu.
	pingAt time.Time
	probed bool
	pings  int

	mu sync.Mutex // protects the fields below
	// unsettled counts, per URI, the resources/subscribe and unsubscribe
	// requests the transport has not finished with; the caller may have
	// given up on some, which can still reach the server after requests
	// sent later.
	unsettled map[string]int
	// putRights holds, per key, the spellings whose server-side
	// subscription its next pass must put right (putRight), once their
	// requests are all settled: one was abandoned, an unsubscribe had to
	// wait for them or failed.
	putRights map[string]map[string]bool
	// held marks spellings whose put-right waits for requests still out:
	// the last to settle marks the key.
	held      map[string]bool
	want      []string        // URIs the next listen stream must carry, in the order wanted
	wanted    map[string]bool // the same URIs, to look one up
	wantEdits uint64          // changes to want so far
	// drop holds URIs a pass asked to take off the stream while the
	// current one carries them; awaiting, the keys whose ask waits for the
	// stream sync to take it up; refused, the refusals not yet read by
	// the pass that asked (stream.go). stopped is set once the session is
	// replaced or closed: no stream goes out on it any more.
	drop     map[string]bool
	awaiting map[string]streamAsk
	refused  map[string]streamRefusal
	stopped  bool
	// batchUntil is the end of the window in which a replacement is held
	// back while the wanted URIs keep changing, batchEdits wantEdits when
	// the stream sync last saw them change, at batchAt (holdLocked).
	batchUntil, batchAt time.Time
	batchEdits          uint64
	// listenAcked is when the newest acknowledged stream was acknowledged,
	// listenTook how long it took from request to acknowledgement.
	listenAcked time.Time
	listenTook  time.Duration
	listen      *listenStream // the newest stream; nil when none is open
	// gap holds URIs carried from one acknowledged stream to its
	// replacement: a change in between may have been notified to neither,
	// so each is read again once replacements pause (readGap).
	gap map[string]bool
	// lastAcked is what the newest acknowledged stream carried: a stream
	// acknowledged next notes as its gap what it carries of them, however
	// many unacknowledged streams came between.
	lastAcked []string
	gapReader bool      // a gap waits to be read (readGap)
	gapSince  time.Time // the oldest replacement whose gap is unread
	gapLast   time.Time // the newest one
	// ends paces the re-establishment of streams the server ended; nil
	// again once a stream is acknowledged. reopenAt is when the URIs of
	// the newest one ended may be opened anew.
	ends     *backoff.ExponentialBackOff
	reopenAt time.Time
	// cutAt is when the newest stream that ended with no answer from the
	// server was cut: the server may clean it up whenever it learns of
	// the end, up to RequestTimeout later (syncStream).
	cutAt time.Time
}

// connect dials and initializes a new session and tells the engine.
func (c *Client) connect(ctx context.Context) (*connection, error) {
	conn, err := c.connectOnce(ctx, false)
	if errors.Is(err, errNeedsListening) {
		conn, err = c.connectOnce(ctx, true)
	}
	return conn, err
}

// errNeedsListening: a legacy streamable HTTP session without the stream
// that carries server notifications; dial again asking for it.
var errNeedsListening = errors.New("mcpsync: dial again with a notification stream")

// connectOnce dials and initializes one session; listen asks the dialer for
// a standalone notification stream (HTTPDialer opens mcp-go's continuous
// listening, which pins a legacy revision, so it is asked for only once a
// server answered with one).
func (c *Client) connectOnce(ctx context.Context, listen bool) (*connection, error) {
	var self atomic.Pointer[connection]
	mon := wire.NewMonitor(c.opts.Limits.wire(), wireFaults{}, func(err error) {
		if conn := self.Load(); conn != nil && errors.Is(err, ErrNotificationRate) {
			c.flooded(conn)
		}
		if c.opts.OnFault != nil {
			c.opts.OnFault(err)
		}
	})
	tr, err := c.dial(wire.WithListening(wire.WithMonitor(ctx, mon), listen))
	if err != nil {
		return nil, errorf("dial: %w", err)
	}
	var options []mcpclient.ClientOption
	if c.opts.ProtocolVersion != "" {
		options = append(options, mcpclient.WithProtocolVersion(c.opts.ProtocolVersion))
	}
	options = append(options, c.opts.MCPOptions...)
	wrapped := wire.New(tr, rpcError, mon, wireMethods...)
	mc := mcpclient.NewClient(wrapped, options...)
	conn := &connection{
		mc: mc, tr: wrapped, mon: mon,
		unsettled: make(map[string]int), putRights: make(map[string]map[string]bool), held: make(map[string]bool),
		wanted: make(map[string]bool), drop: make(map[string]bool), awaiting: make(map[string]streamAsk), refused: make(map[string]streamRefusal),
	}
	self.Store(conn)
	// The handler is installed before Start, so no notification is lost
	// to a missing handler; it only queues, stamped with the session it
	// arrived on, whose generation is set once initialize is done.
	var gen atomic.Uint64
	mc.OnNotification(func(n mcp.JSONRPCNotification) {
		// list_changed is counted here, on the transport's read loop, before
		// any response that follows it is delivered: a scan that reads the
		// count after its last page cannot miss one the server sent first.
		c.countListChanged(n.Method)
		c.notes.push(note{gen: gen.Load(), conn: conn, n: n})
	})
	// mcp-go keeps the context of Start for the life of the transport (an
	// HTTP listening stream ends with it, a stdio server is killed with it),
	// so it gets the client's own; ctx bounds the handshake only.
	if err := mc.Start(c.ctx); err != nil {
		err = handshakeError(ctx, "start", tr, err)
		abandon(mc, wrapped)
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = c.opts.ProtocolVersion
	init.Params.ClientInfo = c.opts.ClientInfo
	res, err := mc.Initialize(ctx, init)
	if err != nil {
		err = handshakeError(ctx, "initialize", tr, err) // before it is ended
		abandon(mc, wrapped)
		return nil, err
	}
	version := mc.ProtocolVersion()
	if version == "" {
		version = res.ProtocolVersion
	}
	caps := ledger.CapabilityReceipt{
		ProtocolVersion: version,
		Server:          ledger.Implementation{Name: res.ServerInfo.Name, Version: res.ServerInfo.Version},
		ServerID:        c.opts.ServerID,
	}
	if caps.ServerID == "" {
		caps.ServerID = res.ServerInfo.Name
	}
	if r := res.Capabilities.Resources; r != nil {
		caps.Resources, caps.Subscribe, caps.ListChanged = true, r.Subscribe, r.ListChanged
	}
	_, inExperimental := res.Capabilities.Experimental[SnapshotCapability]
	_, inExtensions := res.Capabilities.Extensions[SnapshotCapability]
	caps.SnapshotList = inExperimental || inExtensions
	if EraOf(version) == EraLegacy && caps.Subscribe && isHTTP(tr) && !wire.Listens(tr) {
		// Before 2026-07-28, notifications travel only on the standalone
		// GET stream, which mcp-go opens only with continuous listening.
		if !listen {
			_ = mc.Close()
			return nil, errNeedsListening
		}
		conn.deaf = "streamable HTTP without a notification stream (mcp-go's continuous listening is off; HTTPDialer turns it on)"
	}
	conn.caps, err = c.engine.beginSessionOf(c, SessionInfo{SessionID: tr.GetSessionId(), Capabilities: caps})
	if err != nil {
		_ = mc.Close()
		return nil, err
	}
	conn.gen = conn.caps.SessionGeneration
	conn.era = EraOf(version)
	gen.Store(conn.gen)
	mc.OnConnectionLost(func(err error) { c.notes.push(note{gen: conn.gen, conn: conn, lost: err}) })
	return conn, nil
}

// handshakeError is the error of a handshake step that failed with err: a
// stdio server that exited or wrote something other than JSON-RPC says so
// (*ExitError, a *MessageError of FaultNotJSONRPC), rather than
// "transport closed".
func handshakeError(ctx context.Context, step string, tr transport.Interface, err error) error {
	if told := wire.Handshake(ctx, tr, err); told != nil {
		return told
	}
	return errorf("%s: %w", step, err)
}

// abandon ends the session of a server that failed its handshake: no
// grace periods (stdin, then SIGTERM) for a server that is broken, since
// Connect or the heal waits for it.
func abandon(mc *mcpclient.Client, tr transport.Interface) {
	if a, ok := tr.(interface{ Abort() error }); ok {
		_ = a.Abort()
	}
	_ = mc.Close()
}

// isHTTP reports whether tr is, or wraps (Unwrap), mcp-go's streamable
// HTTP transport.
func isHTTP(tr transport.Interface) bool {
	return wire.Wraps(tr, func(tr transport.Interface) bool {
		_, ok := tr.(*transport.StreamableHTTP)
		return ok
	})
}

func (c *Client) current() (*connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	return c.conn, nil
}

// wait waits d, and reports false when the client closes meanwhile.
func (c *Client) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// Reconnect replaces the session: a new connection and session generation,
// every subscription re-established as a new generation and re-read
// (notifications sent during the gap are lost by definition). Results of the
// old session are refused from now on. A lost session is reconnected
// without the caller (ClientOptions.Reconnect); Reconnect is for a caller
// who wants a new session now.
func (c *Client) Reconnect(ctx context.Context) error {
	return c.reconnect(ctx, nil)
}

// errSuperseded: a reconnect found the session it was to replace already
// replaced.
var errSuperseded = errors.New("mcpsync: session already replaced")

// reconnect replaces the current session, or, with expect set, that session
// only (errSuperseded once another reconnect replaced it). It fails only
// when no new session could be opened; subscriptions that cannot be
// re-established are reported, and their errors returned, once the session
// is up.
func (c *Client) reconnect(ctx context.Context, expect *connection) error {
	select {
	case c.reconnecting <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.reconnecting }()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	old := c.conn
	c.mu.Unlock()
	if expect != nil && old != expect {
		return errSuperseded
	}
	c.stopListen(old)
	c.mu.Lock()
	lost := old.lost
	c.mu.Unlock()
	if a, ok := old.tr.(interface{ Abort() error }); ok && lost {
		// A lost server gets no grace periods (stdin, then SIGTERM): it is
		// dead or hung, and healing must not wait for it.
		_ = a.Abort()
	} else {
		_ = old.mc.Close()
	}
	conn, err := c.connect(ctx)
	if err != nil {
		// The old session is closed and no new one is up: that is a lost
		// session, healed (or failed) like any other.
		c.lose(old, err)
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = conn.mc.Close()
		return ErrClientClosed
	}
	c.conn = conn
	c.health.Reconnects++
	c.metrics.reconnects.Add(context.Background(), 1)
	c.setHealth(ConnectionUp, "")
	// Every watched key is marked once the session is up: its pass opens
	// it in the new session, a new generation, and reads it again.
	keys := slices.Collect(maps.Keys(c.watches))
	waiters := make([]*waiter, len(keys))
	for i, key := range keys {
		waiters[i] = c.wantLocked(key)
	}
	c.mu.Unlock()
	if c.opts.Logger != nil {
		c.opts.Logger.Info("mcpsync: session opened", "sessionGeneration", conn.gen, "protocol", conn.caps.ProtocolVersion)
	}
	c.markSession(0) // the new session's heartbeat
	for _, key := range keys {
		c.mark(key)
	}
	if expect != nil {
		return nil // healing: nobody waits
	}
	var errs []error
	for i, key := range keys {
		if err := c.awaitPass(ctx, key, waiters[i]).err; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
