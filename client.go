package mcpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"

	"github.com/mcpsync/mcpsync/internal/wire"
	"github.com/mcpsync/mcpsync/internal/workqueue"
	"github.com/mcpsync/mcpsync/ledger"
)

// SessionInfo describes a freshly (re)initialized MCP session to the engine.
type SessionInfo struct {
	// SessionID is the transport's session id, if it has one.
	SessionID    string
	Capabilities ledger.CapabilityReceipt
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
	// options, whose ledger is in memory. Pass one made by NewEngine to keep
	// the ledger in a file or a database (EngineOptions.Ledger). The Client
	// turns EngineOptions.ConfirmSends on for the engine it drives: a program
	// that also issues queued reads on that engine must report each with
	// Sending, as the Client does.
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
	// ClientInfo introduces the client to servers: initialize sends it as
	// it is. An empty Name means "mcpsync".
	ClientInfo mcp.Implementation
	// ProtocolVersion pins a protocol revision ("2025-06-18", "2025-11-25",
	// "2026-07-28"); empty lets mcp-go negotiate.
	ProtocolVersion string
	// RevalidateEvery is the interval of the revalidation read of every open
	// subscription, which bounds staleness when notifications are lost:
	// the staleness bound published is RevalidateEvery (PollEvery for a
	// polled URI) plus Jitter of it plus RequestTimeout, room for the next
	// read's answer. 0 means 5 minutes.
	RevalidateEvery time.Duration
	// PollEvery is the interval of periodic reads where the server cannot
	// subscribe: it bounds how late a change of content is seen there (new
	// and deleted resources are found by KeepScanOptions.Every). 0 means 30
	// seconds.
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
	// Close and Reconnect included. A Close on another goroutine returns
	// once it has returned.
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
	// ReconnectReads, if set, bounds the rate of the reads a reconnect
	// sends (one per subscription), with bursts of 20. Whether set or not,
	// a reconnect's reads are paced by how many are out at once: a window
	// that starts at 8, grows by one with each read the server answers and
	// halves at each it does not, so a restarted server is not stampeded
	// and one that answers fast is not kept waiting. 0 means no rate bound.
	ReconnectReads rate.Limit
	// OnOutcome, if set, is told of every fenced read, outside every lock,
	// on the goroutine that delivers OnError too, one call at a time, in
	// the order the reads ended: Outcome.Changed says the read made new
	// content current. It may call Close; a Close on another goroutine
	// returns once it has returned. When reads of one URI overlap,
	// their outcomes may still arrive out of order (the fence accepted
	// them in order, and refused the older of two that crossed); treat an
	// outcome as a wake-up and Lookup the URI, or follow the outbox
	// (Engine.Consume), which is in order per URI. A panic in it is
	// recovered and reported to OnError.
	OnOutcome func(Outcome)
	// Handler, if set, is told how the entries Lookup serves the client's
	// subject change, with their contents, in order per URI, on the
	// goroutine of OnOutcome and OnError (ResourceHandler). What the engine
	// serves on Connect, and each first version accepted before WaitForSync
	// returns, is told as added before it returns, once.
	Handler ResourceHandler
	// Scanner configures discovery scans; nil means defaults.
	Scanner *ScannerOptions
	// Deletion says which evidence confirms a deletion when Reconcile hands
	// a catalog to the engine (deletion.go). The zero value,
	// DeletionDefault, corroborates where the server cannot prove (it did
	// not negotiate the snapshot extension) and waits for proof where it
	// can; DeletionProvenOnly never corroborates; DeletionUnlisted also
	// confirms the deletion of what clean scans have missed for
	// UnlistedFor.
	Deletion DeletionPolicy
	// UnlistedFor is how long clean scans must have missed a URI before
	// DeletionUnlisted confirms its deletion; 0 means two review intervals
	// (ScannerOptions.ReviewAfter).
	UnlistedFor time.Duration
	// Limits bound what a server can make the client spend; nil means the
	// defaults (Limits).
	Limits *Limits
	// OnFault, if set, is told of every refusal of hostile input as it
	// happens: a *LimitError (of LimitNotificationsPerSecond for a
	// degraded session) or a *MessageError (of FaultFramingViolation for a
	// stdio stream that lost its framing). It runs on the transport's read
	// loop and must not block or call the client.
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
	// running counts the goroutines the client started (goAsync) and
	// that have not returned; it only grows under mu while closed is
	// false. stopped is closed once the client is closed and none runs,
	// after the engine was given back (stop). Protected by mu.
	running  int
	stopping bool
	stopped  chan struct{}

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
	readq *workqueue.Queue[string]
	// sessionq holds the session item (session.go), apart: a pass stuck on
	// a server never holds the heartbeat or healing up.
	sessionq *workqueue.Queue[string]
	reads    readsOf
	metrics  *metrics // write-once at Connect
	errs     errorQueue
	// told is the entry last told to Handler, by key; only the goroutine
	// that delivers callbacks touches it (handlers.go).
	told map[string]Entry
	// paced limits the rate of reads with trigger reconnect (ReconnectReads),
	// window how many are out at once.
	paced  *rate.Limiter
	window readWindow
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
	// settled wakes a caller waiting for a key's read (awaitRead): a read
	// of the key ended, or a pass over it did.
	settled keyedSignal
	// listChanges wakes a kept scan: a list_changed arrived.
	listChanges signal
	// keepStop ends the kept scan running (KeepScanning); keepListed is
	// done once its first listing succeeded and what it subscribed was
	// opened, or once it stopped (WaitForSync waits for it). Both
	// protected by mu.
	keepStop   context.CancelFunc
	keepListed context.Context

	scanner     *scanner
	notes       noteQueue
	listChanged map[string]*atomic.Uint64 // list method -> list_changed seen; fixed keys
	rollout     rollout                   // refresh fraction (rollout.go)
}

// watch is a subscription the caller asked for: the URI as the caller
// spelled it (servers may be picky). Its periodic reads are in
// Client.sched.
type watch struct {
	raw string
	// since is the epoch of the change that made the key watched: the
	// callers of changes before it asked for something else. Written
	// once, when the watch is made, under Client.mu.
	since uint64
	// opened is set once the watch was opened: later openings read with
	// ledger.TriggerReconnect. asked, that a caller's Subscribe asked for it (a
	// tombstoned generation is opened anew only then). every and periodic
	// are its periodic reads (RevalidateEvery or PollEvery), tickAt when
	// the next is due. Protected by Client.mu.
	opened bool
	asked  bool
	// pending counts the Subscribes of it under way, kept says one of them
	// (or a resume) has it: a watch no Subscribe kept is taken back when
	// the last one in flight fails (settleSubscribe). Protected by
	// Client.mu.
	pending int
	kept    bool
	// givenUp marks a watch Close took back before any Subscribe kept it
	// (closeUnwatched). Protected by Client.mu.
	givenUp  bool
	every    time.Duration
	periodic ledger.Trigger
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
	// owed is a read the server's notifications asked for that the engine
	// could not record or issue (a ledger write failed; owe): its trigger,
	// whether the notification itself is to be recorded again (renotify),
	// why, how many tries of the key's passes failed since (askOwed),
	// and whether the read was issued (owedAsked: nothing is asked again).
	// A read of the key issued after it (a later generation, or an ordinal
	// past owedOrdinal) settles it once answered. Protected by Client.mu.
	owed                 ledger.Trigger
	renotify, owedAsked  bool
	owedErr              string
	owedTries            int
	owedGen, owedOrdinal uint64
	// position is position(key), kept so that a notification
	// need not hash the key again to learn it is outside the fraction.
	position float64
}

// newWatch makes the watch of key under the spelling raw, watched from
// epoch since on.
func newWatch(key, raw string, since uint64) *watch {
	return &watch{raw: raw, since: since, position: position(key)}
}

// wireMethods are the methods whose JSON-RPC errors the client branches on.
var wireMethods = []string{
	string(mcp.MethodResourcesRead), string(mcp.MethodResourcesList),
	string(mcp.MethodResourcesTemplatesList), string(mcp.MethodToolsList),
	string(mcp.MethodPromptsList), string(mcp.MethodResourcesSubscribe),
	string(mcp.MethodResourcesUnsubscribe),
}

// errReadFailed marks a read that got no answer, to be tried again.
var errReadFailed = wire.NewError("read failed")

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
	case o.RevalidateEvery < 0 || o.PollEvery < 0 || o.RequestTimeout < 0 || o.UnlistedFor < 0:
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
		o.ClientInfo = mcp.Implementation{Name: "mcpsync", Version: "0.1.0"}
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
		o.ReconnectReads = rate.Inf
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
	scanner, err := newScanner(o.Scanner, limits.MaxScanPages)
	if err != nil {
		return nil, err
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c := &Client{
		stopped: make(chan struct{}),
		opts:    o, engine: o.Engine, dial: dial, scanner: scanner,
		watches: make(map[string]*watch), failing: make(map[string]string), unopened: make(map[string]string),
		epochs: make(map[string]uint64), waiters: make(map[string][]*waiter),
		retry:        retryPolicy{initial: o.RetryInitial, max: o.RetryMax, jitter: 0.5},
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
		return nil, errorf("metrics: %w", err)
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
	c.errs.marked, c.told = make(map[string]*ledger.DeletionEvidence), make(map[string]Entry)
	if o.Handler != nil {
		hook := changeHook(c.markChanged)
		o.Engine.changed.Store(&hook)
	}
	go c.deliverErrors() // not counted in running: Close waits for it apart (Shutdown)
	conn, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		c.release()
		close(c.stopped) // nothing of the client runs
		return nil, err
	}
	c.conn = conn
	c.health = Health{State: ConnectionUp, Since: time.Now()}
	if o.Handler != nil {
		c.syncHandler(nil) // what the engine serves already, as added
	}
	var resumed []string
	if !o.NoResume {
		if resumed, err = c.adopt(conn); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	c.goAsync(c.pump)
	c.serve(c.queue, syncWorkers, c.runPass)
	c.serve(c.sessionq, 2, c.runSessionItem)
	c.serve(c.readq, readWorkers, c.readPass)
	c.markSession(0) // the heartbeat
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
func (c *Client) Capabilities() ledger.CapabilityReceipt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.caps
}

// Close unsubscribes nothing (the server forgets a session that ends), stops
// every goroutine of the client and closes the connection. Cached versions
// stay in the engine. What a caller gave up before Close stays given up:
// the generation of an Unsubscribe, or of a first Subscribe given up on or
// still waiting (it fails with ErrClientClosed), whose close had not been
// written yet is closed on the engine, so a Client that opens the ledger
// next does not resume it. Generations another engine on the ledger
// opened are left alone. Close is idempotent. It waits for the client's
// goroutines at most ClientOptions.CloseTimeout: a request stuck in a server
// that ignores cancellation (an in-process handler that never returns) is
// left behind, and Close says so with ErrCloseTimeout.
//
// When Close returns nil, no callback (OnError, OnOutcome, the Handler's
// methods) runs and none will: a callback running when it was called has
// returned, and whatever was queued for them has been delivered. That holds
// for every call, the first or a later one, on any goroutine but the one
// callbacks run on: a Close from inside a callback returns without waiting
// for the callback it is called from (which returns after it), once the
// client's other goroutines have ended.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.CloseTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown is Close bounded by ctx instead of CloseTimeout: when ctx ends
// before every goroutine of the client has returned, a running callback
// included, it returns an error matching ErrCloseTimeout and ctx's error.
func (c *Client) Shutdown(ctx context.Context) error {
	err := c.closeOnce()
	if !closedBefore(ctx, c.stopped) {
		return errors.Join(err, fmt.Errorf("%w: %w", ErrCloseTimeout, ctx.Err()))
	}
	if c.errs.onDeliverer() {
		// Inside a callback: delivery ends once this callback returns and
		// what is queued after it is delivered.
		return err
	}
	// What was told after the last goroutine ended is delivered, and the
	// callback running now has returned, before Close does.
	if !closedBefore(ctx, c.errs.done) {
		return errors.Join(err, fmt.Errorf("%w: %w", ErrCloseTimeout, ctx.Err()))
	}
	return err
}

// closedBefore waits for done to be closed and reports whether it was before ctx
// ended: one closed already counts, whatever ctx (a select on both would
// pick either at random).
func closedBefore(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// closeOnce closes the client the first time it is called: the connection
// closes and every goroutine of the client is told to end. It returns what
// closing the connection returned; later calls do nothing and return nil.
func (c *Client) closeOnce() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.setHealth(ConnectionClosed, "")
	conn := c.conn
	c.mu.Unlock()
	c.stopListen(conn)
	// The transport closes before the client's context ends: a stdio
	// server started with that context would be killed rather than asked
	// to exit (stdin closed, then SIGTERM).
	err := conn.mc.Close()
	c.cancel()
	c.queue.ShutDown()
	c.sessionq.ShutDown()
	c.readq.ShutDown()
	if c.lastOut(false) {
		c.stop()
	}
	return err
}

// leave counts one goroutine of the client less, and stops the client if
// it was the last of a closed one.
func (c *Client) leave() {
	if c.lastOut(true) {
		c.stop()
	}
}

// lastOut counts one goroutine of the client less (exiting), and reports
// whether the client is now closed with none running, for the first time:
// its caller then stops it.
func (c *Client) lastOut(exiting bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exiting {
		c.running--
	}
	if c.running > 0 || !c.closed || c.stopping {
		return false
	}
	c.stopping = true
	return true
}

// stop runs once the client is closed and none of its goroutines runs, on
// whichever of Shutdown and the last goroutine gets there: queued reads go
// back to the engine, and the engine is free for another Client.
func (c *Client) stop() {
	c.failPending()
	c.closeUnwatched()
	c.release()
	close(c.stopped)
}

// drivenEngines holds the ID of every engine of this process a Client
// drives. The subscriptions of a driven engine's sessions are live: a
// client of another engine on the same ledger does not resume them.
var drivenEngines sync.Map

// release frees the engine for another Client. It takes the engine's
// session lock, so that a session this client opens (a Reconnect's dial
// that came back late) either begins before the engine is freed or is
// refused (beginSessionOf).
func (c *Client) release() {
	c.engine.sessionMu.Lock()
	defer c.engine.sessionMu.Unlock()
	if c.engine.driver.CompareAndSwap(c, nil) {
		c.engine.changed.Store(nil)
		drivenEngines.Delete(c.engine.id)
	}
}

// enter counts one more goroutine of the client at work (running), unless
// the client is closed (then it reports false); leave counts it out.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.running++
	return true
}

// counted runs f on the caller's goroutine as work of the client that
// Close waits for, unless the client is closed (then it reports false and
// runs nothing): what f writes is written before Close's last step looks
// at it.
func (c *Client) counted(f func()) bool {
	if !c.enter() {
		return false
	}
	defer c.leave()
	f()
	return true
}

// goAsync runs f in a goroutine the client counts, unless the client is
// closed (then it reports false and runs nothing).
func (c *Client) goAsync(f func()) bool {
	if !c.enter() {
		return false
	}
	go func() {
		defer c.leave()
		f()
	}()
	return true
}

// Subscribe opens a subscription generation for uri and sends the first
// read. Where the server can subscribe it does; where it cannot, or the
// subscribe fails, the subscription polls (ledger.ModePoll), and notifications that
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

// dropWatch forgets the caller's intent for key, and with it its periodic
// reads; c.mu must be held.
func (c *Client) dropWatch(key string) {
	delete(c.unopened, key)
	if c.watches[key] != nil {
		delete(c.watches, key)
		c.progress.notify()
	}
}

// ListChanged returns how many list_changed notifications the client has
// seen for the list of kind; discovery compares it before and after each
// pass.
func (c *Client) ListChanged(kind ListKind) uint64 {
	if n := c.listChanged[kind.Method()]; n != nil {
		return n.Load()
	}
	return 0
}

// SessionErr returns the error that ended the current session on the
// client's side (a *MessageError of FaultFramingViolation) or, once healing replaced that session,
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
