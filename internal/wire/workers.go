package wire

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client/transport"
)

// workers run the requests of one transport that may hold its caller past
// the request's context, each on a goroutine other than the caller's. A
// worker that finished a request waits for the next one (up to maxIdle of
// them wait), so a request costs a hand-off to a running goroutine, not a
// goroutine of its own: no goroutine start, and a stack that has already
// grown to what the transport needs. A request that finds no worker waiting
// starts one, so requests in flight never queue behind each other, nor
// behind a handler that never returns.
type workers struct {
	mu      sync.Mutex // protects the fields below
	idle    []*worker
	stopped bool
	// free are exchanges to reuse. They are the transport's own, not a
	// sync.Pool's: a channel must not be shared between testing/synctest
	// bubbles, and a transport lives in one.
	free []*exchange
}

// maxIdle is how many workers of one transport wait for requests (more
// than that end once their request is done), and how many exchanges it
// keeps for reuse.
const maxIdle = 8

type worker struct {
	jobs chan *exchange // one at a time; closed when the worker is to end
}

// run hands x to a waiting worker, or to a new one.
func (ws *workers) run(x *exchange) {
	ws.mu.Lock()
	if n := len(ws.idle); n > 0 {
		w := ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
		ws.mu.Unlock()
		w.jobs <- x
		return
	}
	ws.mu.Unlock()
	w := &worker{jobs: make(chan *exchange, 1)}
	go ws.work(w, x)
}

func (ws *workers) work(w *worker, x *exchange) {
	for x != nil {
		x.send()
		if !ws.park(w) {
			return
		}
		x = <-w.jobs // nil once stopped
	}
}

// park puts w among the waiting workers, and reports false when it is to
// end instead.
func (ws *workers) park(w *worker) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.stopped || len(ws.idle) >= maxIdle {
		return false
	}
	ws.idle = append(ws.idle, w)
	return true
}

// stop ends the waiting workers, and every other one once its request is
// done. Requests sent after it each get a worker that ends with them.
func (ws *workers) stop() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.stopped = true
	for _, w := range ws.idle {
		close(w.jobs)
	}
	ws.idle = nil
}

// Who got to an exchange first: its answer or its caller's deadline.
const (
	pending = iota
	answered
	abandoned
)

// exchange is one request run by a worker for a caller waiting on done.
// Exchanges are reused once their caller has the answer; one its caller
// gave up on belongs to its worker, and is dropped when the request ends.
type exchange struct {
	inner   transport.Interface
	ctx     context.Context // the request's, or one that outlives it (WithAnswerAwaited)
	cancel  context.CancelFunc
	req     transport.JSONRPCRequest
	settled func(abandoned bool)
	ended   func(Ending)    // WithAnswerAwaited's
	kept    context.Context // a remote request's context kept open past its caller's (outlive)
	state   atomic.Int32
	done    chan struct{} // one value once the answer is in resp and err
	resp    *transport.JSONRPCResponse
	err     error
}

// newExchange returns an exchange of req, reused if one is free.
func (ws *workers) newExchange(inner transport.Interface, ctx context.Context, req transport.JSONRPCRequest, settled func(bool)) *exchange {
	ws.mu.Lock()
	var x *exchange
	if n := len(ws.free); n > 0 {
		x = ws.free[n-1]
		ws.free[n-1] = nil
		ws.free = ws.free[:n-1]
	}
	ws.mu.Unlock()
	if x == nil {
		x = &exchange{done: make(chan struct{}, 1)}
	}
	x.inner, x.ctx, x.req, x.settled = inner, ctx, req, settled
	x.state.Store(pending)
	return x
}

// send sends the request on the worker's goroutine and hands the answer to
// the caller, unless the caller gave up on it first.
func (x *exchange) send() {
	resp, err := x.inner.SendRequest(x.ctx, x.req)
	if x.ended != nil {
		// An in-process transport's answer comes when the server's
		// handler returned.
		x.ended(ending(resp, x.kept))
	}
	if x.cancel != nil {
		x.cancel()
	}
	late := !x.state.CompareAndSwap(pending, answered)
	// Settled before the caller has the answer: whatever the caller does
	// next (an unsubscribe after its subscribe) must find it settled.
	if x.settled != nil {
		x.settled(late)
	}
	if !late {
		x.resp, x.err = resp, err
		x.done <- struct{}{} // x is the caller's from here on
	}
}

// release keeps x, whose answer its caller has taken, for reuse (up to
// maxIdle of them).
func (ws *workers) release(x *exchange) {
	x.inner, x.ctx, x.cancel, x.req, x.settled, x.ended, x.kept = nil, nil, nil, transport.JSONRPCRequest{}, nil, nil, nil
	x.resp, x.err = nil, nil
	ws.mu.Lock()
	if len(ws.free) < maxIdle {
		ws.free = append(ws.free, x)
	}
	ws.mu.Unlock()
}
