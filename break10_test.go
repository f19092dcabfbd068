package mcpsync_test

// Healing as a user drives it: callbacks that close or reconnect, a close
// during healing, a stdio server whose helper outlives it.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// gaveUp counts the ErrReconnectGaveUp OnError was told.
func gaveUp(r *rig) int {
	n := 0
	for _, err := range r.errs.list() {
		if errors.Is(err, mcpsync.ErrReconnectGaveUp) {
			n++
		}
	}
	return n
}

// A natural OnError: once reconnecting gave up, the caller closes the
// client (the copy can no longer be kept fresh). OnError is documented as
// running outside every lock; but it runs on a goroutine of the client's
// own wait group (heal), so Close waits for the very goroutine that calls
// it and returns ErrCloseTimeout after CloseTimeout instead of nil.
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

// Give up, then the caller brings it back: ErrReconnectGaveUp exactly once,
// Health FAILED and degraded while given up, Lookup says Degraded, strict
// Lookup refuses past the bound, and a caller's Reconnect once the server is
// back brings the session UP and re-reads the subscription (the text the
// server changed to during the outage is served).
func TestGiveUpThenCallerReconnectRereads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{
			PingEvery: time.Second, PingTimeout: time.Second, RevalidateEvery: 10 * time.Second, Jitter: 0.1,
			Reconnect: mcpsync.ReconnectPolicy{MaxAttempts: 3, Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond},
		})
		defer func() { require.NoError(t, r.c.Close()) }()
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		r.setDown(true)
		r.faults().DropSession()
		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(5 * time.Second)
		quiesce()
		h := r.c.Health()
		require.Equal(t, mcpsync.ConnectionFailed, h.State, "%+v; errors %v", h, r.errs.list())
		require.Equal(t, 1, gaveUp(r), "ErrReconnectGaveUp told once: %v", r.errs.list())
		require.Greater(t, h.Degraded, 3*time.Second)
		e, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.NotEmpty(t, e.Degraded)

		time.Sleep(20 * time.Second) // past the 11 s bound
		quiesce()
		require.Equal(t, 1, gaveUp(r), "ErrReconnectGaveUp told once: %v", r.errs.list())
		_, err = r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.ErrorIs(t, err, mcpsync.ErrStale)

		r.setDown(false)
		require.NoError(t, r.c.Reconnect(t.Context()))
		quiesce()
		time.Sleep(2 * time.Second)
		quiesce()
		h = r.c.Health()
		assert.Equal(t, mcpsync.ConnectionUp, h.State, "%+v", h)
		e, err = r.c.Lookup(faultURI, mcpsync.RequireFresh())
		require.NoError(t, err)
		assert.Equal(t, "v2", e.Contents[0].Text)
		assert.Empty(t, e.Degraded)
		assert.Equal(t, 1, gaveUp(r))
	})
}

// Close while healing waits out a backoff: the client is CLOSED, and the
// healing it ended is no failure the caller is told about. The lost
// session's transport takes a while to close (a stdio server's graceful
// shutdown does: seconds), and meanwhile the healing goroutine wakes, finds
// the client closed, counts that as a failed attempt, and — at its last
// attempt — moves Health from CLOSED to FAILED and reports
// ErrReconnectGaveUp after Close.
func TestCloseDuringHealingStaysClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow sync.Mutex // protects closing
		closing := false
		r := newRig(t, eras[0], &mcpsync.ClientOptions{
			PingEvery: time.Second, PingTimeout: time.Second, RevalidateEvery: time.Hour,
			Reconnect: mcpsync.ReconnectPolicy{MaxAttempts: 2, Initial: 400 * time.Millisecond, Max: 400 * time.Millisecond},
		})
		r.wire.set(func(w *faultWire) {
			w.closing = func() {
				slow.Lock()
				c := closing
				slow.Unlock()
				if c {
					time.Sleep(3 * time.Second) // a server's graceful shutdown
				}
			}
		})
		// A second session, whose transport has the slow close.
		require.NoError(t, r.c.Reconnect(t.Context()))
		_, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		r.setDown(true)
		r.faults().DropSession()
		// Wait until the loss was found and the first attempt failed.
		for range 100 {
			if len(r.errs.list()) >= 2 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.GreaterOrEqual(t, len(r.errs.list()), 2, "%v", r.errs.list())
		before := len(r.errs.list())
		slow.Lock()
		closing = true
		slow.Unlock()
		require.NoError(t, r.c.Close())
		quiesce()
		assert.Equal(t, mcpsync.ConnectionClosed, r.c.Health().State)
		assert.Empty(t, r.errs.list()[before:], "errors told after Close was called")
	})
}

// A stdio server started through a wrapper that leaves a helper behind
// (a shell, npx, a server that forks a watcher) — the helper keeps the
// server's stderr open. The server itself exits cleanly when its stdin
// closes. Close must still be bounded (stdin, SIGTERM, SIGKILL, each
// bounded) and return nil for the clean exit. The process transport waits
// on exec.Cmd.Wait, which (with Stderr an io.Discard copy and no WaitDelay)
// also waits for every holder of stderr to close it: Close first sees "no
// exit", sends SIGTERM and SIGKILL to a process that is already gone, and
// then blocks until the helper ends, returning "killed".
func TestStdioCloseBoundedWhenAHelperHoldsStderr(t *testing.T) {
	dial := mcpsync.StdioDialer(func(context.Context) (*exec.Cmd, error) {
		cmd := exec.Command("sh", "-c", `sleep 15 >/dev/null </dev/null & exec "$0" -test.run='^$'`, os.Args[0])
		cmd.Env = append(os.Environ(), docServerEnv+"=1", "GORACE=atexit_sleep_ms=0")
		return cmd, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: "p"})
	require.NoError(t, err)
	_, err = c.Subscribe(ctx, docURI)
	require.NoError(t, err)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		took := time.Since(start)
		assert.NoError(t, err, "the server exited cleanly on stdin EOF")
		assert.Less(t, took, 5*time.Second, "Close took %v", took)
	case <-time.After(6 * time.Second):
		t.Errorf("Close still running %v after it was called (stdin close + SIGTERM grace is 4 s)", time.Since(start))
		err := <-done
		t.Logf("Close returned after %v: %v", time.Since(start), err)
	}
}

// OnError that reconnects on a lost session (a caller who wants a new
// session now, say with fresh credentials). When the loss is the failure
// of the caller's own Reconnect, OnError is called while that Reconnect
// still holds the client's reconnect token: the inner Reconnect can only
// wait until its context ends, and the caller's Reconnect returns only then.
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
