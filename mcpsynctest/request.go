package mcpsynctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

type ruleKind int

const (
	ruleHold ruleKind = iota
	ruleFailRPC
	ruleBreak
	ruleLoseResponse
	ruleHoldRequest
)

// requestRule applies to the next request of method (and params.uri, unless
// uri is "").
type requestRule struct {
	kind    ruleKind
	method  string
	uri     string
	code    int
	message string
	err     error
	hold    *Hold
}

// Hold is a step the kit keeps back until Release, so that a later step
// can overtake it: a request before the server sees it
// (Transport.HoldNextRequest), a response before the client sees it
// (Transport.HoldNext), or the clean-up of a listen stream that ended
// (Server.HoldNextListenEnd).
type Hold struct {
	arrived     chan struct{}
	release     chan struct{}
	passed      chan struct{}
	arriveOnce  sync.Once
	releaseOnce sync.Once
	passOnce    sync.Once
}

func newHold() *Hold {
	return &Hold{arrived: make(chan struct{}), release: make(chan struct{}), passed: make(chan struct{})}
}

// Arrived is closed once the held step is reached and the kit is holding
// it: as each of the functions that hand out a Hold says.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held step go on. It may be called before the step is
// reached, and more than once.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

// Passed is closed once the held step went on after Release: a held
// response reached the client, a held request the server, a held stream end
// its clean-up. It stays open when the wait ended otherwise (the request's
// context, DropSession, Close), so a test can tell an answer that arrived
// late from one its caller gave up on.
func (h *Hold) Passed() <-chan struct{} { return h.passed }

func (h *Hold) pass() { h.passOnce.Do(func() { close(h.passed) }) }

// HoldNext holds the response to the next request of method for uri ("" for
// any): the request reaches the server at once, and its response reaches the
// client only after Release. Arrived is closed once the server has answered
// and the kit is holding the response. Cancelling the request's context,
// DropSession or Close end the wait with an error instead.
func (t *Transport) HoldNext(method, uri string) *Hold {
	h := newHold()
	t.addRule(&requestRule{kind: ruleHold, method: method, uri: uri, hold: h})
	return h
}

// HoldNextRequest holds the next request of method for uri ("" for any)
// before the server sees it, until Release, like a request stuck in a send
// buffer: neither its context nor Close nor DropSession end the wait, so a
// test can keep a call of the client parked at that request while it
// reconnects, unsubscribes or closes around it. Arrived is closed when the
// request reaches the kit. After Release the request goes on as usual, or
// fails with ErrSessionDropped or transport.ErrTransportClosed if its
// session ended meanwhile. A held request that is never released keeps its
// caller's goroutine, so a test must release every one it holds (Heal
// does).
func (t *Transport) HoldNextRequest(method, uri string) *Hold {
	h := newHold()
	t.addRule(&requestRule{kind: ruleHoldRequest, method: method, uri: uri, hold: h})
	return h
}

// FailNext answers the next request of method for uri ("" for any) with a
// JSON-RPC error response carrying code and message. The server never sees
// the request.
func (t *Transport) FailNext(method, uri string, code int, message string) {
	t.addRule(&requestRule{kind: ruleFailRPC, method: method, uri: uri, code: code, message: message})
}

// BreakNext fails the next request of method for uri ("" for any) with err,
// as a transport failure. The server never sees the request.
func (t *Transport) BreakNext(method, uri string, err error) {
	t.addRule(&requestRule{kind: ruleBreak, method: method, uri: uri, err: err})
}

// LoseNextResponse lets the server process the next request of method for
// uri ("" for any) and then discards its response: the client gets
// ErrResponseLost. LoseNextResponse(mcp.MethodResourcesUnsubscribe, uri) is
// the lost unsubscribe acknowledgement.
func (t *Transport) LoseNextResponse(method, uri string) {
	t.addRule(&requestRule{kind: ruleLoseResponse, method: method, uri: uri})
}

func (t *Transport) addRule(r *requestRule) {
	t.mu.Lock()
	t.rules = append(t.rules, r)
	if r.hold != nil {
		t.holds = append(t.holds, r.hold)
	}
	t.mu.Unlock()
}

// takeRule removes and returns the first rule matching the request.
func (t *Transport) takeRule(method, uri string) *requestRule {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, r := range t.rules {
		if r.method == method && (r.uri == "" || r.uri == uri) {
			t.rules = append(t.rules[:i], t.rules[i+1:]...)
			return r
		}
	}
	return nil
}

// SendRequest sends a request through the inner transport, applying the
// first request fault that matches it and the list faults to list results.
func (t *Transport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	t.countSent(req.Method)
	if t.isDropped() {
		return nil, ErrSessionDropped
	}
	uri := paramsURI(req.Params)
	r := t.takeRule(req.Method, uri)
	if r != nil && r.kind == ruleHoldRequest {
		t.note("hold request %s uri=%q before the server", req.Method, uri)
		r.hold.arriveOnce.Do(func() { close(r.hold.arrived) })
		<-r.hold.release
		t.mu.Lock()
		dropped, closed := t.dropped, t.closed
		t.mu.Unlock()
		switch {
		case dropped:
			return nil, ErrSessionDropped
		case closed:
			return nil, transport.ErrTransportClosed
		}
		t.note("release request %s uri=%q", req.Method, uri)
		r.hold.pass()
		r = nil // on its way as if it had never been held
	}
	if r != nil {
		switch r.kind {
		case ruleFailRPC:
			t.note("fail %s uri=%q with JSON-RPC error %d", req.Method, uri, r.code)
			return &transport.JSONRPCResponse{
				JSONRPC: mcp.JSONRPC_VERSION,
				ID:      req.ID,
				Error:   &mcp.JSONRPCErrorDetails{Code: r.code, Message: r.message},
			}, nil
		case ruleBreak:
			t.note("break %s uri=%q: %v", req.Method, uri, r.err)
			return nil, r.err
		}
	}

	if req.Method == string(mcp.MethodSubscriptionsListen) && r == nil {
		return t.listen(ctx, req)
	}
	resp, err := t.inner.SendRequest(ctx, req)
	if t.isDropped() {
		return nil, ErrSessionDropped
	}
	if r != nil {
		switch r.kind {
		case ruleLoseResponse:
			t.note("lose response to %s uri=%q (server processed it)", req.Method, uri)
			return nil, ErrResponseLost
		case ruleHold:
			t.note("hold response to %s uri=%q", req.Method, uri)
			r.hold.arriveOnce.Do(func() { close(r.hold.arrived) })
			select {
			case <-r.hold.release:
				t.note("release response to %s uri=%q", req.Method, uri)
				r.hold.pass()
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.dead:
				if t.isDropped() {
					return nil, ErrSessionDropped
				}
				return nil, transport.ErrTransportClosed
			}
		}
	}
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.Error != nil {
		t.note("%s uri=%q answered JSON-RPC error %d", req.Method, uri, resp.Error.Code)
		return resp, nil
	}
	if req.Method == KindResources || req.Method == KindTemplates {
		t.rewriteList(req, resp)
	}
	return resp, nil
}

func (t *Transport) note(format string, args ...any) {
	t.mu.Lock()
	t.logf(format, args...)
	t.mu.Unlock()
}

// ForgeSnapshotIDs rewrites the snapshot id of list results from now on.
func (t *Transport) ForgeSnapshotIDs(mode ForgeMode) {
	t.mu.Lock()
	t.forge = mode
	t.mu.Unlock()
}

// CycleCursor makes page fromPage of every kind walk (KindResources or
// KindTemplates) point back at page toPage (2 <= toPage <= fromPage; page 1
// has no cursor): its nextCursor is replaced by the cursor that fetched
// toPage. Pages are numbered by the cursor that fetches them, so the walk
// cycles for as long as the client follows it.
func (t *Transport) CycleCursor(kind string, fromPage, toPage int) {
	t.mu.Lock()
	t.cycles[kind] = cycleRule{from: fromPage, to: toPage}
	t.mu.Unlock()
}

// rewriteList applies the list faults to one list result.
func (t *Transport) rewriteList(req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	var params struct {
		Cursor mcp.Cursor `json:"cursor"`
	}
	if b, err := json.Marshal(req.Params); err == nil {
		_ = json.Unmarshal(b, &params)
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(resp.Result, &result) != nil {
		return
	}
	var next mcp.Cursor
	if raw, ok := result["nextCursor"]; ok {
		_ = json.Unmarshal(raw, &next)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	kind := req.Method
	walk := t.walks[kind]
	page := 1
	if params.Cursor == "" || walk == nil {
		walk = map[mcp.Cursor]int{}
		t.walks[kind] = walk
	}
	if params.Cursor != "" {
		p, ok := walk[params.Cursor]
		if !ok {
			p = len(walk) + 2
			walk[params.Cursor] = p
		}
		page = p
	}
	changed := false
	if next != "" {
		if _, ok := walk[next]; !ok {
			walk[next] = len(walk) + 2
		}
	}
	if c, ok := t.cycles[kind]; ok && c.from == page && c.to >= 2 && c.to <= c.from && next != "" {
		for cur, p := range walk {
			if p == c.to {
				t.logf("cycle %s page %d nextCursor back to page %d", kind, page, c.to)
				next = cur
				result["nextCursor"], _ = json.Marshal(next)
				changed = true
				break
			}
		}
	}
	if t.forge != ForgeNone {
		meta := map[string]any{}
		if raw, ok := result["_meta"]; ok {
			_ = json.Unmarshal(raw, &meta)
		}
		_, has := meta[SnapshotIDKey]
		id := ""
		switch {
		case t.forge == ForgeMissing && !has:
			id = fmt.Sprintf("forged-%d", t.seed)
		case t.forge == ForgeVary:
			id = fmt.Sprintf("forged-%d-page-%d", t.seed, page)
		}
		if id != "" {
			t.logf("forge %s page %d snapshot id %q", kind, page, id)
			meta[SnapshotIDKey] = id
			result["_meta"], _ = json.Marshal(meta)
			changed = true
		}
	}
	if changed {
		if b, err := json.Marshal(result); err == nil {
			resp.Result = b
		}
	}
}

// EndListenStreams ends every subscriptions/listen request in flight, as a
// 2026-07-28 server does when it closes a stream: the server's handler
// returns (its clean-up of the stream runs, unless Server.HoldNextListenEnd
// holds it) and then the client gets the request's (empty) result and no
// further notification of that stream. It returns at once; streams opened
// later are not affected.
func (t *Transport) EndListenStreams() { t.signalStreams(&t.listenEnd, "end listen streams") }

// ErrListenCut is what a subscriptions/listen request cut by
// CutListenStreams returns.
var ErrListenCut = errors.New("mcpsynctest: listen stream cut between client and server")

// CutListenStreams cuts every subscriptions/listen request in flight
// between the client and the server, as a proxy or the network does: the
// client's request returns ErrListenCut at once, with no answer, while the
// server learns of the end only as its handler's context ends, and cleans
// the stream up whenever it gets to it (Server.HoldNextListenEnd can hold
// that clean-up past whatever the client does next). It returns at once;
// streams opened later are not affected.
func (t *Transport) CutListenStreams() { t.signalStreams(&t.listenCut, "cut listen streams") }

// signalStreams closes *ch, which the listen requests in flight select
// on, and puts a new one in its place for the streams opened later.
func (t *Transport) signalStreams(ch *chan struct{}, what string) {
	t.mu.Lock()
	close(*ch)
	*ch = make(chan struct{})
	t.logf("%s", what)
	t.mu.Unlock()
}

// listen forwards a subscriptions/listen request, which the server answers
// only when the stream ends, until it ends, EndListenStreams ends it or
// CutListenStreams cuts it.
func (t *Transport) listen(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	t.mu.Lock()
	end, cut := t.listenEnd, t.listenCut
	t.mu.Unlock()
	ictx, cancel := context.WithCancel(ctx)
	defer cancel() // also ends the inner request when the stream is cut here
	type answer struct {
		resp *transport.JSONRPCResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := t.inner.SendRequest(ictx, req)
		answered <- answer{resp, err}
	}()
	select {
	case a := <-answered:
		return a.resp, a.err
	case <-end:
		// The server closes the stream: its handler returns, and only
		// then does its answer go out.
		cancel()
		<-answered
		return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID, Result: json.RawMessage(`{}`)}, nil
	case <-cut:
		return nil, ErrListenCut
	}
}
