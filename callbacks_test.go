package mcpsync_test

// The caller's callbacks (OnError, OnOutcome) run outside every lock and
// off the client's own goroutines: a callback may close or reconnect the
// client, and a panic in one leaves nothing stuck.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		r.setDown(true)
		r.faults().DropSession()
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
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		r.setDown(true)
		start := time.Now()
		err = r.c.Reconnect(t.Context())
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
