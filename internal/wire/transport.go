// Package wire wraps an mcp-go client transport so that JSON-RPC errors of
// the methods the sync engine depends on reach it with their code intact,
// and every message a server sends stays within the session's limits.
package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// ErrorFunc builds the error a JSON-RPC error response becomes.
type ErrorFunc func(method string, code int, message string, data json.RawMessage) error

// Transport is a transport.Interface that turns the JSON-RPC error responses
// of selected methods into Go errors built by an ErrorFunc.
//
// mcp-go (v1.2.1, mcp/errors.go AsError) maps a JSON-RPC error to a sentinel
// for the codes it knows and to a plain error otherwise, and drops the data
// member either way. Returning the error from SendRequest instead makes
// mcp-go wrap it in a *transport.Error, which unwraps to ours, so callers get
// the code and data with errors.As. Methods not selected (initialize,
// server/discover, …) pass through untouched: mcp-go's protocol negotiation
// branches on its own error values.
type Transport struct {
	inner   transport.Interface
	methods map[string]bool
	toError ErrorFunc
	mon     *Monitor
	// inline: the inner transport returns at a request's context's end on
	// its own, so a request runs on the caller's goroutine; any other runs
	// on one of workers.
	inline  bool
	workers *workers
}

// New wraps inner; the JSON-RPC errors of methods become toError's errors.
// mon, if not nil, applies its limits to results and notifications (the
// transports built by NewStream, NewProcess and HTTPClient apply the rest at
// the byte level) and fails a request with the error that refused its
// answer.
//
// The wrapper implements transport.HTTPConnection only when inner does:
// mcp-go changes behaviour on that assertion (cancellation by
// notifications/cancelled, header mirroring), so the wrapper must look like
// what it wraps. The other optional interfaces are forwarded, and are no-ops
// when inner lacks them, as mcp-go's own fallbacks are.
func New(inner transport.Interface, toError ErrorFunc, mon *Monitor, methods ...string) transport.Interface {
	m := make(map[string]bool, len(methods))
	for _, name := range methods {
		m[name] = true
	}
	t := &Transport{inner: inner, methods: m, toError: toError, mon: mon, inline: returnsAtContextEnd(inner), workers: &workers{}}
	if _, ok := inner.(transport.HTTPConnection); ok {
		return httpTransport{t}
	}
	return t
}

// Start starts the inner transport.
func (t *Transport) Start(ctx context.Context) error { return t.inner.Start(ctx) }

type rawKey struct{}

// WithRawResult returns a context under which SendRequest copies the raw
// JSON result of the request into *dst.
//
// mcp-go (v1.2.1) parses nextCursor into a string with omitempty, so an
// absent nextCursor and an empty one look alike; from 2026-07-28 on "" is a
// valid cursor and only absence ends a listing. The raw result keeps the
// difference, and the list result's _meta, for discovery.
func WithRawResult(ctx context.Context, dst *json.RawMessage) context.Context {
	return context.WithValue(ctx, rawKey{}, dst)
}

type requestIDKey struct{}

// WithRequestID returns a context under which SendRequest tells seen the
// JSON-RPC id of the request, just before sending it.
//
// A 2026-07-28 server tags every message of a subscriptions/listen stream
// with the id of the listen request (_meta subscriptionId); mcp-go (v1.2.1)
// does not say which id it chose, and the client needs it to tell a stream's
// acknowledgement from a replaced stream's.
func WithRequestID(ctx context.Context, seen func(id string)) context.Context {
	return context.WithValue(ctx, requestIDKey{}, seen)
}

// SendRequest sends request and keeps the JSON-RPC error of selected methods.
func (t *Transport) SendRequest(ctx context.Context, request transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if seen, ok := ctx.Value(requestIDKey{}).(func(string)); ok {
		// fmt.Sprint, as for the id a notification names: a JSON number
		// decodes to float64 and prints as the same digits.
		seen(fmt.Sprint(request.ID.Value()))
	}
	// A monitor that reads the transport's messages knows the requests in
	// flight, fails one whose answer it refused, and has held every answer
	// to the limits before mcp-go sees it. Answers it does not read (an
	// in-process transport hands over decoded results) are held to them
	// here, before mcp-go decodes them.
	if t.mon == nil || !t.mon.watched.Load() {
		resp, err := t.sendInner(ctx, request)
		if t.mon != nil && err == nil && resp != nil && resp.Error == nil {
			if lerr := t.mon.lim.checkResult(t.mon.faults, request.Method, resp.Result); lerr != nil {
				t.mon.report(lerr)
				return nil, lerr
			}
		}
		return t.answer(ctx, request, resp, err)
	}
	c := t.mon.begin(ctx, requestKey(request.ID), request.Method)
	resp, err := t.sendInner(c, request)
	if refused := t.mon.finish(c); refused != nil {
		return nil, refused
	}
	return t.answer(ctx, request, resp, err)
}

// answer keeps the raw result if ctx asks for it, and turns the JSON-RPC
// error of a selected method into an ErrorFunc error.
func (t *Transport) answer(ctx context.Context, request transport.JSONRPCRequest, resp *transport.JSONRPCResponse, err error) (*transport.JSONRPCResponse, error) {
	if dst, ok := ctx.Value(rawKey{}).(*json.RawMessage); ok && err == nil && resp != nil {
		*dst = append((*dst)[:0], resp.Result...)
	}
	if err != nil || resp == nil || resp.Error == nil || !t.methods[request.Method] {
		return resp, err
	}
	var data json.RawMessage
	if resp.Error.Data != nil {
		data, _ = json.Marshal(resp.Error.Data)
	}
	return nil, t.toError(request.Method, resp.Error.Code, resp.Error.Message, data)
}

type listeningKey struct{}

// WithListening returns a context that asks a dialer for a standalone
// stream of server notifications (HTTPDialer: mcp-go's continuous
// listening).
func WithListening(ctx context.Context, listen bool) context.Context {
	return context.WithValue(ctx, listeningKey{}, listen)
}

// ListeningWanted reports whether ctx asks for a notification stream.
func ListeningWanted(ctx context.Context) bool {
	listen, _ := ctx.Value(listeningKey{}).(bool)
	return listen
}

// Listens reports whether tr keeps a standalone stream of server
// notifications open: mcp-go's streamable HTTP transport with continuous
// listening says so by requiring a legacy revision.
func Listens(tr transport.Interface) bool {
	l, ok := tr.(interface{ RequiresLegacyProtocol() bool })
	return ok && l.RequiresLegacyProtocol()
}

type settledKey struct{}

// WithSettled returns a context under which SendRequest calls begin as it
// hands the request to the inner transport, and the function begin returned
// once the inner transport is done with it, saying whether the caller had
// given up on it first: a request abandoned at its deadline may still reach
// the server, after requests sent later, and what depends on its effect (an
// unsubscribe after a subscribe) must be put right then. A request that
// never reaches this transport calls neither: mcp-go (v1.2.1) sends nothing
// on a context that ended already.
func WithSettled(ctx context.Context, begin func() (settled func(abandoned bool))) context.Context {
	return context.WithValue(ctx, settledKey{}, begin)
}

type answerKey struct{}

type answerAwait struct {
	d     time.Duration
	ended func(Ending)
}

// Ending is how a request kept open for its answer (WithAnswerAwaited)
// ended.
type Ending int

const (
	// Answered: the server answered, so it is done with the request.
	Answered Ending = iota
	// Cut: the request failed on its way with no answer (the connection
	// or a proxy ended it); the server may learn of its end only later.
	Cut
	// Unanswered: no answer came within the time allowed once its caller
	// gave up on it.
	Unanswered
)

// WithAnswerAwaited returns a context under which the end of a request is
// told to ended, whenever that is: a server answers a cancelled request
// once it is done with it (mcp-go tells it of the cancellation,
// notifications/cancelled, as ever). A request sent to a remote server
// (stdio, streamable HTTP) stays open once ctx ends, for d more at most,
// for that answer. An in-process transport's request returns when the
// server's handler does, with that answer. The caller still returns at
// ctx's end; ended is not called for a request that never reached the
// transport.
func WithAnswerAwaited(ctx context.Context, d time.Duration, ended func(Ending)) context.Context {
	return context.WithValue(ctx, answerKey{}, answerAwait{d: d, ended: ended})
}

// ending says how a request kept open for its answer ended: resp is its
// answer, if any; kept is the context that kept a remote server's request
// open past its caller (outlive), nil for a request that returns when the
// server's handler does (in process).
func ending(resp *transport.JSONRPCResponse, kept context.Context) Ending {
	switch {
	case resp != nil:
		return Answered
	case kept != nil && kept.Err() != nil:
		return Unanswered
	}
	return Cut
}

// outlive returns a context that ends d after ctx does, or when its cancel
// is called, whichever is first: the time a request kept open for its
// answer is allowed counts from when its caller gave up.
func outlive(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
		over  bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			timer = time.AfterFunc(d, cancel)
		}
	})
	return octx, func() {
		stop()
		mu.Lock()
		over = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// remote reports whether tr, or what it wraps (Unwrap), talks to a server
// over a connection: mcp-go's stdio and streamable HTTP transports and the
// ones built on them here.
func remote(tr transport.Interface) bool {
	return Wraps(tr, func(tr transport.Interface) bool {
		switch tr.(type) {
		case *transport.Stdio, *transport.StreamableHTTP, *stream, *process:
			return true
		}
		return false
	})
}

// Wraps reports whether tr, or a transport it wraps (Unwrap), is one that
// is picks.
func Wraps(tr transport.Interface, is func(transport.Interface) bool) bool {
	for tr != nil {
		if is(tr) {
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

// sendInner sends request through the inner transport and returns when it
// answers or ctx ends, whichever is first.
//
// A transport that returns at its context's end on its own (HTTP, where
// net/http bounds every step by the request's context) is called on the
// caller's goroutine, unless the request is to stay open past its context
// (WithAnswerAwaited). Any other runs the request on one of its workers:
// mcp-go's in-process transport (v1.2.1) runs the server's handler on the
// goroutine that sends the request, so a handler that ignores its context
// would hold the caller, and whatever it locked, for ever; here the caller
// goes on and the request finishes on its worker.
func (t *Transport) sendInner(ctx context.Context, request transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	var settled func(bool)
	if begin, ok := ctx.Value(settledKey{}).(func() func(bool)); ok {
		settled = begin()
	}
	aw, awaited := ctx.Value(answerKey{}).(answerAwait)
	far := awaited && remote(t.inner)
	if t.inline && !far {
		resp, err := t.inner.SendRequest(ctx, request)
		if awaited {
			aw.ended(ending(resp, nil))
		}
		if settled != nil {
			// Given up on if it ended with its context: the server may
			// still have it.
			settled(err != nil && ctx.Err() != nil)
		}
		return resp, err
	}
	x := t.workers.newExchange(t.inner, ctx, request, settled)
	if far {
		// Open once ctx ends, for d more at most, for the server's answer:
		// on a worker, whatever the transport, as the caller returns at
		// ctx's end.
		x.ctx, x.cancel = outlive(ctx, aw.d)
		x.kept = x.ctx
	}
	if awaited {
		x.ended = aw.ended
	}
	t.workers.run(x)
	select {
	case <-x.done:
	case <-ctx.Done():
		if x.state.CompareAndSwap(pending, abandoned) {
			return nil, context.Cause(ctx) // x is the worker's now
		}
		<-x.done // answered at the same moment: take it
	}
	resp, err := x.resp, x.err
	t.workers.release(x)
	return resp, err
}

// returnsAtContextEnd reports whether tr, by its type, returns from
// SendRequest once the request's context ends, whatever the server does.
// mcp-go's (v1.2.1) HTTP transports send and read under the request's
// context. Its stdio transport waits for the answer under it too, but
// writes the request without it: a server that stops reading its input
// holds the writer once the pipe is full. Its in-process transport runs the
// handler on the caller's goroutine. Any other transport is not known to.
func returnsAtContextEnd(tr transport.Interface) bool {
	switch tr.(type) {
	case *transport.StreamableHTTP, *transport.SSE:
		return true
	}
	return false
}

// SendNotification sends a notification through the inner transport.
func (t *Transport) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	return t.inner.SendNotification(ctx, n)
}

// SetNotificationHandler sets the inner transport's notification handler.
func (t *Transport) SetNotificationHandler(handler func(mcp.JSONRPCNotification)) {
	if t.mon == nil || handler == nil {
		t.inner.SetNotificationHandler(handler)
		return
	}
	t.inner.SetNotificationHandler(func(n mcp.JSONRPCNotification) {
		if t.mon.allowNotification() {
			handler(n)
		}
	})
}

// Close closes the inner transport, then the session's HTTP connections
// (SessionHTTPClient). Idle workers end; a worker held by a request ends
// when the inner transport is done with it.
func (t *Transport) Close() error {
	t.workers.stop()
	err := t.inner.Close()
	t.closePools()
	return err
}

// Abort ends a session that is lost at once, without the graceful steps of
// Close, where the inner transport can (a stdio server is killed).
func (t *Transport) Abort() error {
	t.workers.stop()
	var err error
	if a, ok := t.inner.(interface{ Abort() error }); ok {
		err = a.Abort()
	} else {
		err = t.inner.Close()
	}
	t.closePools()
	return err
}

// closePools closes the connections of the session's HTTP clients, once
// the inner transport is done with them (mcp-go ends a legacy session
// with a DELETE in Close).
func (t *Transport) closePools() {
	if t.mon != nil {
		t.mon.closePools()
	}
}

// GetSessionId returns the inner transport's session id.
func (t *Transport) GetSessionId() string { return t.inner.GetSessionId() }

// SetRequestHandler forwards server-to-client requests (sampling,
// elicitation, roots) when the inner transport carries them.
func (t *Transport) SetRequestHandler(handler transport.RequestHandler) {
	if bi, ok := t.inner.(transport.BidirectionalInterface); ok {
		bi.SetRequestHandler(handler)
	}
}

// httpTransport is the wrapper of an HTTP transport.
type httpTransport struct{ *Transport }

// SetProtocolVersion forwards the negotiated version, which HTTP transports
// send as a header on every request.
func (t httpTransport) SetProtocolVersion(version string) {
	t.inner.(transport.HTTPConnection).SetProtocolVersion(version)
}

// SetConnectionLostHandler forwards mcp-go's connection-lost hook when the
// inner transport supports it.
func (t *Transport) SetConnectionLostHandler(handler func(error)) {
	if c, ok := t.inner.(interface{ SetConnectionLostHandler(func(error)) }); ok {
		c.SetConnectionLostHandler(handler)
	}
}

// RequiresLegacyProtocol reports what the inner transport reports: some
// configurations (continuous listening over HTTP) rule out 2026-07-28.
func (t *Transport) RequiresLegacyProtocol() bool {
	l, ok := t.inner.(interface{ RequiresLegacyProtocol() bool })
	return ok && l.RequiresLegacyProtocol()
}
