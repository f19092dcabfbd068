package mcpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// SchemaCapabilityReceipt is the schema of capability receipts.
const SchemaCapabilityReceipt = "capabilityReceipt.v1"

// CapabilityReceipt records what a server declared when a session was
// initialized. Subscriptions keep the receipt of the session they were opened
// in, so a decision to poll rather than subscribe can be traced to the server's
// own words.
type CapabilityReceipt struct {
	Schema          string         `json:"schema"`
	ProtocolVersion string         `json:"protocolVersion"`
	Server          Implementation `json:"server"`
	Resources       bool           `json:"resources"`
	Subscribe       bool           `json:"subscribe"`
	ListChanged     bool           `json:"listChanged"`
	// SnapshotList is set when the server declared the snapshot extension
	// (SnapshotCapability).
	SnapshotList      bool      `json:"snapshotList"`
	SessionGeneration uint64    `json:"sessionGeneration"`
	ReceivedAt        time.Time `json:"receivedAt"`
}

// SessionInfo describes a freshly (re)initialized MCP session to the engine.
type SessionInfo struct {
	// SessionID is the transport's session id, if it has one.
	SessionID    string
	Capabilities CapabilityReceipt
}

// Era is a family of MCP protocol revisions that behave alike for sync.
type Era string

// Protocol eras.
const (
	// EraLegacy: 2025-06-18 and 2025-11-25. resources/subscribe and
	// resources/unsubscribe; not found is -32002; a missing or empty
	// nextCursor ends a listing.
	EraLegacy Era = "legacy"
	// EraModern: 2026-07-28 and later. subscriptions/listen; not found is
	// -32602; "" is a valid cursor and only an absent nextCursor ends a
	// listing; results may carry ttlMs and cacheScope hints.
	EraModern Era = "modern"
)

// EraOf returns the era of a negotiated protocol version. Versions are
// dates, so they compare as strings.
func EraOf(protocolVersion string) Era {
	if protocolVersion >= "2026-07-28" {
		return EraModern
	}
	return EraLegacy
}

// Dialer opens a new mcp-go client transport (in-process, stdio, streamable
// HTTP, …). The Client calls it at every (re)connect and owns what it returns.
type Dialer func(ctx context.Context) (transport.Interface, error)

// ClientOptions configure a Client. The zero value (or nil) means defaults;
// Principal is the one field without a default.
type ClientOptions struct {
	// Engine keeps the local copy; nil means a new engine with default
	// options. The Client reports every queued read it sends (Sending), so
	// it turns Options.ConfirmSends on for the engine it drives; a caller
	// that also issues queued reads on that engine must report them too.
	Engine *Engine
	// Principal is the subject every read of this client is bound to.
	Principal string
	// ClientInfo introduces the client to servers; zero means "mcpsync".
	ClientInfo Implementation
	// ProtocolVersion pins a protocol revision ("2025-06-18", "2025-11-25",
	// "2026-07-28"); empty lets mcp-go negotiate.
	ProtocolVersion string
	// RevalidateEvery is the interval of the revalidation read of every open
	// subscription, which bounds staleness when notifications are lost.
	// 0 means 5 minutes.
	RevalidateEvery time.Duration
	// PollEvery is the interval of periodic reads where the server cannot
	// subscribe. 0 means 30 seconds.
	PollEvery time.Duration
	// Jitter is the fraction by which intervals vary at random, so that many
	// URIs are not read in lock step. 0 means 0.2; it must be below 1.
	Jitter float64
	// Seed seeds the jitter; 0 means a random seed.
	Seed uint64
	// RequestTimeout bounds every request the client sends; 0 means 30 s.
	RequestTimeout time.Duration
	// CoalesceWindow is how long a queued read (after a notification, a
	// revalidation tick, a follow-up) waits before it goes out, so that
	// duplicate notifications arriving meanwhile cost no extra read. It adds
	// that much latency to each update. 0 means 10 ms; negative means none.
	CoalesceWindow time.Duration
	// OnOutcome, if set, is told of every fenced read, outside every lock.
	OnOutcome func(Outcome)
	// Scanner configures discovery scans; nil means defaults.
	Scanner *ScannerOptions
	// Limits bound what a server can make the client spend; nil means the
	// defaults (Limits).
	Limits *Limits
	// OnFault, if set, is told of every refusal of hostile input as it
	// happens: a *LimitError, *MessageError, *FramingError or
	// *DegradedError. It runs on the transport's read loop and must not
	// block or call the client.
	OnFault func(error)
	// RefreshFraction is the share of subscriptions the client refreshes,
	// in [0, 1], chosen by a stable hash of the URI (SetRefreshFraction);
	// nil means 1, every subscription. new(0.05) starts with 5%.
	RefreshFraction *float64
}

// Client keeps the local copy of one MCP server's resources in sync over an
// mcp-go client connection: it subscribes (or polls where the server cannot),
// turns notifications into coalesced, fenced reads, revalidates on a jittered
// schedule and re-establishes everything after a reconnect.
//
// Notifications are handed from mcp-go's handler, which runs on the
// transport's read loop, to the client's own queue at once; the client never
// calls mcp-go from inside a handler.
type Client struct {
	opts   ClientOptions
	engine *Engine
	dial   Dialer

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the client starts

	mu      sync.Mutex // protects conn, watches, closed, rng
	conn    *connection
	watches map[string]*watch // normalized URI -> subscription this client opened
	closed  bool
	rng     *rand.Rand

	scanner     *Scanner
	notes       noteQueue
	listChanged map[string]*atomic.Uint64 // list method -> list_changed seen; fixed keys
	rollout     rollout                   // refresh fraction (rollout.go)
}

// connection is one initialized session.
type connection struct {
	mc   *mcpclient.Client
	gen  uint64
	era  Era
	caps CapabilityReceipt
	mon  *wire.Monitor // limits of the session; its Err ends the session

	// The subscriptions/listen stream of a 2026-07-28 session.
	mu       sync.Mutex    // protects the fields below
	uris     []string      // URIs the current stream carries
	listen   *listenStream // nil when no stream is open
	ackSeen  []string      // URIs the newest acknowledgement named
	ackFresh bool          // an acknowledgement arrived since the stream opened
	ackCh    chan struct{} // closed and replaced at each acknowledgement
	ends     int           // streams the server ended, for backoff
	streamID string        // subscription id the newest acknowledgement carried
}

// watch is a subscription the client opened: the URI as the caller spelled
// it (servers may be picky) and the timer loop of its reads.
type watch struct {
	raw  string
	stop context.CancelFunc
}

// wireMethods are the methods whose JSON-RPC errors the client branches on.
var wireMethods = []string{
	string(mcp.MethodResourcesRead), string(mcp.MethodResourcesList),
	string(mcp.MethodResourcesTemplatesList), string(mcp.MethodToolsList),
	string(mcp.MethodPromptsList), string(mcp.MethodResourcesSubscribe),
	string(mcp.MethodResourcesUnsubscribe),
}

func rpcError(method string, code int, message string, data json.RawMessage) error {
	return &RPCError{Method: method, Code: code, Message: message, Data: data}
}

// Connect dials, initializes a session and returns a Client. Close it when
// done. ctx bounds the dial and the handshake only; the connection lives
// until Close.
func Connect(ctx context.Context, dial Dialer, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Principal == "":
		return nil, fmt.Errorf("%w: ClientOptions.Principal is required", ErrInvalidSubject)
	case o.Jitter < 0 || o.Jitter >= 1:
		return nil, fmt.Errorf("mcpsync: Jitter %v is outside [0, 1)", o.Jitter)
	case o.RevalidateEvery < 0 || o.PollEvery < 0 || o.RequestTimeout < 0:
		return nil, errors.New("mcpsync: negative interval")
	}
	if o.Engine == nil {
		e, err := NewEngine(nil)
		if err != nil {
			return nil, err
		}
		o.Engine = e
	}
	// Coverage of duplicate pulses is a property of this read path, not
	// of how the engine was built: every engine the Client drives gets it.
	o.Engine.queue.confirm()
	if o.ClientInfo.Name == "" {
		o.ClientInfo = Implementation{Name: "mcpsync", Version: "0.1.0"}
	}
	if o.RevalidateEvery == 0 {
		o.RevalidateEvery = 5 * time.Minute
	}
	if o.PollEvery == 0 {
		o.PollEvery = 30 * time.Second
	}
	if o.Jitter == 0 {
		o.Jitter = 0.2
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.CoalesceWindow == 0 {
		o.CoalesceWindow = 10 * time.Millisecond
	}
	limits, err := o.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Limits = &limits
	if o.Scanner == nil || o.Scanner.MaxPages == 0 {
		so := ScannerOptions{}
		if o.Scanner != nil {
			so = *o.Scanner
		}
		so.MaxPages = limits.MaxScanPages
		o.Scanner = &so
	}
	scanner, err := NewScanner(o.Scanner)
	if err != nil {
		return nil, err
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c := &Client{
		opts: o, engine: o.Engine, dial: dial, scanner: scanner,
		watches: make(map[string]*watch),
		listChanged: map[string]*atomic.Uint64{
			string(mcp.MethodResourcesList): {}, string(mcp.MethodResourcesTemplatesList): {},
			string(mcp.MethodToolsList): {}, string(mcp.MethodPromptsList): {},
		},
		rng: rand.New(rand.NewPCG(seed, seed>>1|1)),
	}
	if err := c.initRollout(o.RefreshFraction); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.notes.init()
	conn, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.conn = conn
	c.wg.Add(1)
	go c.pump()
	return c, nil
}

// Engine returns the engine that holds the local copy.
func (c *Client) Engine() *Engine { return c.engine }

// Capabilities returns the capability receipt of the current session.
func (c *Client) Capabilities() CapabilityReceipt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.caps
}

// connect dials and initializes a new session and tells the engine.
func (c *Client) connect(ctx context.Context) (*connection, error) {
	mon := wire.NewMonitor(c.opts.Limits.wire(), c.opts.OnFault)
	tr, err := c.dial(wire.WithMonitor(ctx, mon))
	if err != nil {
		return nil, fmt.Errorf("mcpsync: dial: %w", err)
	}
	var options []mcpclient.ClientOption
	if c.opts.ProtocolVersion != "" {
		options = append(options, mcpclient.WithProtocolVersion(c.opts.ProtocolVersion))
	}
	mc := mcpclient.NewClient(wire.New(tr, rpcError, mon, wireMethods...), options...)
	conn := &connection{mc: mc, mon: mon, ackCh: make(chan struct{})}
	// The handler is installed before Start, so no notification is lost
	// to a missing handler; it only queues, stamped with the session it
	// arrived on, whose generation is set once initialize is done.
	var gen atomic.Uint64
	mc.OnNotification(func(n mcp.JSONRPCNotification) { c.notes.push(note{gen: gen.Load(), conn: conn, n: n}) })
	// mcp-go keeps the context of Start for the life of the transport (an
	// HTTP listening stream ends with it, a stdio server is killed with it),
	// so it gets the client's own; ctx bounds the handshake only.
	if err := mc.Start(c.ctx); err != nil {
		_ = mc.Close()
		return nil, fmt.Errorf("mcpsync: start: %w", err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = c.opts.ProtocolVersion
	init.Params.ClientInfo = mcp.Implementation{Name: c.opts.ClientInfo.Name, Version: c.opts.ClientInfo.Version}
	res, err := mc.Initialize(ctx, init)
	if err != nil {
		_ = mc.Close()
		return nil, fmt.Errorf("mcpsync: initialize: %w", err)
	}
	version := mc.ProtocolVersion()
	if version == "" {
		version = res.ProtocolVersion
	}
	caps := CapabilityReceipt{
		ProtocolVersion: version,
		Server:          Implementation{Name: res.ServerInfo.Name, Version: res.ServerInfo.Version},
	}
	if r := res.Capabilities.Resources; r != nil {
		caps.Resources, caps.Subscribe, caps.ListChanged = true, r.Subscribe, r.ListChanged
	}
	_, inExperimental := res.Capabilities.Experimental[SnapshotCapability]
	_, inExtensions := res.Capabilities.Extensions[SnapshotCapability]
	caps.SnapshotList = inExperimental || inExtensions
	conn.caps, err = c.engine.BeginSession(SessionInfo{SessionID: tr.GetSessionId(), Capabilities: caps})
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

// Close unsubscribes nothing (the server forgets a session that ends), stops
// every goroutine of the client and closes the connection. Cached versions
// stay in the engine. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conn := c.conn
	c.mu.Unlock()
	c.cancel()
	conn.stopListen()
	err := conn.mc.Close()
	c.wg.Wait()
	return err
}

func (c *Client) current() (*connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClientClosed
	}
	return c.conn, nil
}

var errClientClosed = errors.New("mcpsync: client closed")

// Subscribe opens a subscription generation for uri and sends the first
// read. Where the server can subscribe it does; where it cannot, or the
// subscribe fails, the subscription polls (ModePoll), and notifications that
// arrive anyway still trigger fenced reads. Every open subscription also gets
// a jittered revalidation read, and its staleness bound is published on it.
func (c *Client) Subscribe(ctx context.Context, uri string) (Subscription, error) {
	conn, err := c.current()
	if err != nil {
		return Subscription{}, err
	}
	return c.subscribe(ctx, conn, uri, TriggerInitial)
}

func (c *Client) subscribe(ctx context.Context, conn *connection, raw string, trigger Trigger) (Subscription, error) {
	sub, err := c.engine.Subscribe(raw, c.opts.Principal)
	if err != nil {
		return Subscription{}, err
	}
	if sub.State != StateSubscribing {
		return sub, nil // already open in this session
	}
	mode := ModePoll
	if conn.caps.Subscribe {
		if err := c.serverSubscribe(ctx, conn, raw); err == nil {
			mode = ModePush
		}
	}
	if _, err := c.engine.Activate(raw, mode); err != nil && !errors.Is(err, ErrIllegalTransition) {
		return Subscription{}, err
	}
	interval := c.opts.RevalidateEvery
	trig := TriggerRevalidate
	if mode == ModePoll {
		interval, trig = c.opts.PollEvery, TriggerPoll
	}
	bound := interval + time.Duration(float64(interval)*c.opts.Jitter)
	sub, err = c.engine.PublishStalenessBound(raw, bound)
	if err != nil {
		return Subscription{}, err
	}
	c.startWatch(sub.URI, raw, interval, trig)
	c.request(sub.URI, trigger)
	return c.engine.Subscription(raw)
}

// serverSubscribe asks the server for notifications on raw: resources/subscribe
// before 2026-07-28; from then on a subscriptions/listen stream whose filter
// names every subscribed URI, subscribed once the server acknowledges raw.
func (c *Client) serverSubscribe(ctx context.Context, conn *connection, raw string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if conn.era == EraLegacy {
		req := mcp.SubscribeRequest{}
		req.Params.URI = raw
		return conn.mc.Subscribe(ctx, req)
	}
	acked, err := c.relisten(ctx, conn, func(uris []string) []string { return append(uris, raw) })
	if err != nil {
		return err
	}
	if !slices.Contains(acked, raw) {
		return fmt.Errorf("mcpsync: subscriptions/listen acknowledged without %s", raw)
	}
	return nil
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
		return conn.mc.Unsubscribe(ctx, req)
	}
	acked, err := c.relisten(ctx, conn, func(uris []string) []string {
		return slices.DeleteFunc(uris, func(u string) bool { return u == raw })
	})
	if err != nil {
		return err
	}
	if slices.Contains(acked, raw) {
		return fmt.Errorf("mcpsync: subscriptions/listen still acknowledges %s", raw)
	}
	return nil
}

// listenStream is one subscriptions/listen request, open until cancelled.
type listenStream struct {
	cancel context.CancelFunc
	uris   []string
}

// relisten replaces the connection's listen stream with one for the URIs
// change returns, and waits for its acknowledgement; it returns the URIs the
// server acknowledged. A server keeps no subscription state across streams
// (2026-07-28), so the new stream carries every URI, and cancelling the old
// one is what stops notifications for a URI left out. With no URI left, no
// stream is opened.
func (c *Client) relisten(ctx context.Context, conn *connection, change func([]string) []string) ([]string, error) {
	conn.mu.Lock()
	uris := change(slices.Clone(conn.uris))
	conn.uris = uris
	if conn.listen != nil {
		conn.listen.cancel()
		conn.listen = nil
	}
	if len(uris) == 0 {
		conn.mu.Unlock()
		return nil, nil
	}
	lctx, cancel := context.WithCancel(c.ctx)
	stream := &listenStream{cancel: cancel, uris: slices.Clone(uris)}
	conn.listen = stream
	// Acknowledgements of the stream just cancelled may still be queued;
	// only one that arrives after this point answers the new stream.
	conn.ackSeen, conn.ackFresh = nil, false
	conn.mu.Unlock()

	ended := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := conn.mc.Listen(lctx, mcp.SubscriptionFilter{ResourceSubscriptions: stream.uris})
		ended <- err
		if lctx.Err() == nil {
			// The server ended a stream nobody cancelled: every subscription
			// it carried has lost its notifications.
			c.notes.push(note{gen: conn.gen, conn: conn, streamEnded: stream})
		}
	}()
	for {
		conn.mu.Lock()
		fresh, seen, next := conn.ackFresh, conn.ackSeen, conn.ackCh
		conn.mu.Unlock()
		if fresh {
			return seen, nil
		}
		select {
		case <-next:
		case err := <-ended:
			if err == nil {
				err = errors.New("mcpsync: listen stream ended before it was acknowledged")
			}
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// acknowledged records a notifications/subscriptions/acknowledged.
func (conn *connection) acknowledged(uris []string, streamID string) {
	conn.mu.Lock()
	conn.ackSeen, conn.ackFresh = uris, true
	if streamID != "" {
		conn.streamID = streamID
	}
	close(conn.ackCh)
	conn.ackCh = make(chan struct{})
	conn.mu.Unlock()
}

func (conn *connection) stopListen() {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.listen != nil {
		conn.listen.cancel()
		conn.listen = nil
	}
}

// Unsubscribe closes the URI's subscription generation: the fence is frozen
// first (BeginClose), then the server is told. A lost or timed-out ack
// leaves the generation UNSUBSCRIBE_UNKNOWN, silent and never reopened.
// Cached content stays. Unsubscribe is idempotent.
func (c *Client) Unsubscribe(ctx context.Context, uri string) (Subscription, error) {
	conn, err := c.current()
	if err != nil {
		return Subscription{}, err
	}
	before, err := c.engine.Subscription(uri)
	if err != nil {
		return Subscription{}, err
	}
	if before.CloseEpoch != 0 {
		return before, nil
	}
	if _, err := c.engine.BeginClose(uri); err != nil {
		return Subscription{}, err
	}
	raw := c.stopWatch(before.URI, uri)
	acked := true
	// A legacy subscribe that failed may still have been recorded by the
	// server (and its notifications keep coming), so the server is told
	// whenever it can subscribe at all; a 2026-07-28 stream carries only
	// the URIs it acknowledged.
	tell := before.Mode == ModePush || (conn.era == EraLegacy && conn.caps.Subscribe)
	if tell && before.SessionGeneration == conn.gen {
		acked = c.serverUnsubscribe(ctx, conn, raw) == nil
	}
	return c.engine.FinishClose(uri, acked)
}

// Read sends one fenced read of a subscribed URI now, outside the
// coalescing queue, and returns what the fence decided.
func (c *Client) Read(ctx context.Context, uri string) (Outcome, error) {
	t, err := c.engine.IssueTicket(uri, TriggerRevalidate)
	if err != nil {
		return Outcome{}, err
	}
	return c.read(ctx, t)
}

// Lookup returns the current version of uri if it may be served to the
// client's principal (Engine.Lookup).
func (c *Client) Lookup(uri string) (Entry, error) {
	return c.engine.Lookup(c.opts.Principal, uri)
}

// request asks the engine for a coalesced read and dispatches it if one is
// due now.
func (c *Client) request(key string, trigger Trigger) {
	if c.skipRefresh(key, trigger) {
		return // outside the refresh fraction (rollout.go)
	}
	if t, ok, err := c.engine.RequestRead(key, trigger); err == nil && ok {
		c.dispatch(t)
	}
}

// dispatch runs a read and its follow-ups in the background.
func (c *Client) dispatch(t Ticket) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for next := &t; next != nil; {
			if !c.coalesce() {
				_, _ = c.engine.Fail(*next) // closing: release the queue
				return
			}
			out, _ := c.read(c.ctx, *next)
			next = out.FollowUp
		}
	}()
}

// coalesce waits CoalesceWindow before a queued read goes out, so that
// duplicate pulses arriving meanwhile are covered by it (the engine has
// ConfirmSends, which Connect turns on). It reports false when the client
// closes meanwhile.
func (c *Client) coalesce() bool {
	if c.opts.CoalesceWindow <= 0 {
		return c.ctx.Err() == nil
	}
	timer := time.NewTimer(c.opts.CoalesceWindow)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// read sends the read of ticket t on the session that issued it, and hands
// the answer to the fence. A read of a session that is gone is abandoned:
// the fence would refuse its answer anyway.
func (c *Client) read(ctx context.Context, t Ticket) (Outcome, error) {
	c.mu.Lock()
	conn, raw := c.conn, t.URI
	if w := c.watches[t.URI]; w != nil {
		raw = w.raw
	}
	c.mu.Unlock()
	if conn.gen != t.SessionGeneration {
		next, err := c.engine.Fail(t)
		return Outcome{FollowUp: next}, err
	}
	c.engine.Sending(t)
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	req := mcp.ReadResourceRequest{}
	req.Params.URI = raw
	res, err := conn.mc.ReadResource(rctx, req)
	cancel()
	var result ReadResult
	var rpc *RPCError
	var lim *LimitError
	switch {
	case err == nil:
		result = ReadResultFromMCP(res)
	case errors.As(err, &rpc) && rpc.ResourceNotFound():
		result = NotFoundResult()
	case errors.As(err, &lim) && lim.Method == string(mcp.MethodResourcesRead):
		result = limitResult(lim) // refused with a receipt; the session goes on
	default:
		next, ferr := c.engine.Fail(t)
		return Outcome{FollowUp: next}, errors.Join(fmt.Errorf("mcpsync: read %s: %w", raw, err), ferr)
	}
	out, err := c.engine.Complete(t, result)
	if c.opts.OnOutcome != nil {
		c.opts.OnOutcome(out)
	}
	return out, err
}

// startWatch runs the jittered revalidation (or poll) loop of a URI.
func (c *Client) startWatch(key, raw string, interval time.Duration, trigger Trigger) {
	ctx, stop := context.WithCancel(c.ctx)
	c.mu.Lock()
	if old := c.watches[key]; old != nil {
		old.stop()
	}
	c.watches[key] = &watch{raw: raw, stop: stop}
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		timer := time.NewTimer(c.jittered(interval))
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				c.request(key, trigger)
				timer.Reset(c.jittered(interval))
			}
		}
	}()
}

func (c *Client) stopWatch(key, fallback string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[key]
	if w == nil {
		return fallback
	}
	w.stop()
	delete(c.watches, key)
	return w.raw
}

// jittered returns d varied by up to ±Jitter.
func (c *Client) jittered(d time.Duration) time.Duration {
	c.mu.Lock()
	f := 1 + c.opts.Jitter*(2*c.rng.Float64()-1)
	c.mu.Unlock()
	return time.Duration(float64(d) * f)
}

// Reconnect replaces the session: a new connection and session generation,
// every subscription re-established as a new generation and re-read
// (notifications sent during the gap are lost by definition). Results of the
// old session are refused from now on.
func (c *Client) Reconnect(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClientClosed
	}
	old := c.conn
	c.mu.Unlock()
	old.stopListen()
	_ = old.mc.Close()
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.conn = conn
	raws := make(map[string]string, len(c.watches))
	for key, w := range c.watches {
		raws[key] = w.raw
	}
	c.mu.Unlock()
	var errs []error
	for _, raw := range raws {
		if _, err := c.subscribe(ctx, conn, raw, TriggerReconnect); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ListChanged returns how many list_changed notifications the client has
// seen for a list method ("resources/list", "resources/templates/list",
// "tools/list", "prompts/list"); discovery compares it before and after each
// pass.
func (c *Client) ListChanged(method string) uint64 {
	if n := c.listChanged[method]; n != nil {
		return n.Load()
	}
	return 0
}

// note is one notification as it arrived, stamped with its session.
type note struct {
	gen  uint64
	conn *connection
	n    mcp.JSONRPCNotification
	lost error // set instead of n when the connection was lost
	// streamEnded is set instead of n when the server ended a listen stream.
	streamEnded *listenStream
}

// noteQueue is an unbounded FIFO: push never blocks, so mcp-go's read loop
// never waits on the client (mcp-go's own buffer drops notifications when
// full, which is one of the losses the revalidation read exists for).
type noteQueue struct {
	mu    sync.Mutex // protects items
	items []note
	ready chan struct{} // holds a token while items is non-empty
}

func (q *noteQueue) init() { q.ready = make(chan struct{}, 1) }

func (q *noteQueue) push(n note) {
	q.mu.Lock()
	q.items = append(q.items, n)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *noteQueue) drain() []note {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// pump handles queued notifications in arrival order.
func (c *Client) pump() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.notes.ready:
		}
		for _, n := range c.notes.drain() {
			c.handle(n)
		}
	}
}

func (c *Client) handle(n note) {
	c.mu.Lock()
	current := c.conn
	c.mu.Unlock()
	switch {
	case n.lost != nil:
		return // the caller decides when to Reconnect; reads fail meanwhile
	case n.streamEnded != nil:
		if n.conn == current {
			c.wg.Add(1)
			go c.reestablish(n.conn, n.streamEnded)
		}
		return
	}
	params := n.n.Params.AdditionalFields
	switch n.n.Method {
	case string(mcp.MethodNotificationResourceUpdated):
		var updated mcp.ResourceUpdatedNotificationParams
		decodeParams(params, &updated)
		uri := updated.URI
		if n.gen != current.gen {
			c.engine.RefuseNotification(uri, n.gen, ReasonGenerationMismatch, n.n.Method)
			return
		}
		if id := streamIDOf(n.n); id != "" && !n.conn.currentStream(id) {
			// A stream this client replaced: the server may still deliver
			// on it for a moment, and the new stream carries the same URIs,
			// so reading again would only amplify.
			c.engine.RefuseNotification(uri, n.gen, ReasonGenerationMismatch, "notification of a replaced subscriptions/listen stream")
			return
		}
		if c.skipRefresh(uri, TriggerNotification) {
			return // outside the refresh fraction (rollout.go)
		}
		t, ok, err := c.engine.Notify(uri)
		switch {
		case err != nil:
			c.engine.RefuseNotification(uri, n.gen, ReasonNotSubscribed, err.Error())
		case ok:
			c.dispatch(t)
		}
	case string(mcp.MethodNotificationResourcesListChanged):
		// One notification covers resources and their templates.
		c.listChanged[string(mcp.MethodResourcesList)].Add(1)
		c.listChanged[string(mcp.MethodResourcesTemplatesList)].Add(1)
	case string(mcp.MethodNotificationToolsListChanged):
		c.listChanged[string(mcp.MethodToolsList)].Add(1)
	case string(mcp.MethodNotificationPromptsListChanged):
		c.listChanged[string(mcp.MethodPromptsList)].Add(1)
	case mcp.MethodNotificationSubscriptionsAcknowledged:
		var ack struct {
			Notifications mcp.SubscriptionFilter `json:"notifications"`
		}
		decodeParams(params, &ack)
		n.conn.acknowledged(ack.Notifications.ResourceSubscriptions, streamIDOf(n.n))
	}
}

// reestablish handles a listen stream the server ended: the subscriptions it
// carried lost their notifications, so each generation is closed (the
// server kept no state to unsubscribe) and a new one is opened and re-read.
// A server that keeps ending streams gets them back no faster than a
// doubling backoff allows, up to RevalidateEvery.
func (c *Client) reestablish(conn *connection, stream *listenStream) {
	defer c.wg.Done()
	conn.mu.Lock()
	if conn.listen != stream {
		conn.mu.Unlock()
		return // already replaced by a newer stream
	}
	stream.cancel()
	conn.listen, conn.uris = nil, nil
	conn.ends++
	delay := min(time.Second<<min(conn.ends-1, 16), c.opts.RevalidateEvery)
	conn.mu.Unlock()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-c.ctx.Done():
		return
	case <-timer.C:
	}
	for _, raw := range stream.uris {
		if _, err := c.engine.BeginClose(raw); err != nil {
			continue
		}
		if _, err := c.engine.FinishClose(raw, true); err != nil {
			continue
		}
		_, _ = c.subscribe(c.ctx, conn, raw, TriggerReconnect)
	}
}

// decodeParams reads notification params into dst through JSON. mcp-go's
// in-process transport (v1.2.1) hands params over as the server's Go values
// (an mcp.SubscriptionFilter, say) rather than decoded JSON, so a type
// assertion on map[string]any would see nothing; a JSON round trip reads
// both alike. A notification that does not decode leaves dst zero.
func decodeParams(params map[string]any, dst any) {
	raw, err := json.Marshal(params)
	if err == nil {
		_ = json.Unmarshal(raw, dst)
	}
}

// Scan lists kind completely over the current session, as Scanner.Scan
// says: two identical clean passes at least, or one pass with snapshot proof
// where the server negotiated the snapshot extension. list_changed
// notifications seen during a pass force another.
func (c *Client) Scan(ctx context.Context, kind ListKind) (Catalog, error) {
	conn, err := c.current()
	if err != nil {
		return Catalog{}, err
	}
	method := kind.Method()
	timeout := c.opts.Limits.ScanTimeout
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		&LimitError{Limit: LimitScanDuration, Max: timeout.Milliseconds(), Observed: timeout.Milliseconds()})
	defer cancel()
	cat, err := c.scanner.Scan(ctx, kind, conn.era, conn.caps, c.pages(conn, kind),
		func() uint64 { return c.ListChanged(method) })
	if se, ok := errors.AsType[*ScanError](err); ok && errors.Is(se.Err, context.DeadlineExceeded) {
		if cause := context.Cause(ctx); errors.Is(cause, ErrScanTimeout) {
			se.Err = cause // name the limit, not only the deadline
		}
	}
	return cat, err
}

// SessionErr returns the error that ended the current session on the
// client's side (a *FramingError), or nil while it can go on.
func (c *Client) SessionErr() error {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	return conn.mon.Err()
}

// pages fetches list pages of kind on conn. The cursor goes out untouched;
// the page is read from the raw result, since mcp-go's typed result cannot
// tell an absent nextCursor from "" (see wire.WithRawResult). mcp-go also
// omits an empty cursor from its request (omitempty), so a 2026-07-28 server
// that hands out "" gets its first page again, which the scanner's cycle
// detection reports rather than a short listing.
func (c *Client) pages(conn *connection, kind ListKind) PageFunc {
	return func(ctx context.Context, cursor *string) (Page, error) {
		ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
		var raw json.RawMessage
		ctx = wire.WithRawResult(ctx, &raw)
		var paged mcp.PaginatedRequest
		if cursor != nil {
			paged.Params.Cursor = mcp.Cursor(*cursor)
		}
		var err error
		switch kind {
		case KindResources:
			_, err = conn.mc.ListResourcesByPage(ctx, mcp.ListResourcesRequest{PaginatedRequest: paged})
		case KindResourceTemplates:
			_, err = conn.mc.ListResourceTemplatesByPage(ctx, mcp.ListResourceTemplatesRequest{PaginatedRequest: paged})
		case KindTools:
			_, err = conn.mc.ListToolsByPage(ctx, mcp.ListToolsRequest{PaginatedRequest: paged})
		case KindPrompts:
			_, err = conn.mc.ListPromptsByPage(ctx, mcp.ListPromptsRequest{PaginatedRequest: paged})
		default:
			return Page{}, fmt.Errorf("mcpsync: unknown list kind %q", kind)
		}
		if err != nil {
			return Page{}, err
		}
		return pageFromRaw(kind, raw)
	}
}

// listResult is the part of a list result discovery reads.
type listResult struct {
	Resources []struct {
		URI      string `json:"uri"`
		Name     string `json:"name"`
		MIMEType string `json:"mimeType"`
	} `json:"resources"`
	ResourceTemplates []struct {
		URITemplate string `json:"uriTemplate"`
		Name        string `json:"name"`
		MIMEType    string `json:"mimeType"`
	} `json:"resourceTemplates"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Prompts []struct {
		Name string `json:"name"`
	} `json:"prompts"`
	NextCursor *string        `json:"nextCursor"`
	Meta       map[string]any `json:"_meta"`
}

func pageFromRaw(kind ListKind, raw json.RawMessage) (Page, error) {
	var r listResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return Page{}, fmt.Errorf("mcpsync: %s result: %w", kind.Method(), err)
	}
	p := Page{NextCursor: r.NextCursor}
	if id, ok := r.Meta[SnapshotIDMetaKey].(string); ok {
		p.SnapshotID = id
	}
	switch kind {
	case KindResources:
		for _, x := range r.Resources {
			p.Items = append(p.Items, Descriptor{URI: x.URI, Name: x.Name, MIMEType: x.MIMEType})
		}
	case KindResourceTemplates:
		for _, x := range r.ResourceTemplates {
			p.Items = append(p.Items, Descriptor{URITemplate: x.URITemplate, Name: x.Name, MIMEType: x.MIMEType})
		}
	case KindTools:
		for _, x := range r.Tools {
			p.Items = append(p.Items, Descriptor{Name: x.Name})
		}
	case KindPrompts:
		for _, x := range r.Prompts {
			p.Items = append(p.Items, Descriptor{Name: x.Name})
		}
	}
	return p, nil
}

// Reconcile hands a resources catalog's verdicts to the engine
// (Catalog.Reconcile) and sends the reconcile reads it asks for.
func (c *Client) Reconcile(cat Catalog) (Reconciliation, error) {
	rec, err := cat.Reconcile(c.engine)
	for _, t := range rec.Tickets {
		c.dispatch(t)
	}
	return rec, err
}

// streamIDOf returns the subscriptions/listen stream a 2026-07-28
// notification names in _meta, or "" when it names none. mcp-go decodes
// _meta into Params.Meta off the wire; its in-process transport leaves it
// among the other params.
func streamIDOf(n mcp.JSONRPCNotification) string {
	id, ok := n.Params.Meta[mcp.MetaKeySubscriptionID]
	if !ok {
		var m struct {
			Meta map[string]any `json:"_meta"`
		}
		decodeParams(n.Params.AdditionalFields, &m)
		id, ok = m.Meta[mcp.MetaKeySubscriptionID]
	}
	if !ok || id == nil {
		return ""
	}
	return fmt.Sprint(id)
}

// currentStream reports whether id names the newest acknowledged stream (or
// no stream was acknowledged yet, so there is nothing to compare with).
func (conn *connection) currentStream(id string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.streamID == "" || conn.streamID == id
}
