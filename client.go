package mcpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"

	"github.com/mcpsync/mcpsync/internal/wire"
	"github.com/mcpsync/mcpsync/internal/workqueue"
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
	// ServerID names the deployment of the server (ClientOptions.ServerID);
	// a restart resumes only the subscriptions opened with the same one.
	ServerID    string `json:"serverId,omitempty"`
	Resources   bool   `json:"resources"`
	Subscribe   bool   `json:"subscribe"`
	ListChanged bool   `json:"listChanged"`
	// SnapshotList is set when the server declared the snapshot extension
	// (SnapshotCapability).
	SnapshotList      bool      `json:"snapshotList"`
	SessionGeneration uint64    `json:"sessionGeneration"`
	ReceivedAt        time.Time `json:"receivedAt"`
	Engine            string    `json:"engine,omitempty"` // Engine.ID of the engine whose session this is
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
// Subject is the one field without a default.
type ClientOptions struct {
	// Engine keeps the local copy; nil means a new engine with default
	// options. The Client reports every queued read it sends (Sending), so
	// it turns Options.ConfirmSends on for the engine it drives; a caller
	// that also issues queued reads on that engine must report them too.
	Engine *Engine
	// Subject is the authorization subject (a user, a service account)
	// every read of this client is bound to: Lookup serves its versions to
	// it alone, and RevokeSubject revokes them.
	Subject string
	// ServerID names the server deployment this client talks to (its URL,
	// say). It is recorded on every subscription the client opens, and a
	// restart resumes only the subscriptions opened with the same
	// ServerID and Subject. Empty means the name the server reports,
	// which is enough while a ledger serves one deployment of each server
	// product; set it when one ledger is shared by workers of two
	// deployments of the same server, or each would resume, and tombstone,
	// the other's resources.
	ServerID string
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
	// RetryInitial and RetryMax bound the backoff between tries of a read
	// that got no answer: it starts at RetryInitial, doubles with jitter,
	// and stops growing at RetryMax. 0 means 250 ms and 30 s.
	RetryInitial, RetryMax time.Duration
	// CloseTimeout bounds how long Close waits for the client's goroutines;
	// 0 means 10 s.
	CloseTimeout time.Duration
	// Reconnect says how a lost session is healed; the zero value
	// reconnects for ever with a capped, jittered backoff.
	Reconnect ReconnectPolicy
	// PingEvery is the interval of the heartbeat that finds a session whose
	// server died or hangs; 0 means 15 s, negative means none. PingTimeout
	// is how long a ping may go unanswered; 0 means 10 s.
	PingEvery, PingTimeout time.Duration
	// OnError, if set, is told of every failure the client handles on its
	// own: a *ReadError for a read that got no answer, a *ConnectionError
	// for a lost session or a failed reconnect attempt, ErrReconnectGaveUp,
	// and, on a ledger shared by many workers, a read or notification of a
	// URI another worker took (ErrNotLeaseholder).
	// It runs on a goroutine of its own, one failure at a time and in
	// order, outside every lock; it may call any method of the Client,
	// Close and Reconnect included.
	OnError func(error)
	// Logger, if set, logs those failures and session changes; nil is
	// silent.
	Logger *slog.Logger
	// MeterProvider receives the client's metrics (see metrics.go); nil
	// means none. The library depends on the OpenTelemetry metric API
	// only: the caller brings the SDK.
	MeterProvider metric.MeterProvider
	// MCPOptions are passed to mcp-go's client at every (re)connect: its
	// sampling, roots or elicitation handlers, say. Session gives the live
	// session to call tools on.
	MCPOptions []mcpclient.ClientOption
	// ReconnectReads bounds the rate of the reads a reconnect sends (one
	// per subscription), so a restarted server is not stampeded; 0 means
	// 100 per second, with bursts of 20.
	ReconnectReads rate.Limit
	// OnOutcome, if set, is told of every fenced read, outside every lock,
	// on the goroutine that delivers OnError too, one call at a time, in
	// the order the reads ended: Outcome.Changed says the read made new
	// content current. It may call Close. When reads of one URI overlap,
	// their outcomes may still arrive out of order (the fence accepted
	// them in order, and refused the older of two that crossed); treat an
	// outcome as a wake-up and Lookup the URI, or follow the outbox
	// (Engine.Consume), which is in order per URI. A panic in it is
	// recovered and reported to OnError.
	OnOutcome func(Outcome)
	// Scanner configures discovery scans; nil means defaults.
	Scanner *ScannerOptions
	// Deletion says which evidence confirms a deletion when Reconcile hands
	// a catalog to the engine (deletion.go). The zero value,
	// DeletionDefault, corroborates where the server cannot prove (it did
	// not negotiate the snapshot extension) and waits for proof where it
	// can; DeletionProvenOnly never corroborates.
	Deletion DeletionPolicy
	// Limits bound what a server can make the client spend; nil means the
	// defaults (Limits).
	Limits *Limits
	// OnFault, if set, is told of every refusal of hostile input as it
	// happens: a *LimitError, *MessageError, *FramingError or
	// *DegradedError. It runs on the transport's read loop and must not
	// block or call the client.
	OnFault func(error)
	// NoResume leaves closed the subscriptions an earlier process left open
	// in the engine's ledger. Without it, Connect resumes those of this
	// client's subject and server: they are watched from the moment
	// Connect returns, opened in the new session and re-read, and a fresh
	// catalog confirms deletions that happened meanwhile (see resume.go).
	NoResume bool
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
	// wg counts every goroutine the client starts; it is only added to
	// under mu while closed is false (goAsync), never once Close waits.
	wg sync.WaitGroup

	mu   sync.Mutex // protects conn, watches, closed, rng
	conn *connection
	// watches is the caller's intent: a URI is here from the moment
	// Subscribe is called until Unsubscribe. Reconnects and listen-stream
	// re-establishment resubscribe exactly these.
	watches map[string]*watch
	closed  bool
	rng     *rand.Rand

	// queue holds the keys the controller must look at (controller.go);
	// retry is the one backoff of the session layer.
	queue *workqueue.Queue[string]
	retry retryPolicy
	// readq holds the keys with reads to send, reads their tickets
	// (reads.go).
	readq   *workqueue.Queue[string]
	reads   readsOf
	metrics *metrics // write-once at Connect
	errs    errorQueue
	// paced limits the rate of reads with trigger reconnect.
	paced *rate.Limiter
	// reconnecting serializes reconnects, the caller's and healing's; a
	// semaphore, so that a caller waits no longer than its context.
	reconnecting chan struct{}
	health       Health            // protected by mu
	healing      healing           // protected by mu
	failing      map[string]string // key -> why its reads fail; protected by mu
	unopened     map[string]string // key -> why its subscription is not open again (reopenFailed); protected by mu
	// refused holds, per key, the fence's refusal of its last answered
	// read when the server's answer itself was refused (another URI, bad
	// or empty contents): WaitForSync reports it rather than wait on a
	// server that keeps answering so. Protected by mu.
	refused map[string]error
	// endedBy is the error that ended the newest session lost on the
	// client's side (a framing violation), kept for SessionErr once healing
	// replaced it; protected by mu.
	endedBy error
	// epochs counts the caller's changes of each key's intent, waiters the
	// callers waiting for a pass over each key (controller.go); protected by
	// mu.
	epochs  map[string]uint64
	waiters map[string][]*waiter
	// abandoned holds, by key, the generation (session and subscription)
	// an Unsubscribe let go of without closing it: the URI's lease had
	// moved, so the close could not be written. Should the lease come
	// back within the session, Subscribe closes that generation and opens
	// a new one, rather than take it for one still kept. Protected by mu.
	abandoned   map[string][2]uint64
	failedReads atomic.Uint64
	// progress wakes WaitForSync: a read settled, a watch ended or the
	// connection changed state.
	progress signal
	// listChanges wakes a kept scan: a list_changed arrived.
	listChanges signal
	// keepStop ends the kept scan running (KeepScanning); protected by mu.
	keepStop context.CancelFunc

	scanner     *Scanner
	notes       noteQueue
	listChanged map[string]*atomic.Uint64 // list method -> list_changed seen; fixed keys
	rollout     rollout                   // refresh fraction (rollout.go)
}

// connection is one initialized session.
type connection struct {
	mc   *mcpclient.Client
	tr   transport.Interface // the wrapped transport mc sends through
	gen  uint64
	era  Era
	caps CapabilityReceipt
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

	// relisten serializes replacements of the subscriptions/listen stream
	// of a 2026-07-28 session (a semaphore, so that a caller waits no longer
	// than its context); callers that queue behind one often find their
	// URI carried by it and send nothing.
	relisten chan struct{}

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
}

// watch is a subscription the caller asked for: the URI as the caller
// spelled it (servers may be picky). Its periodic reads are in
// Client.sched.
type watch struct {
	raw string
	// opened is set once the watch was opened: later openings read with
	// TriggerReconnect. asked, that a caller's Subscribe asked for it (a
	// tombstoned generation is opened anew only then). every and periodic
	// are its periodic reads (RevalidateEvery or PollEvery), tickAt when
	// the next is due. Protected by Client.mu.
	opened   bool
	asked    bool
	every    time.Duration
	periodic Trigger
	tickAt   time.Time
	// streamEnded marks a watch whose stream the server ended: its
	// generation is opened anew (needsReopen). Protected by Client.mu.
	streamEnded bool
	// toldAt is when OnError was last told that the key could not be
	// opened (reopenFailed); protected by Client.mu.
	toldAt time.Time
	// retryAt and retries pace retryPush, pushedAt is when it was last
	// activated in push mode; protected by Client.mu.
	retryAt, pushedAt time.Time
	retries           uint
	// position is the key's RefreshPosition, kept so that a notification
	// need not hash the key again to learn it is outside the fraction.
	position float64
}

func newWatch(key, raw string) *watch {
	return &watch{raw: raw, position: position(key)}
}

// wireMethods are the methods whose JSON-RPC errors the client branches on.
var wireMethods = []string{
	string(mcp.MethodResourcesRead), string(mcp.MethodResourcesList),
	string(mcp.MethodResourcesTemplatesList), string(mcp.MethodToolsList),
	string(mcp.MethodPromptsList), string(mcp.MethodResourcesSubscribe),
	string(mcp.MethodResourcesUnsubscribe),
}

// errReadFailed marks a read that got no answer, to be tried again.
var errReadFailed = errors.New("mcpsync: read failed")

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
	case o.Subject == "":
		return nil, fmt.Errorf("%w: ClientOptions.Subject is required", ErrInvalidSubject)
	case checkSubject(o.Subject) != nil:
		return nil, fmt.Errorf("ClientOptions.Subject: %w", checkSubject(o.Subject))
	case o.Jitter < 0 || o.Jitter >= 1:
		return nil, fmt.Errorf("mcpsync: Jitter %v is outside [0, 1)", o.Jitter)
	case o.RevalidateEvery < 0 || o.PollEvery < 0 || o.RequestTimeout < 0:
		return nil, errors.New("mcpsync: negative interval")
	case !o.Deletion.valid():
		return nil, fmt.Errorf("mcpsync: unknown deletion policy %q", o.Deletion)
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
	if o.RetryInitial <= 0 {
		o.RetryInitial = 250 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 10 * time.Second
	}
	if o.PingEvery == 0 {
		o.PingEvery = 15 * time.Second
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = 10 * time.Second
	}
	if o.ReconnectReads <= 0 {
		o.ReconnectReads = 100
	}
	if o.Reconnect.Initial <= 0 {
		o.Reconnect.Initial = 500 * time.Millisecond
	}
	if o.Reconnect.Max <= 0 {
		o.Reconnect.Max = 30 * time.Second
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
		watches: make(map[string]*watch), failing: make(map[string]string), unopened: make(map[string]string),
		epochs: make(map[string]uint64), waiters: make(map[string][]*waiter),
		retry:        retryPolicy{initial: o.RetryInitial, max: o.RetryMax},
		abandoned:    make(map[string][2]uint64),
		refused:      make(map[string]error),
		reconnecting: make(chan struct{}, 1),
		paced:        rate.NewLimiter(o.ReconnectReads, 20),
		listChanged: map[string]*atomic.Uint64{
			string(mcp.MethodResourcesList): {}, string(mcp.MethodResourcesTemplatesList): {},
			string(mcp.MethodToolsList): {}, string(mcp.MethodPromptsList): {},
		},
		rng: rand.New(rand.NewPCG(seed, seed>>1|1)),
	}
	if err := c.initRollout(o.RefreshFraction); err != nil {
		return nil, err
	}
	if c.metrics, err = newMetrics(c, o.MeterProvider); err != nil {
		return nil, fmt.Errorf("mcpsync: metrics: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.notes.init()
	c.newQueue()
	c.newReadQueue()
	// One Client drives an engine: two would each open, read and close
	// the same keys in sessions of their own, and fence each other out.
	if !o.Engine.driver.CompareAndSwap(nil, c) {
		c.cancel()
		return nil, ErrEngineInUse
	}
	drivenEngines.Store(o.Engine.id, struct{}{})
	c.errs.ready, c.errs.done = make(chan struct{}, 1), make(chan struct{})
	go c.deliverErrors() // outside wg: Close waits for it apart (Shutdown)
	conn, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		c.release()
		return nil, err
	}
	c.conn = conn
	c.health = Health{State: ConnectionUp, Since: time.Now()}
	var resumed []string
	if !o.NoResume {
		if resumed, err = c.adopt(conn); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	c.goAsync(c.pump)
	c.startWorkers()
	c.startReaders()
	c.mark(sessionKey) // the heartbeat
	if len(resumed) > 0 {
		c.goAsync(func() { c.resume(resumed) })
	}
	return c, nil
}

// Session returns the mcp-go client of the current session, to call tools
// or prompts on. It is replaced at every reconnect: take it again rather
// than keep it.
func (c *Client) Session() (*mcpclient.Client, error) {
	conn, err := c.current()
	if err != nil {
		return nil, err
	}
	return conn.mc, nil
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
	mon := wire.NewMonitor(c.opts.Limits.wire(), func(err error) {
		if conn := self.Load(); conn != nil && errors.Is(err, ErrSessionDegraded) {
			c.flooded(conn)
		}
		if c.opts.OnFault != nil {
			c.opts.OnFault(err)
		}
	})
	tr, err := c.dial(wire.WithListening(wire.WithMonitor(ctx, mon), listen))
	if err != nil {
		return nil, fmt.Errorf("mcpsync: dial: %w", err)
	}
	var options []mcpclient.ClientOption
	if c.opts.ProtocolVersion != "" {
		options = append(options, mcpclient.WithProtocolVersion(c.opts.ProtocolVersion))
	}
	options = append(options, c.opts.MCPOptions...)
	wrapped := wire.New(tr, rpcError, mon, wireMethods...)
	mc := mcpclient.NewClient(wrapped, options...)
	conn := &connection{
		mc: mc, tr: wrapped, mon: mon, relisten: make(chan struct{}, 1),
		unsettled: make(map[string]int), putRights: make(map[string]map[string]bool), held: make(map[string]bool),
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

// isHTTP reports whether tr is, or wraps (Unwrap), mcp-go's streamable
// HTTP transport.
func isHTTP(tr transport.Interface) bool {
	for tr != nil {
		if _, ok := tr.(*transport.StreamableHTTP); ok {
			return true
		}
		u, ok := tr.(interface{ Unwrap() transport.Interface })
		if !ok {
			return false
		}
		tr = u.Unwrap()
	}
	return false
}

// Close unsubscribes nothing (the server forgets a session that ends), stops
// every goroutine of the client and closes the connection. Cached versions
// stay in the engine. Close is idempotent. It waits for the client's
// goroutines at most ClientOptions.CloseTimeout: a request stuck in a server
// that ignores cancellation (an in-process handler that never returns) is
// left behind, and Close says so with ErrCloseTimeout.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.CloseTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown is Close bounded by ctx instead of CloseTimeout: when ctx ends
// before every goroutine of the client has returned, it returns an error
// matching ErrCloseTimeout and ctx's error.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.setHealth(ConnectionClosed, "")
	conn := c.conn
	c.mu.Unlock()
	conn.stopListen()
	// The transport closes before the client's context ends: a stdio
	// server started with that context would be killed rather than asked
	// to exit (stdin closed, then SIGTERM).
	err := conn.mc.Close()
	c.cancel()
	c.queue.ShutDown()
	c.readq.ShutDown()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		c.failPending()
		// The engine is free for another Client once nothing of this one
		// runs.
		c.release()
		if !c.errs.delivering.Load() {
			// Failures told after the last goroutine ended reach OnError
			// before Close returns; a Close from inside OnError does not
			// wait for the goroutine it runs on.
			<-c.errs.done
		}
		close(done)
	}()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("%w: %w", ErrCloseTimeout, ctx.Err()))
	}
}

// drivenEngines holds the ID of every engine of this process a Client
// drives. The subscriptions of a driven engine's sessions are live: a
// client of another engine on the same ledger does not resume them.
var drivenEngines sync.Map

// release frees the engine for another Client.
func (c *Client) release() {
	if c.engine.driver.CompareAndSwap(c, nil) {
		drivenEngines.Delete(c.engine.id)
	}
}

// goAsync runs f in a goroutine of the client's wait group, unless the
// client is closed (then it reports false and runs nothing).
func (c *Client) goAsync(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

func (c *Client) current() (*connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	return c.conn, nil
}

// Subscribe opens a subscription generation for uri and sends the first
// read. Where the server can subscribe it does; where it cannot, or the
// subscribe fails, the subscription polls (ModePoll), and notifications that
// arrive anyway still trigger fenced reads. Every open subscription also gets
// a jittered revalidation read, and its staleness bound is published on it.
//
// The first read is sent before Subscribe returns, bounded by ctx (and
// RequestTimeout), so that its answer is in the subscription returned: a
// version, or, when the server has no such resource, TOMBSTONE_PENDING and
// an error matching ErrNotFound. The subscription stays open then (a
// resource created later is read when the server says so, or at the next
// revalidation); Unsubscribe it if it is not wanted. A first read that gets
// no answer is tried again in the background, as every read is. A client
// whose subject is revoked subscribes nothing: ErrRevoked.
//
// The subscription is the caller's until Unsubscribe: a Reconnect, even one
// racing this call, re-establishes it in the new session.
func (c *Client) Subscribe(ctx context.Context, uri string) (Subscription, error) {
	subs, errs := c.subscribeAll(ctx, []string{uri})
	return subs[0], errs[0]
}

// subscribeFailed begins the mode reason of a subscription that polls
// because the server refused to notify it.
const subscribeFailed = "subscribe failed: "

// SubscribeAll subscribes every URI of uris, as Subscribe does each, and
// returns what Subscribe returned for each, in the same order (the zero
// Subscription for one that never opened; a not-found one stays open, as
// with Subscribe), and the errors, joined, each naming its URI. A URI that
// is not a URI fails alone; the others go on.
//
// It is the way to subscribe a catalog. From 2026-07-28 on, a
// subscriptions/listen stream must name every URI, so Subscribes that each
// wait for their own stream cost a stream of every URI each; SubscribeAll
// has the first stream it opens carry all of uris, and the Subscribes
// after it find theirs acknowledged. Before 2026-07-28 it sends their
// resources/subscribe requests side by side, as many at once as the
// controller has workers.
func (c *Client) SubscribeAll(ctx context.Context, uris []string) ([]Subscription, error) {
	subs, errs := c.subscribeAll(ctx, uris)
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", uris[i], err))
		}
	}
	return subs, errors.Join(failed...)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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

// reopenAbandoned closes key's abandoned generation, now that its lease is back
// (the server was told to stop when it was let go), and opens a new one:
// a lease taken opens a new generation, and nothing keeps the old one.
func (c *Client) reopenAbandoned(key, raw string) (Subscription, error) {
	if err := c.closeTold(key); err != nil {
		return Subscription{}, err
	}
	return c.engine.Subscribe(raw, c.opts.Subject)
}

// closeTold closes key's generation in the engine, for a server that needs
// no unsubscribe: it was told already, or it keeps nothing (a stream it
// ended).
func (c *Client) closeTold(key string) error {
	if _, err := c.engine.BeginClose(key); err != nil {
		return err
	}
	_, err := c.engine.FinishClose(key, true)
	return err
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
	if old != nil {
		old.cancel()
		conn.listen = nil
	}
	patience := min(max(4*conn.listenTook, listenEndPatience), c.opts.RequestTimeout/10)
	conn.mu.Unlock()
	// The server is done with the old stream before the new one goes out:
	// a server may clean up an ended stream by unsubscribing its URIs for
	// the whole session (the official Go SDK does, once the stream's
	// handler returns), which would silence the same URIs on the new one.
	ended := old == nil || c.awaitListenEnd(old, patience)

	conn.mu.Lock()
	uris := slices.Clone(conn.want)
	if len(uris) == 0 {
		conn.mu.Unlock()
		return nil
	}
	lctx, cancel := context.WithCancel(c.ctx)
	stream := &listenStream{cancel: cancel, uris: uris, acked: make(chan struct{}), sent: time.Now(), ended: make(chan struct{})}
	if !ended {
		select {
		case <-old.ended:
		default:
			// Not done yet: once it is, this stream may have lost what
			// the server cleaned up (listenEnded).
			old.outlived = stream
		}
	}
	conn.listen = stream
	conn.mu.Unlock()

	lctx = wire.WithRequestID(lctx, func(id string) {
		conn.mu.Lock()
		stream.id = id
		conn.mu.Unlock()
	})
	lctx = wire.WithAnswerAwaited(lctx, c.opts.RequestTimeout)
	lctx = wire.WithSettled(lctx, func() func(bool) {
		stream.wired.Store(true)
		return func(bool) { c.listenEnded(conn, stream) }
	})
	ended2 := make(chan error, 1)
	if !c.goAsync(func() {
		err := conn.mc.Listen(lctx, mcp.SubscriptionFilter{ResourceSubscriptions: stream.uris})
		if !stream.wired.Load() {
			c.listenEnded(conn, stream) // never sent: nothing to wait for
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
// replaced s before that (s outlived its patience) may have lost to the
// server's clean-up of s the URIs it carries: the stream open now is no
// longer trusted, and every URI it carries is opened anew by its pass.
func (c *Client) listenEnded(conn *connection, s *listenStream) {
	s.endOnce.Do(func() {
		close(s.ended)
		conn.mu.Lock()
		late := s.outlived != nil
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

// Forget unsubscribes uri when it is subscribed, then evicts its version
// and the artifacts derived from it (Engine.Forget): Lookup no longer
// serves it, and consumers are told to delete what it fed. A Subscribe
// racing it wins: the URI is then open, and Forget returns the
// *TransitionError that says so.
func (c *Client) Forget(ctx context.Context, uri string) error {
	_, uerr := c.Unsubscribe(ctx, uri)
	if err := c.engine.Forget(uri); err != nil {
		if uerr != nil && !errors.Is(uerr, ErrUnknownURI) {
			return errors.Join(uerr, err)
		}
		return err
	}
	return nil
}

// Unsubscribe closes the URI's subscription generation: the fence is frozen
// first (BeginClose), then the server is told. A lost or timed-out ack
// leaves the generation UNSUBSCRIBE_UNKNOWN, silent and never reopened.
// Cached content stays. Unsubscribe is idempotent, and final: a Reconnect
// racing it does not bring the subscription back. On a ledger shared by
// many workers, a URI whose lease another worker took is only let go: the
// server is told, and the ledger row, that worker's now, is left alone.
//
// ctx bounds the wait for the close, not the close: once called, the URI
// is closed whether or not the caller waits.
func (c *Client) Unsubscribe(ctx context.Context, uri string) (Subscription, error) {
	key, err := normalizeKey(uri)
	if err != nil {
		return Subscription{}, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Subscription{}, ErrClientClosed
	}
	c.dropWatch(key)
	w := c.wantLocked(key)
	c.mu.Unlock()
	c.mark(key)
	res := c.awaitPass(ctx, key, w)
	if res.err != nil {
		return Subscription{}, res.err
	}
	return res.sub, res.subErr
}

// wants reports whether the listen stream carries raw or the next one would.
func (conn *connection) wants(raw string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.wanted[raw] || (conn.listen != nil && conn.listen.carries(raw))
}

// Read sends one fenced read of a subscribed URI now, outside the
// coalescing queue, and returns what the fence decided.
func (c *Client) Read(ctx context.Context, uri string) (Outcome, error) {
	t, err := c.engine.IssueTicket(uri, TriggerRevalidate)
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
		entry.Degraded = c.degradedReason(entry.Version.URI)
		if age := time.Since(entry.ValidatedAt); entry.Degraded == "" && entry.StalenessBound > 0 && age > entry.StalenessBound {
			// Nothing has failed yet (a read may be hanging), but the copy
			// is already older than promised: say so.
			entry.Degraded = fmt.Sprintf("last confirmed %v ago, past its staleness bound of %v", age.Round(time.Millisecond), entry.StalenessBound)
		}
	}
	return entry, err
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
		c.unopened[key] = "its subscription could not be opened again: " + err.Error()
	}
	if tell {
		w.toldAt = time.Now()
	}
	c.mu.Unlock()
	if tell {
		c.report(&ReopenError{URI: key, Err: err})
	}
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

// startWatch schedules the jittered revalidation (or poll) reads of a
// watched URI, replacing the ones it had: the controller's queue holds the
// next one as a delayed mark of the key, and the key's pass that finds it
// due reads (syncKey).
func (c *Client) startWatch(key string, interval time.Duration, trigger Trigger) {
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
func (c *Client) dueTickLocked(w *watch) (due Trigger, untilTick time.Duration) {
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

// dropWatch forgets the caller's intent for key, and with it its periodic
// reads; c.mu must be held.
func (c *Client) dropWatch(key string) {
	delete(c.unopened, key)
	if c.watches[key] != nil {
		delete(c.watches, key)
		c.progress.notify()
	}
}

// jitteredLocked returns d varied by up to ±Jitter; c.mu is held.
func (c *Client) jitteredLocked(d time.Duration) time.Duration {
	f := 1 + c.opts.Jitter*(2*c.rng.Float64()-1)
	return time.Duration(float64(d) * f)
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
	old.stopListen()
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
	c.mark(sessionKey) // the new session's heartbeat
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

// countListChanged counts a list_changed notification of method, if it is one.
func (c *Client) countListChanged(method string) {
	switch method {
	case string(mcp.MethodNotificationResourcesListChanged):
		// One notification covers resources and their templates.
		c.listChanged[string(mcp.MethodResourcesList)].Add(1)
		c.listChanged[string(mcp.MethodResourcesTemplatesList)].Add(1)
		c.listChanges.notify()
	case string(mcp.MethodNotificationToolsListChanged):
		c.listChanged[string(mcp.MethodToolsList)].Add(1)
	case string(mcp.MethodNotificationPromptsListChanged):
		c.listChanged[string(mcp.MethodPromptsList)].Add(1)
	}
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

// noteSpareMax is the longest drained batch whose room the queue reuses: a
// burst longer than that gives its memory back once handled.
const noteSpareMax = 1024

// drain returns the queued notifications and queues the next ones in spare,
// the batch drained before and handled since (nil at first), so that
// notifications arriving one at a time allocate nothing for the queue.
func (q *noteQueue) drain(spare []note) []note {
	clear(spare) // the handled notes' maps and connections are not kept
	if cap(spare) > noteSpareMax {
		spare = nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = spare[:0]
	return items
}

// pump handles queued notifications in arrival order.
func (c *Client) pump() {
	var batch []note
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.notes.ready:
		}
		batch = c.notes.drain(batch)
		for _, n := range batch {
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
		c.lose(n.conn, n.lost)
		return
	case n.streamEnded != nil:
		if n.conn == current {
			c.streamEnded(n.conn, n.streamEnded)
		}
		return
	}
	params := n.n.Params.AdditionalFields
	switch n.n.Method {
	case string(mcp.MethodNotificationResourceUpdated):
		uri := notifiedURI(params)
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
		// Normalized here, once: the rollout and the engine are handed the
		// key, which they find normalized and keep as it is, allocating
		// nothing.
		key, err := normalizeKey(uri)
		if err != nil {
			c.engine.RefuseNotification(uri, n.gen, ReasonNotSubscribed, err.Error())
			return
		}
		if c.skipRefresh(key, TriggerNotification) {
			return // outside the refresh fraction (rollout.go)
		}
		t, ok, err := c.engine.Notify(key)
		switch {
		case err != nil:
			if errors.Is(err, ErrNotLeaseholder) {
				c.report(err)
			}
			c.engine.RefuseNotification(key, n.gen, ReasonNotSubscribed, err.Error())
		case ok:
			c.dispatch(t)
		}
	case mcp.MethodNotificationSubscriptionsAcknowledged:
		start, left := n.conn.acknowledged(acknowledgedURIs(params), streamIDOf(n.n))
		if start {
			c.queue.AddAfter(sessionKey, relistenQuiet) // its pass reads the gap (readGap)
		}
		for _, raw := range left {
			c.mark(spelledKey(raw))
		}
	}
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
			conn.ends = &backoff.ExponentialBackOff{InitialInterval: time.Second, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: c.opts.RevalidateEvery}
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
//
// A server that declares no resources capability has no resources or
// templates to list: Scan of those kinds returns ErrNoResources and an
// empty catalog, without asking.
func (c *Client) Scan(ctx context.Context, kind ListKind) (Catalog, error) {
	conn, err := c.current()
	if err != nil {
		return Catalog{}, err
	}
	if (kind == KindResources || kind == KindResourceTemplates) && !conn.caps.Resources {
		return Catalog{}, fmt.Errorf("%w (%s %s)", ErrNoResources, conn.caps.Server.Name, conn.caps.Server.Version)
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
// client's side (a *FramingError) or, once healing replaced that session,
// the one that ended the newest session lost that way; nil when no session
// ended so.
func (c *Client) SessionErr() error {
	c.mu.Lock()
	conn, ended := c.conn, c.endedBy
	c.mu.Unlock()
	if err := conn.mon.Err(); err != nil {
		return err
	}
	return ended
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

// Reconcile hands a resources catalog's verdicts to the engine under the
// client's deletion policy (Catalog.ReconcileWith) and sends the reads it
// asks for.
func (c *Client) Reconcile(cat Catalog) (Reconciliation, error) {
	rec, err := cat.ReconcileWith(c.engine, c.opts.Deletion)
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
		switch meta := n.Params.AdditionalFields["_meta"].(type) {
		case nil:
		case map[string]any:
			id, ok = meta[mcp.MetaKeySubscriptionID]
		default:
			var m struct {
				Meta map[string]any `json:"_meta"`
			}
			decodeParams(n.Params.AdditionalFields, &m)
			id, ok = m.Meta[mcp.MetaKeySubscriptionID]
		}
	}
	switch id := id.(type) {
	case nil:
		return ""
	case string:
		return id
	}
	if !ok {
		return ""
	}
	return fmt.Sprint(id)
}

// notifiedURI returns the uri of a resources/updated notification's
// params. Off the wire it is a string; only other shapes (typed values an
// in-process transport passes through) take the JSON round trip.
func notifiedURI(params map[string]any) string {
	if uri, ok := params["uri"].(string); ok {
		return uri
	}
	var updated mcp.ResourceUpdatedNotificationParams
	decodeParams(params, &updated)
	return updated.URI
}

// currentStream reports whether id names the newest stream (or there is
// none whose id is known, so there is nothing to compare with).
func (conn *connection) currentStream(id string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.listen == nil || conn.listen.id == "" || conn.listen.id == id
}
