package mcpsync_test

// The caller's callbacks (OnError, OnOutcome, the Handler's methods) run
// outside every lock and off the client's own goroutines: a callback may
// close or reconnect the client, a panic in one leaves nothing stuck, and a
// Close made elsewhere returns only once the callback running has returned.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A natural OnError: once reconnecting gave up, the caller closes the
// client (the copy can no longer be kept fresh). Close from inside OnError
// returns nil at once, not ErrCloseTimeout after waiting for the very
// goroutine that calls it, and the client is CLOSED.
func TestCloseFromOnErrorAfterGiveUpReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		closed := make(chan error, 1)
		r := newRig(t, eras[0], &mcpsync.ClientOptions{
			PingEvery: time.Second, PingTimeout: time.Second, RevalidateEvery: time.Hour,
			Reconnect: mcpsync.ReconnectPolicy{MaxAttempts: 2, Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond},
		})
		c := r.c
		r.errs.setThen(func(err error) {
			if errors.Is(err, mcpsync.ErrReconnectGaveUp) {
				start := time.Now()
				cerr := c.Close()
				if time.Since(start) > time.Second {
					cerr = errors.Join(cerr, errors.New("Close blocked for "+time.Since(start).String()))
				}
				closed <- cerr
			}
		})
		r.watch(faultURI)
		quiesce()
		r.loseSession()
		time.Sleep(30 * time.Second)
		quiesce()
		select {
		case err := <-closed:
			require.NoError(t, err, "Close called from OnError after ErrReconnectGaveUp")
		default:
			t.Fatalf("no ErrReconnectGaveUp within 30 s: %v (health %+v)", r.errs.list(), r.c.Health())
		}
		assert.Equal(t, mcpsync.ConnectionClosed, r.c.Health().State)
	})
}

// OnError that reconnects on a lost session (a caller who wants a new
// session now, say with fresh credentials). When the loss is the failure
// of the caller's own Reconnect, the inner Reconnect does not wait for the
// caller's Reconnect to let go of the client (which would last until the
// inner one's context ended), and the caller's failed Reconnect returns
// within a second.
func TestReconnectFromOnErrorDuringAFailedReconnectDoesNotDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := make(chan error, 4)
		r := newRig(t, eras[0], &mcpsync.ClientOptions{
			PingEvery: -1, RevalidateEvery: time.Hour,
			Reconnect: mcpsync.ReconnectPolicy{Disabled: true},
		})
		defer func() { _ = r.c.Close() }()
		c := r.c
		r.errs.setThen(func(err error) {
			var ce *mcpsync.ConnectionError
			if errors.As(err, &ce) && ce.Attempt == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				inner <- c.Reconnect(ctx)
			}
		})
		r.watch(faultURI)
		quiesce()
		r.setDown(true)
		start := time.Now()
		err := r.c.Reconnect(t.Context())
		took := time.Since(start)
		require.Error(t, err, "the server is down")
		// OnError runs on a goroutine of its own: let it run.
		synctest.Wait()
		select {
		case ierr := <-inner:
			assert.NotErrorIs(t, ierr, context.DeadlineExceeded, "OnError's Reconnect waited out its context")
		default:
			t.Fatal("OnError was not told of the loss")
		}
		assert.Less(t, took, time.Second, "the caller's failed Reconnect took %v", took)
	})
}

// An agent closes its client when a watched document changes (the outcome
// says Changed): Close from OnOutcome on a background read returns nil,
// rather than waiting for that very read and timing out.
func TestCloseFromOnOutcomeReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/markdown", "v1")
		var c *mcpsync.Client
		closed := make(chan error, 1)
		subscribed := make(chan struct{})
		c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, OnOutcome: func(o mcpsync.Outcome) {
			select {
			case <-subscribed:
			default:
				return // the first read, on Subscribe's goroutine
			}
			if o.Changed() {
				closed <- c.Close()
			}
		}})
		require.NoError(t, err)
		_, err = c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		close(subscribed)
		srv.Set(docURI, "text/markdown", "v2")
		require.NoError(t, <-closed, "Close from OnOutcome")
	})
}

// A user's OnOutcome panics once, during Subscribe's first read, and the
// caller recovers the panic and goes on. DESIGN.md: "user code (observers,
// guards) runs outside every lock, and a panic in it is a refusal, never a
// stuck URI": a later Unsubscribe of that URI returns, rather than waiting
// for its context to end.
func TestPanickingOnOutcomeInSubscribeLeavesTheURIFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/markdown", "v1")
		var panicked atomic.Bool
		c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, OnOutcome: func(mcpsync.Outcome) {
			if panicked.CompareAndSwap(false, true) {
				panic("bug in the caller's prompt cache")
			}
		}})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		func() {
			defer func() { _ = recover() }()
			_, _ = c.Subscribe(t.Context(), docURI)
		}()
		synctest.Wait() // OnOutcome runs on the client's delivering goroutine
		require.True(t, panicked.Load(), "the observer ran, and panicked")

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err = c.Unsubscribe(ctx, docURI)
		require.NoError(t, err, "a panic in an observer must not leave the URI locked")
	})
}

// callbackKind is one kind of the caller's callbacks, as a rig's client
// is given it.
type callbackKind struct {
	name string
	// give has the callback of this kind in o call hook.
	give func(o *mcpsync.ClientOptions, hook func())
	// cause makes the rig's client run that callback.
	cause func(t *testing.T, r *rig)
}

var callbackKinds = []callbackKind{
	{
		name: "OnOutcome",
		give: func(o *mcpsync.ClientOptions, hook func()) {
			o.OnOutcome = func(mcpsync.Outcome) { hook() }
		},
		cause: subscribeFaultURI,
	},
	{
		name: "OnError",
		give: func(o *mcpsync.ClientOptions, hook func()) {
			o.OnError = func(error) { hook() }
		},
		cause: func(t *testing.T, r *rig) {
			r.faults().BreakNext(string(mcp.MethodResourcesRead), faultURI, errors.New("connection reset"))
			subscribeFaultURI(t, r)
		},
	},
	{
		name: "Handler",
		give: func(o *mcpsync.ClientOptions, hook func()) {
			o.Handler = mcpsync.ResourceHandlerFuncs{AddFunc: func(mcpsync.Entry) { hook() }}
		},
		cause: subscribeFaultURI,
	},
}

// subscribeFaultURI subscribes faultURI, whatever comes of it: the
// callback of its first read may close the client meanwhile.
func subscribeFaultURI(t *testing.T, r *rig) {
	_, _ = r.c.Subscribe(t.Context(), faultURI)
}

// newCallbackRig is a quiet rig (no heartbeat, revalidation hourly) whose
// client calls hook from its callback of kind.
func newCallbackRig(t *testing.T, kind callbackKind, hook *callbackHook) *rig {
	t.Helper()
	opts := &mcpsync.ClientOptions{PingEvery: -1, RevalidateEvery: time.Hour}
	kind.give(opts, hook.call)
	return newRig(t, eras[0], opts)
}

// callbackHook is what a test has a callback do, set once the client is
// connected; until then the callback does nothing of the test's.
type callbackHook struct {
	mu sync.Mutex // protects f
	f  func()
}

func (h *callbackHook) set(f func()) {
	h.mu.Lock()
	h.f = f
	h.mu.Unlock()
}

func (h *callbackHook) call() {
	h.mu.Lock()
	f := h.f
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

// hold has the next call of the hook block until release, then do then
// (if set); running is closed once it blocks, returned once it returns.
// Later calls do nothing.
func (h *callbackHook) hold(then func()) (running, returned <-chan struct{}, release func()) {
	run, ret, rel := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.set(func() {
		once.Do(func() {
			defer close(ret)
			close(run)
			<-rel
			if then != nil {
				then()
			}
		})
	})
	return run, ret, sync.OnceFunc(func() { close(rel) })
}

// holdCallback has the next call of hook block until release, then do
// then (if set), causes a callback of kind on r, and returns once the
// callback blocks; returned is closed once it returned. The callback is
// released when the test ends, if not before.
func holdCallback(t *testing.T, kind callbackKind, r *rig, hook *callbackHook, then func()) (returned <-chan struct{}, release func()) {
	t.Helper()
	running, returned, release := hook.hold(then)
	t.Cleanup(release)
	kind.cause(t, r)
	<-running
	return returned, release
}

// eachCallbackKind runs test once per kind of callback, in a subtest and a
// synctest bubble of its own, on a callback rig whose hook the test sets.
func eachCallbackKind(t *testing.T, test func(t *testing.T, kind callbackKind, r *rig, hook *callbackHook)) {
	eachCase(t, callbackKinds, func(k callbackKind) string { return k.name }, func(t *testing.T, kind callbackKind) {
		var hook callbackHook
		test(t, kind, newCallbackRig(t, kind, &hook), &hook)
	})
}

// closeElsewhere closes r's client on a goroutine of its own, and reports
// whether that Close still waits once nothing else in the bubble can run;
// closed has its error once it returned.
func closeElsewhere(r *rig) (closed <-chan error, waiting bool) {
	ch := make(chan error, 1)
	go func() { ch <- r.c.Close() }()
	synctest.Wait()
	select {
	case err := <-ch:
		ch <- err
		return ch, false
	default:
		return ch, true
	}
}

// A program tears down what its callbacks use once Close returns (the
// command writes its summary to the output they print to). Close on another
// goroutine while a callback runs therefore returns only once the callback
// has returned and delivery has ended, whichever callback it is.
func TestCloseWaitsForARunningCallback(t *testing.T) {
	eachCallbackKind(t, func(t *testing.T, kind callbackKind, r *rig, hook *callbackHook) {
		returned, release := holdCallback(t, kind, r, hook, nil)

		closed, waiting := closeElsewhere(r)
		if !waiting {
			release()
			t.Fatalf("Close returned (%v) while %s ran", <-closed, kind.name)
		}
		release()
		require.NoError(t, <-closed)
		select {
		case <-returned:
		default:
			t.Errorf("Close returned before %s did", kind.name)
		}
	})
}

// Close inside a callback while a Close on another goroutine waits for
// that callback: the callback's Close returns at once, and the other once
// the callback has returned.
func TestCloseFromACallbackWhileAnotherCloseWaitsForIt(t *testing.T) {
	eachCallbackKind(t, func(t *testing.T, kind callbackKind, r *rig, hook *callbackHook) {
		inside := make(chan error, 1)
		_, release := holdCallback(t, kind, r, hook, func() { inside <- closeTimed(r.c) })

		outside, _ := closeElsewhere(r)
		release()
		require.NoError(t, <-inside, "Close from inside %s", kind.name)
		require.NoError(t, <-outside, "Close on another goroutine")
		assert.Equal(t, mcpsync.ConnectionClosed, r.c.Health().State)
	})
}

// A callback that closes its client (the copy is no longer wanted): Close
// from inside it returns without waiting for the goroutine it runs on, and
// the client stops once the callback returns: a Close on another goroutine
// returns nil, and nothing of the client is left running (the bubble ends).
func TestCloseFromInsideACallbackReturnsAndTheClientStops(t *testing.T) {
	eachCallbackKind(t, func(t *testing.T, kind callbackKind, r *rig, hook *callbackHook) {
		inside := make(chan error, 1)
		var once sync.Once
		hook.set(func() { once.Do(func() { inside <- closeTimed(r.c) }) })
		kind.cause(t, r)
		require.NoError(t, <-inside, "Close from inside %s", kind.name)
		require.NoError(t, r.c.Close(), "Close after the callback's")
		assert.Equal(t, mcpsync.ConnectionClosed, r.c.Health().State)
	})
}

// closeTimed closes c, and fails if that took a second or more: a Close
// that waited for its own goroutine would take CloseTimeout.
func closeTimed(c *mcpsync.Client) error {
	start := time.Now()
	err := c.Close()
	if took := time.Since(start); took >= time.Second {
		err = errors.Join(err, fmt.Errorf("Close took %v", took))
	}
	return err
}

// Shutdown whose context ends while a callback still runs says so: it
// returns ErrCloseTimeout (and the context's error), not nil, and a later
// Close waits for the callback.
func TestShutdownEndingWhileACallbackRunsIsErrCloseTimeout(t *testing.T) {
	eachCallbackKind(t, func(t *testing.T, kind callbackKind, r *rig, hook *callbackHook) {
		returned, release := holdCallback(t, kind, r, hook, nil)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := r.c.Shutdown(ctx)
		require.ErrorIs(t, err, mcpsync.ErrCloseTimeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		closed, waiting := closeElsewhere(r)
		if !waiting {
			t.Errorf("a later Close returned (%v) while %s ran", <-closed, kind.name)
		}
		release()
		<-returned
		if !t.Failed() {
			require.NoError(t, <-closed)
		}
	})
}

// A client whose goroutines and deliveries have all ended has nothing left
// to wait for: Shutdown returns nil whatever its context, one that ended
// already included, as many times as it is called.
func TestShutdownOfAStoppedClientIsNilWhateverItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{PingEvery: -1, RevalidateEvery: time.Hour})
		require.NoError(t, r.c.Close())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for i := range 32 {
			require.NoError(t, r.c.Shutdown(ctx), "Shutdown %d with an ended context", i)
		}
	})
}
