package mcpsynctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

var (
	_ transport.BidirectionalInterface = (*Transport)(nil)
	_ transport.HTTPConnection         = (*Transport)(nil)
)

var (
	// ErrSessionDropped is returned for every request after DropSession, as
	// from a dead connection.
	ErrSessionDropped = errors.New("mcpsynctest: session dropped")
	// ErrResponseLost is returned for a request whose response LoseNextResponse
	// discarded: the server processed the request, the client never learns
	// the outcome, as after a timeout.
	ErrResponseLost = errors.New("mcpsynctest: response lost")
)

// Transport wraps an mcp-go client transport and injects faults into the
// notifications it delivers and the requests it carries. Random faults draw
// from a generator seeded at construction, in arrival order, so a run is
// reproducible from its seed.
//
// Transport implements transport.Interface and forwards the optional
// extensions (BidirectionalInterface, HTTPConnection, RequiresLegacyProtocol,
// SetConnectionLostHandler) to the inner transport when it has them. Because
// it always has the HTTPConnection method set, an mcp-go client treats it as
// an HTTP transport: it skips notifications/cancelled when a request's
// context ends, which matters only for servers that watch cancellations.
//
// Notifications are handed to the client's handler by a goroutine of the
// Transport, in the order the faults decide; the inner transport's read loop
// only appends to a queue, so no fault and no slow handler can block it.
type Transport struct {
	inner transport.Interface
	seed  int64

	closeOnce sync.Once
	innerOnce sync.Once
	done      chan struct{} // closed by Close: stops the delivery goroutine
	dead      chan struct{} // closed by DropSession or Close
	deadOnce  sync.Once
	wake      chan struct{} // buffered 1: queue has work
	loopDone  chan struct{} // closed when the delivery goroutine exits

	mu        sync.Mutex    // protects every field below
	listenEnd chan struct{} // closed and replaced by EndListenStreams
	listenCut chan struct{} // closed and replaced by CutListenStreams
	rng       *rand.Rand
	handler   func(mcp.JSONRPCNotification)
	started   bool
	closed    bool
	dropped   bool
	queue     []mcp.JSONRPCNotification
	held      []mcp.JSONRPCNotification // DelayNext(…, 0): waiting for ReleaseNotifications
	reordered []mcp.JSONRPCNotification // ReorderNext: waiting for the next notification
	timers    []*time.Timer
	dropRate  float64
	dupRate   float64
	dropNext  map[string]int
	dupNext   map[string]int
	delays    []delayRule
	reorders  map[string]int
	rules     []*requestRule
	holds     []*Hold // every Hold handed out, for Heal
	mapURI    func(string) string
	forge     ForgeMode
	cycles    map[string]cycleRule
	walks     map[string]map[mcp.Cursor]int // per list kind: cursor -> page it fetches
	log       []string
	sent      map[string]int // requests by method, as the client sent them
}

type delayRule struct {
	uri string
	d   time.Duration
}

type cycleRule struct{ from, to int }

// ForgeMode selects how ForgeSnapshotIDs rewrites list pages.
type ForgeMode int

const (
	// ForgeNone leaves snapshot ids alone.
	ForgeNone ForgeMode = iota
	// ForgeMissing adds the same made-up snapshot id to every page that has
	// none, as if the server had an extension it never declared.
	ForgeMissing
	// ForgeVary gives every page a different snapshot id, as a server that
	// cuts each page from a different set would.
	ForgeVary
)

// NewTransport returns a Transport around inner whose random faults are
// drawn from seed.
func NewTransport(inner transport.Interface, seed int64) *Transport {
	return &Transport{
		inner:     inner,
		seed:      seed,
		done:      make(chan struct{}),
		dead:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		listenEnd: make(chan struct{}),
		listenCut: make(chan struct{}),
		loopDone:  make(chan struct{}),
		rng:       rand.New(rand.NewPCG(uint64(seed), 0x6d6370)),
		dropNext:  map[string]int{},
		dupNext:   map[string]int{},
		reorders:  map[string]int{},
		cycles:    map[string]cycleRule{},
		walks:     map[string]map[mcp.Cursor]int{},
	}
}

// Start starts the inner transport and then the delivery goroutine; Close
// stops both. Notifications that arrive before the delivery goroutine runs
// wait in its queue.
func (t *Transport) Start(ctx context.Context) error {
	t.mu.Lock()
	closed, started := t.closed, t.started
	t.mu.Unlock()
	if closed {
		return transport.ErrTransportClosed
	}
	if started {
		return nil
	}
	t.inner.SetNotificationHandler(t.receive)
	if err := t.inner.Start(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrTransportClosed
	}
	if !t.started {
		t.started = true
		go t.deliver()
	}
	return nil
}

// Close closes the inner transport, stops the delivery goroutine and ends
// every held request with transport.ErrTransportClosed. Notifications still
// queued are discarded; held ones stay for ReleaseNotifications. Close waits for a notification handler that
// is running, so it must not be called from one. Close is idempotent.
func (t *Transport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		started := t.started
		for _, tm := range t.timers {
			tm.Stop()
		}
		t.timers = nil
		t.queue, t.reordered = nil, nil // held ones stay for ReleaseNotifications
		t.mu.Unlock()
		close(t.done)
		t.markDead()
		if started {
			<-t.loopDone
		}
		err = t.closeInner()
	})
	return err
}

func (t *Transport) markDead() { t.deadOnce.Do(func() { close(t.dead) }) }

func (t *Transport) closeInner() error {
	var err error
	t.innerOnce.Do(func() { err = t.inner.Close() })
	return err
}

// GetSessionId returns the inner transport's session id.
func (t *Transport) GetSessionId() string { return t.inner.GetSessionId() }

// SetNotificationHandler sets the handler the delivery goroutine calls.
func (t *Transport) SetNotificationHandler(handler func(mcp.JSONRPCNotification)) {
	t.mu.Lock()
	t.handler = handler
	t.mu.Unlock()
}

// SendNotification forwards a client notification unchanged, or fails after
// DropSession.
func (t *Transport) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	if t.isDropped() {
		return ErrSessionDropped
	}
	return t.inner.SendNotification(ctx, n)
}

// SetRequestHandler forwards to the inner transport if it takes server
// requests (transport.BidirectionalInterface), so sampling and elicitation
// keep working through the wrapper.
func (t *Transport) SetRequestHandler(handler transport.RequestHandler) {
	if b, ok := t.inner.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(handler)
	}
}

// SetProtocolVersion forwards to the inner transport if it is a
// transport.HTTPConnection, which mirrors the version in a header.
func (t *Transport) SetProtocolVersion(version string) {
	if h, ok := t.inner.(transport.HTTPConnection); ok {
		h.SetProtocolVersion(version)
	}
}

// Unwrap returns the transport the kit wraps.
func (t *Transport) Unwrap() transport.Interface { return t.inner }

// RequiresLegacyProtocol reports what the inner transport reports, so a
// Streamable HTTP transport with continuous listening still keeps the client
// on the initialize handshake.
func (t *Transport) RequiresLegacyProtocol() bool {
	l, ok := t.inner.(interface{ RequiresLegacyProtocol() bool })
	return ok && l.RequiresLegacyProtocol()
}

// SetConnectionLostHandler forwards to the inner transport if it has one.
func (t *Transport) SetConnectionLostHandler(handler func(error)) {
	if s, ok := t.inner.(interface{ SetConnectionLostHandler(func(error)) }); ok {
		s.SetConnectionLostHandler(handler)
	}
}

// DropSession kills the session: the inner transport is closed (so the
// server ends the session and forgets its subscriptions), every later or
// held request fails with ErrSessionDropped and no new notification is
// accepted. Notifications DelayNext was holding still arrive when released
// or when their timer fires: late notifications of the old session, possibly
// after a reconnect. Reconnect with a new Transport around a new inner
// transport.
func (t *Transport) DropSession() {
	t.mu.Lock()
	if t.dropped || t.closed {
		t.mu.Unlock()
		return
	}
	t.dropped = true
	t.queue, t.reordered = nil, nil
	t.logf("drop session")
	t.mu.Unlock()
	t.markDead()
	_ = t.closeInner()
}

func (t *Transport) isDropped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

// Log returns what the kit did so far, one line per action, for test
// failure messages.
func (t *Transport) Log() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.log...)
}

func (t *Transport) logf(format string, args ...any) {
	t.log = append(t.log, fmt.Sprintf("%d: ", len(t.log)+1)+fmt.Sprintf(format, args...))
}

// paramsURI returns params.uri of a request or notification, or "".
func paramsURI(params any) string {
	if params == nil {
		return ""
	}
	b, err := json.Marshal(params)
	if err != nil {
		return ""
	}
	var p struct {
		URI string `json:"uri"`
	}
	_ = json.Unmarshal(b, &p)
	return p.URI
}
