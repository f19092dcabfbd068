package mcpsync_test

// Connect and Close: a Connect cancelled mid-handshake frees the engine,
// and Close is bounded, clean and final whatever it races (healing,
// SubscribeAll, a refused re-subscribe, a stdio server's helper).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Close while healing waits out a backoff: the client stays CLOSED, and
// the healing it ended is no failure the caller is told about, even when
// the lost session's transport takes seconds to close (a stdio server's
// graceful shutdown) and the healing wakes meanwhile at its last attempt:
// no ErrReconnectGaveUp, no FAILED, after Close.
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
		r.watch(faultURI)
		quiesce()
		r.loseSession()
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

// A stdio server started through a wrapper that leaves a helper behind (a
// shell, npx, a server that forks a watcher): the helper keeps the server's
// stderr open. The server itself exits cleanly when its stdin closes. Close
// is still bounded (stdin, SIGTERM, SIGKILL, each bounded) and returns nil
// for the clean exit, rather than waiting for every holder of stderr.
func TestStdioCloseBoundedWhenAHelperHoldsStderr(t *testing.T) {
	dial := mcpsync.CommandDialer(mcpsync.Command{
		Name: "sh", Args: []string{"-c", `sleep 15 >/dev/null </dev/null & exec "$0" -test.run='^$'`, os.Args[0]},
		Env: append(os.Environ(), docServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
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

// The Client owns a CommandDialer server and whatever it started: a helper
// the server left running (a watcher, a wrapper's child) is ended with it
// when the session ends, not left behind as an orphan.
func TestCommandDialerEndsWhatTheServerStarted(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "helper.pid")
	dial := mcpsync.CommandDialer(mcpsync.Command{
		Name: "sh", Args: []string{"-c", `sleep 300 >/dev/null 2>&1 </dev/null & echo $! >"$1"; exec "$0" -test.run='^$'`, os.Args[0], pidFile},
		Env: append(os.Environ(), docServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: "p"})
	require.NoError(t, err)
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	helper, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.True(t, running(helper), "the helper runs while the session does")
	require.NoError(t, c.Close())
	for running(helper) {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(helper, syscall.SIGKILL)
			t.Fatalf("helper %d still running after Close", helper)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// Connect's context ends while the server holds the initialize answer: the
// Connect fails, and the engine is free for the next Connect.
func TestConnectCancelledMidHandshakeFreesTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		e := newEngine(t, nil)
		var holds []*mcpsynctest.Hold
		defer func() {
			for _, h := range holds {
				h.Release()
			}
		}()
		hold := true
		dial := func(context.Context) (transport.Interface, error) {
			kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
			if hold {
				holds = append(holds, kit.HoldNext("initialize", ""), kit.HoldNext("server/discover", ""))
			}
			return kit, nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Engine: e, Subject: alice})
		cancel()
		require.Error(t, err)
		hold = false
		c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: e, Subject: alice})
		require.NoError(t, err, "a Connect cancelled mid-handshake left the engine in use")
		require.NoError(t, c.Close())
	})
}

// SubscribeAll racing Close: Close returns with nothing of the client left
// running (synctest reports a goroutine left blocked in the bubble; goleak
// one left outside), whichever fake-time moment Close comes at.
func TestSubscribeAllRacingCloseLeavesNothingRunning(t *testing.T) {
	eachEraAnd(t, []time.Duration{0, time.Microsecond, 5 * time.Millisecond, 15 * time.Millisecond}, nil, func(t *testing.T, w wiring, d time.Duration) {
		uris := numbered("file:///b39/close/%03d.md", 150)
		c := buildRig(t, w, rigConfig{uris: uris}).c
		done := goCall(t.Context(), c.SubscribeAll, uris)
		time.Sleep(d)
		require.NoError(t, c.Close())
		<-done
		synctest.Wait()
	})
}

// 2025-11-25. The client's request subscribing a URI again after a late
// unsubscribe is refused at the moment the client is closed: Close returns
// cleanly, and nothing of the client is left running (goleak in TestMain).
func TestRefusedResubscribeRacingCloseLeavesNothingRunning(t *testing.T) {
	const a = "file:///b44/close/x.md"
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{uris: []string{a}})
		var wg sync.WaitGroup
		var once sync.Once
		closed := make(chan error, 1)
		lateUnsubscribe(t, r, a, refusingSubscribesOf(a, func() {
			once.Do(func() { wg.Go(func() { closed <- r.c.Close() }) })
		}))
		wg.Wait()
		require.NoError(t, <-closed)
		time.Sleep(time.Hour)
		quiesce()
	})
}

// Close is final for a Reconnect the caller started before it: the
// Reconnect's dial is slow, Close returns meanwhile and frees the engine,
// and a second Client drives the engine from then on. When the first
// Client's dial comes back, it must start no session on the engine that
// is no longer its own: the second Client's subscription keeps hearing
// the server (its change is read within seconds), and Subscribes of the
// second Client still open.
func TestCloseIsFinalForAReconnectUnderWay(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const other = "file:///docs/other.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		srv.Set(other, "text/plain", "v1")
		e := newEngine(t, nil)
		gate := make(chan struct{})
		dialing := make(chan struct{}, 1)
		dials := 0
		slowDial := func(context.Context) (transport.Interface, error) {
			dials++
			if dials == 2 {
				dialing <- struct{}{}
				<-gate // a dial that takes a while, whatever the context says
			}
			return srv.NewInProcessTransport(), nil
		}
		a, err := mcpsync.Connect(t.Context(), slowDial, &mcpsync.ClientOptions{Engine: e, Subject: alice, ProtocolVersion: w.version})
		require.NoError(t, err)
		reconnected := make(chan error, 1)
		go func() { reconnected <- a.Reconnect(context.Background()) }()
		<-dialing
		require.NoError(t, a.Close())

		b, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Engine: e, Subject: alice, ProtocolVersion: w.version})
		require.NoError(t, err, "Close left the engine in use")
		defer func() { require.NoError(t, b.Close()) }()
		_, err = b.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		srv.Set(docURI, "text/plain", "v1.5")
		time.Sleep(5 * time.Second)
		quiesce()
		entry, err := b.Lookup(docURI)
		require.NoError(t, err)
		require.Equal(t, "v1.5", entry.Contents[0].Text, "the second client hears its server")

		close(gate) // the closed client's dial comes back
		assert.Error(t, <-reconnected, "a Reconnect of a closed client")
		quiesce()

		srv.Set(docURI, "text/plain", "v2")
		time.Sleep(5 * time.Second)
		quiesce()
		entry, err = b.Lookup(docURI)
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text,
			"the second client's copy went stale (Degraded %q): the closed client started a session on its engine", entry.Degraded)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err = b.Subscribe(ctx, other)
		assert.NoError(t, err, "a Subscribe of the second client after the closed client's dial came back")
	})
}

// Two Clients of one ledger, each on an engine of its own: the first
// unsubscribed a URI long ago, the second watches it now. The first's
// Close, whether it is a hand-over or a Close that timed out on a stuck
// ledger write and finishes after the second started, closes nothing the
// second watches.
func TestCloseLeavesAloneWhatAnotherClientOfItsLedgerWatches(t *testing.T) {
	eachEraAnd(t, []bool{false, true}, named("handed over", "after a Close that timed out"), func(t *testing.T, w wiring, stuck bool) {
		const other = "file:///docs/other.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(changedURI, "text/markdown", "v1")
		srv.Set(other, "text/markdown", "v1")
		store := ledger.NewMemory(nil)
		r1 := buildRig(t, w, rigConfig{srv: srv, ledger: true, store: store, opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, CloseTimeout: time.Second}})
		r1.watch(changedURI)
		quiesce()
		_, err := r1.c.Unsubscribe(t.Context(), changedURI)
		require.NoError(t, err)
		quiesce()
		release := func() {}
		if stuck {
			opening, slow := r1.ledger.slowWrite(writeOf(other, ledger.StateSubscribing))
			ctx, cancel := context.WithCancel(t.Context())
			done := goCall(ctx, r1.c.Subscribe, other)
			<-opening
			cancel()
			<-done
			require.ErrorIs(t, r1.c.Close(), mcpsync.ErrCloseTimeout, "a pass is parked in a ledger write")
			release = func() { close(slow) }
		}

		e2 := engineOn(t, store)
		r2 := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: e2, RevalidateEvery: time.Hour}})
		r2.watch(changedURI)
		quiesce()
		sub, err := e2.Subscription(changedURI)
		require.NoError(t, err)
		require.True(t, openIn(sub, e2.SessionGeneration()), r2.describe(changedURI))

		if stuck {
			release()
		} else {
			require.NoError(t, r1.c.Close())
		}
		quiesce()
		sub, err = e2.Subscription(changedURI)
		require.NoError(t, err)
		assert.True(t, openIn(sub, e2.SessionGeneration()), "the first client's Close closed what the second watches: %s", r2.describe(changedURI))
	})
}

// A read that Close ends failed nothing the caller can act on: OnError is
// not told about it.
func TestCloseEndsAReadInFlightQuietly(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{})
		r.watch(faultURI)
		held := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		<-held.Arrived()
		require.NoError(t, r.c.Close())
		for _, err := range r.errs.list() {
			var re *mcpsync.ReadError
			assert.False(t, errors.As(err, &re), "OnError told of a read Close ended: %v", err)
		}
	})
}
