package mcpsync_test

// Reconnecting and healing: a caller's Reconnect, the client's own healing
// after a lost session, and everything that races them (Subscribe,
// SubscribeAll, a request stuck in the old session, a ledger that refuses
// the writes of the new session). Once faults stop, every watched URI is
// open in the current session, on the server, and serves current content,
// or says why not.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A caller's Reconnect that cannot open a new session (the server is down
// for a moment) has already closed the old one. The client must not then
// sit on a dead session that Health calls UP with nothing healing it: once
// the server is back, the subscription converges to the server's new text
// (ten minutes pass; the default heartbeat finds a dead session within
// one), or Health says the client is not up.
func TestFailedReconnectLeavesNoDeadSessionUp(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{RevalidateEvery: time.Hour})
		r.subscribeSettled(faultURI)

		r.setDown(true)
		err := r.c.Reconnect(t.Context())
		require.Error(t, err, "the server is down: Reconnect says so")
		r.setDown(false) // the server is back

		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(10 * time.Minute)
		quiesce()
		h := r.c.Health()
		entry, lerr := r.c.Lookup(faultURI)
		t.Logf("after the failed Reconnect and 10 minutes: Health %+v; Lookup degraded %q err %v", h, entry.Degraded, lerr)
		if h.State == mcpsync.ConnectionUp {
			r.requireConverged(faultURI, "failed caller Reconnect (Health says UP)")
		}
	})
}

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
		r.watch(faultURI)
		quiesce()
		r.loseSession()
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

		time.Sleep(45 * time.Second) // past the 41 s bound (11 s and RequestTimeout)
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

// A stdio server that stops answering (SIGSTOP: its pipes stay open) is
// found by the heartbeat within PingEvery + PingTimeout. Healing does not
// then wait out the lost server's graceful shutdown (stdin close, then
// SIGTERM, each bounded by seconds) before it dials the successor: the lost
// process is ended beside the new session, so the copy is healed well
// within 1.5 s of the stop.
func TestHealDoesNotWaitForTheLostServersShutdown(t *testing.T) {
	var mu sync.Mutex // protects procs
	var procs []*exec.Cmd
	dial := mcpsync.CommandDialer(mcpsync.Command{
		Name: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append(os.Environ(), docServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
		Prepare: func(cmd *exec.Cmd) error {
			mu.Lock()
			procs = append(procs, cmd)
			mu.Unlock()
			return nil
		},
	})
	healed := make(chan mcpsync.ResourceVersion, 16)
	opts := &mcpsync.ClientOptions{
		Subject: "p", PingEvery: 100 * time.Millisecond, PingTimeout: 200 * time.Millisecond,
		Reconnect: mcpsync.ReconnectPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		OnOutcome: func(o mcpsync.Outcome) {
			if o.Accepted && o.Version.Version.SessionGeneration > 1 {
				healed <- o.Version.Version
			}
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, dial, opts)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Subscribe(ctx, docURI)
	require.NoError(t, err)

	mu.Lock()
	stopped := procs[0].Process
	mu.Unlock()
	start := time.Now()
	require.NoError(t, stopped.Signal(syscall.SIGSTOP))
	select {
	case <-healed:
	case <-ctx.Done():
		t.Fatal("not healed")
	}
	took := time.Since(start)
	t.Logf("healed %v after SIGSTOP", took)
	// PingEvery + PingTimeout + a first reconnect + a read: well under 1.5 s.
	require.Less(t, took, 1500*time.Millisecond, "healing waited for the lost server's shutdown")
}

// A Reconnect opens every watched URI again as a new generation of the new
// session. When the write that activates that generation fails once (a
// ledger briefly unavailable), the Reconnect returns the error, OnError is
// told a *ReopenError and Lookup says the copy is degraded; once the ledger
// is healthy the URI comes back: half an hour (six revalidation periods)
// later it is open in the current session, not degraded, and serves the
// server's newer content. Both eras.
func TestReconnectWhoseActivationFailsHeals(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newLedgerRig(t, w)
		r.subscribe()

		r.ledger.failWrites(1, activatingWrite)
		err := r.c.Reconnect(t.Context())
		if err == nil || r.ledger.failures() != 1 {
			t.Fatalf("the activation was to fail once: Reconnect returned %v, %d failures", err, r.ledger.failures())
		}
		quiesce()
		r.requireToldReopen(faultURI)

		// The ledger is healthy again; the server's content moves on.
		r.requireHealsAfterAChange(faultURI)
	})
}

// A Reconnect whose write opening a URI's new generation fails once leaves
// the URI's subscription in the session that is gone; OnError is told, and
// the URI's next revalidation tick opens it in the current session, where
// it reads the server's current content. Both eras.
func TestReconnectWhoseOpeningWriteFailsHeals(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newLedgerRig(t, w)
		r.subscribe()

		r.ledger.failWrites(1, openingWrite)
		if err := r.c.Reconnect(t.Context()); err == nil || r.ledger.failures() != 1 {
			t.Fatalf("the opening write was to fail once: Reconnect returned %v, %d failures", err, r.ledger.failures())
		}
		if len(r.errs.list()) == 0 {
			quiesce()
		}
		if len(r.errs.list()) == 0 {
			t.Fatal("the failed resubscribe was not told to OnError")
		}
		r.srv.Set(faultURI, "text/markdown", "v2")
		r.sixRevalidations()

		sub, err := r.c.Engine().Subscription(faultURI)
		if err != nil {
			t.Fatal(err)
		}
		if sub.SessionGeneration != r.c.Health().SessionGeneration || sub.State != ledger.StateActive {
			t.Fatalf("not reopened in the current session: %s in session %d", sub.State, sub.SessionGeneration)
		}
		if got := r.served(); got != "v2" {
			t.Fatalf("serves %q, the server has v2", got)
		}
	})
}

// A Reconnect whose context is cancelled while it re-subscribes the first
// URI (its subscribe or listen request held before the server) leaves the
// URIs not reopened; their next revalidation ticks open them, the server
// notifies both again, and each reads the server's current content. Both
// eras.
func TestReconnectCancelledMidwayHeals(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const y = "file:///docs/zz-other.md"
		r := newRig(t, w, nil)
		r.srv.Set(y, "text/markdown", "y1")
		var hold *mcpsynctest.Hold
		r.setOnDial(func(conn int, kit *mcpsynctest.Transport) {
			if conn == 2 {
				hold = kit.HoldNextRequest(subscribeMethod(w.version), "") // the Reconnect's first re-subscribe
			}
		})
		r.watch(faultURI, y)
		quiesce()

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.c.Reconnect(ctx) }()
		synctest.Wait()
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("the Reconnect never asked the server to notify")
		}
		cancel()
		require.Error(t, <-done, "the Reconnect was cancelled midway")
		hold.Release()
		quiesce()

		r.srv.Set(faultURI, "text/markdown", "v2")
		r.srv.Set(y, "text/markdown", "y2")
		minutes(36)
		r.requireHealed(faultURI, "v2")
		r.requireHealed(y, "y2")
		require.True(t, r.srv.Subscribed(faultURI))
		require.True(t, r.srv.Subscribed(y))
	})
}

// A Reconnect while SubscribeAll's first listen stream (carrying every URI)
// waits for its acknowledgement: every URI still ends open in push mode in
// the new session, with its first version, carried by the new session's
// stream; a later replacement (an Unsubscribe) drops only the URI
// unsubscribed. The old session's transport refuses what is sent on it
// after it closed, as a real one does.
func TestSubscribeAllWaitingForItsStreamAcrossAReconnectEndsPushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		c, srv := r.c, r.srv
		uris := make([]string, 8)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b35/reconnect/%d.md", i)
			srv.Set(uris[i], "text/markdown", "v1 "+uris[i])
		}

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		done := goCall(t.Context(), c.SubscribeAll, uris)
		synctest.Wait()
		<-hold.Arrived()
		reconnected := make(chan error, 1)
		go func() { reconnected <- c.Reconnect(t.Context()) }()
		synctest.Wait()
		hold.Release()
		require.NoError(t, <-reconnected)
		require.NoError(t, (<-done).err)
		quiesce()

		gen := c.Health().SessionGeneration
		for _, uri := range uris {
			sub, err := c.Engine().Subscription(uri)
			require.NoError(t, err)
			assert.Equal(t, gen, sub.SessionGeneration, uri)
			assert.Equal(t, ledger.ModePush, sub.Mode, uri)
			assert.True(t, srv.Subscribed(uri), uri)
			entry, err := c.Lookup(uri)
			require.NoError(t, err)
			assert.Equal(t, "v1 "+uri, entry.Contents[0].Text)
		}
		_, err := c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(uris[0]))
		for _, uri := range uris[1:] {
			assert.True(t, srv.Subscribed(uri), uri)
		}
	})
}

// A SubscribeAll whose first request to the server (the listen stream, or a
// resources/subscribe) is held while the caller reconnects returns with
// every URI ACTIVE in push mode in the new session, carried by the server,
// and later changes reach Lookup. Both eras.
func TestSubscribeAllRacingAReconnectEndsPushedInTheNewSession(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		uris := numbered("file:///b37/reconnect/%d.md", 6)
		r := buildRig(t, w, rigConfig{uris: uris})
		var hold *mcpsynctest.Hold
		if w.version == "2026-07-28" {
			hold = r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		} else {
			hold = r.faults().HoldNextRequest(string(mcp.MethodResourcesSubscribe), "")
		}
		done := goCall(t.Context(), r.c.SubscribeAll, uris)
		synctest.Wait()
		<-hold.Arrived()
		require.NoError(t, r.c.Reconnect(t.Context()))
		hold.Release()
		require.NoError(t, (<-done).err)
		quiesce()
		gen := r.c.Health().SessionGeneration
		for _, u := range uris {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			assert.Equal(t, gen, sub.SessionGeneration, u)
			assert.True(t, sub.State == ledger.StateActive || sub.State == ledger.StateVersionAccepted, "%s %s", u, sub.State)
			assert.Equal(t, ledger.ModePush, sub.Mode, "%s: %q", u, sub.ModeReason)
			assert.True(t, r.srv.Subscribed(u), u)
			r.srv.Set(u, "text/markdown", "v2")
		}
		quiesce()
		for _, u := range uris {
			entry, err := r.c.Lookup(u)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text, u)
		}
	})
}

// 2025-11-25. A late resources/unsubscribe removed watched x on the server,
// and the client's request subscribing x again is stuck before the server
// when a Reconnect replaces the session; the stuck request then fails with
// its session. Whatever took x's key at that moment, x must end in the
// current session, never reopened on the old connection: right after, x is
// open in the current session (push with the server notifying it, or
// polling with a reason) or visibly degraded, never stale without saying so
// two minutes after a change, and once settled it is open in the current
// session and serves current content.
func TestResubscribeStuckAcrossAReconnectOpensInTheNewSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b45/inline/x.md"
		r := buildRig(t, eras[0], rigConfig{uris: []string{x}})
		hold := heldLateUnsubscribe(t, r, x)
		kit := r.faults()
		resub := kit.HoldNextRequest(string(mcp.MethodResourcesSubscribe), x)
		hold.Release() // the late unsubscribe reaches the server
		<-resub.Arrived()
		t.Logf("reconcile's resources/subscribe is stuck; reconnecting")
		require.NoError(t, r.c.Reconnect(t.Context()))
		quiesce()
		resub.Release() // fails: its session ended
		quiesce()

		gen := r.c.Health().SessionGeneration
		sub, err := r.c.Engine().Subscription(x)
		require.NoError(t, err)
		e, lerr := r.c.Lookup(x)
		require.NoError(t, lerr)
		t.Logf("just after: x %s %s %q session %d/%d; server subscribed %v; degraded %q",
			sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, gen, r.srv.Subscribed(x), e.Degraded)
		openNow := openIn(sub, gen)
		if !openNow {
			if e.Degraded == "" {
				t.Errorf("x is not open in the current session (%s, session %d/%d) and Lookup says nothing", sub.State, sub.SessionGeneration, gen)
			}
		}
		if openNow && sub.Mode == ledger.ModePush && e.Degraded == "" {
			require.True(t, r.srv.Subscribed(x), "x in push mode, not degraded, but the server does not notify it")
		}

		r.srv.Set(x, "text/markdown", "v2")
		time.Sleep(2 * time.Minute)
		quiesce()
		if e, err := r.c.Lookup(x); err == nil && len(e.Contents) > 0 {
			s, _ := r.c.Engine().Subscription(x)
			t.Logf("2 min after the server changed x: x %s, serves %q, degraded %q", s.State, e.Contents[0].Text, e.Degraded)
			if e.Contents[0].Text != "v2" && e.Degraded == "" {
				t.Errorf("Lookup serves stale %q silently 2 min after the change (x %s in session %d; server subscribed %v)", e.Contents[0].Text, s.State, s.SessionGeneration, r.srv.Subscribed(x))
			}
		}
		for i := range 30 {
			minutes(1)
			if s, _ := r.c.Engine().Subscription(x); generationOpen(s.State) {
				t.Logf("x open again after %d min", i+1)
				break
			}
		}
		gen = r.c.Health().SessionGeneration
		sub, err = r.c.Engine().Subscription(x)
		require.NoError(t, err)
		e, lerr = r.c.Lookup(x)
		require.NoError(t, lerr)
		text := ""
		if len(e.Contents) > 0 {
			text = e.Contents[0].Text
		}
		desc := func() string {
			return fmt.Sprintf("%s %s ", sub.State, sub.Mode) + " reason " + sub.ModeReason + " degraded " + e.Degraded + " text " + text
		}
		t.Logf("after a minute: %s session %d/%d server subscribed %v", desc(), sub.SessionGeneration, gen, r.srv.Subscribed(x))
		require.Equal(t, gen, sub.SessionGeneration, desc())
		require.True(t, generationOpen(sub.State), desc())
		if sub.Mode == ledger.ModePush {
			require.True(t, r.srv.Subscribed(x), desc())
		}
		require.Equal(t, "v2", text, "after the change: "+desc())
	})
}

// x and y are watched. A Reconnect re-subscribes them one by one; the first
// one's request is parked. Meanwhile a second caller Subscribes the other
// one (already watched) and its request in the new session is parked too.
// The reconnect is let go while the second caller still holds the URI; the
// second caller's context ends as its request is answered, so its Subscribe
// fails. The URI is still watched (by the first caller): the reconnect's
// work on it is not lost with the failed Subscribe. Two minutes after a
// change neither URI is stale without saying so, and once settled both are
// open in the current session, serve current content, and are notified by
// the server when in push mode. Both eras.
func TestSubscribeCancelledDuringAReconnectLeavesTheURIHealed(t *testing.T) {
	eachEra(t, func(t *testing.T, era wiring) {
		const x, y = "file:///b46/mark/x.md", "file:///b46/mark/y.md"
		r := watchingAllRig(t, era, x, y)
		rec := r.reconnectParked(subscribeMethod(era.version))
		other := x
		if rec.first == x || (era.name == "modern") {
			other = y
			if rec.first == y {
				other = x
			}
		}
		t.Logf("reconnect's first request parked (%q); second caller subscribes %s", rec.first, other)
		bctx, cancel := context.WithCancel(context.Background())
		bDone := goCall(bctx, r.c.Subscribe, other)
		var second string
		select {
		case second = <-rec.arrived2:
		case <-time.After(time.Second):
			t.Logf("the second caller sent nothing in 1s")
		}
		close(rec.h1)
		quiesce()
		recFinished := false
		select {
		case err := <-rec.done:
			recFinished = true
			t.Logf("reconnect: %v; second request %q", err, second)
		default:
			t.Logf("reconnect still running")
		}
		cancel()
		close(rec.h2)
		quiesce()
		t.Logf("second caller: %v", (<-bDone).err)
		if !recFinished {
			<-rec.done
		}
		quiesce()

		gen := r.c.Health().SessionGeneration
		for _, u := range []string{x, y} {
			_, _, desc := r.look(u)
			t.Logf("just after: %s", desc)
		}
		r.srv.Set(x, "text/markdown", "v2")
		r.srv.Set(y, "text/markdown", "v2")
		time.Sleep(2 * time.Minute)
		quiesce()
		var bad []string
		for _, u := range []string{x, y} {
			_, e, desc := r.look(u)
			t.Logf("2 min after the change: %s", desc)
			if e.Contents[0].Text != "v2" && e.Degraded == "" {
				bad = append(bad, "stale silently 2 min after the change: "+desc)
			}
		}
		minutes(10)
		gen = r.c.Health().SessionGeneration
		for _, u := range []string{x, y} {
			s, e, desc := r.look(u)
			t.Logf("12 min after: %s", desc)
			if !openIn(s, gen) || e.Contents[0].Text != "v2" {
				bad = append(bad, "not healed: "+desc)
			} else if s.Mode == ledger.ModePush && !r.srv.Subscribed(u) {
				bad = append(bad, "push but not notified: "+desc)
			}
		}
		for _, b := range bad {
			t.Error(b)
		}
	})
}

// watchingAllRig is a rig over w whose server holds uris and whose client
// watches the first two of them (x and y), subscribed by one SubscribeAll.
func watchingAllRig(t *testing.T, w wiring, uris ...string) *rig {
	t.Helper()
	r := buildRig(t, w, rigConfig{uris: uris})
	_, err := r.c.SubscribeAll(t.Context(), uris[:2])
	require.NoError(t, err)
	quiesce()
	return r
}

// The same hand-off, racing what the caller does next:
//   - "had-unsubscribe": the URI was watched; right as the failing
//     Subscribe returns, the caller Unsubscribes it. It must not come back.
//   - "first": the URI was not watched; the failing first Subscribe drops
//     its watch. Nothing may open it again.
//
// Either way the unwatched URI is neither open in the current session nor
// notified by the server, and the other (watched) URI ends open in the
// current session with current content. Both eras.
func TestSubscribeCancelledDuringAReconnectBringsNothingUnwatchedBack(t *testing.T) {
	eachEraAnd(t, []string{"had-unsubscribe", "first"}, nil, func(t *testing.T, era wiring, mode string) {
		const x, y, z = "file:///b47/x.md", "file:///b47/y.md", "file:///b47/z.md"
		r := watchingAllRig(t, era, x, y, z)
		var second []string
		if mode == "first" && era.name == "legacy" {
			second = []string{z} // the second caller's own request
		}
		rec := r.reconnectParked(subscribeMethod(era.version), second...)
		other := y
		if rec.first == y {
			other = x
		}
		keep := x
		if other == x {
			keep = y
		}
		target := other
		if mode == "first" {
			target = z
		}
		t.Logf("reconnect's first request parked (%q); second caller subscribes %s", rec.first, target)
		bctx, cancel := context.WithCancel(context.Background())
		bDone := make(chan error, 1)
		uDone := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(bctx, target)
			bDone <- err
			if mode == "had-unsubscribe" {
				_, err := r.c.Unsubscribe(context.Background(), target)
				uDone <- err
			} else {
				uDone <- nil
			}
		}()
		select {
		case u := <-rec.arrived2:
			t.Logf("second request %q parked", u)
		case <-time.After(time.Second):
			t.Logf("the second caller sent nothing in 1s")
		}
		close(rec.h1)
		quiesce()
		cancel()
		close(rec.h2)
		t.Logf("second caller: %v", <-bDone)
		t.Logf("unsubscribe: %v", <-uDone)
		t.Logf("reconnect: %v", <-rec.done)
		quiesce()
		r.srv.Set(keep, "text/markdown", "v2")
		minutes(12)
		gen := r.c.Health().SessionGeneration
		var bad []string
		s, e, desc := r.look(keep)
		t.Logf("kept: %s", desc)
		if !openIn(s, gen) || e.Contents[0].Text != "v2" {
			bad = append(bad, "watched URI not healed: "+desc)
		}
		ts, _ := r.c.Engine().Subscription(target)
		desc = fmt.Sprintf("%s: %s %s session %d/%d server %v", target, ts.State, ts.Mode, ts.SessionGeneration, gen, r.srv.Subscribed(target))
		t.Logf("unwatched: %s", desc)
		if openIn(ts, gen) {
			bad = append(bad, "unwatched URI open again: "+desc)
		}
		if r.srv.Subscribed(target) {
			bad = append(bad, "server still notifies an unwatched URI: "+desc)
		}
		for _, b := range bad {
			t.Error(b)
		}
	})
}

// Every write opening a new generation fails for good while reconnects and
// second Subscribes (with contexts that end at once) race on a watched URI,
// twenty times over: the client does not storm the ledger (attempts bounded
// by the number of races), the URI is visibly degraded meanwhile, and once
// the ledger heals the URI comes back; goleak checks that nothing is left
// running. Both eras.
func TestSteadyLedgerFailureAcrossRepeatedReconnectsDrawsNoStorm(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newLedgerRig(t, w)
		r.subscribe()
		r.ledger.failWrites(1<<20, openingWrite)
		const races = 20
		for range races {
			done := make(chan struct{}, 4)
			for range 3 {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					defer cancel()
					_, _ = r.c.Subscribe(ctx, faultURI)
					done <- struct{}{}
				}()
			}
			go func() { _ = r.c.Reconnect(context.Background()); done <- struct{}{} }()
			for range 4 {
				<-done
			}
			quiesce()
		}
		f := r.ledger.failures()
		t.Logf("failed writes after %d races: %d; errors told: %d", races, f, len(r.errs.list()))
		time.Sleep(30 * time.Second)
		quiesce()
		f2 := r.ledger.failures()
		t.Logf("failed writes 30s later: %d", f2)
		require.LessOrEqual(t, f2, 20*races, "ledger write storm")
		e, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		require.NotEmpty(t, e.Degraded, "URI not open and not degraded")
		r.ledger.failWrites(0, nil)
		r.requireHealsAfterAChange(faultURI)
	})
}

// A Subscribe that returns no error returns its subscription activated
// (push or poll, open), even when a Reconnect lands while it waits for its
// first read: x's pass opened it, its first read is held on the old
// session, the Reconnect opens x anew in the new session (that session's
// subscribe request, or listen stream, held), then the old read fails with
// its session and Subscribe returns. It must not return the new session's
// generation half opened (SUBSCRIBING, no mode) with a nil error. Both eras.
func TestSubscribeRacingAReconnectReturnsAnActivatedSubscription(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const x = "file:///race/reconnect/x.md"
		r := buildRig(t, w, rigConfig{uris: []string{x}})
		readHold := r.faults().HoldNextRequest(string(mcp.MethodResourcesRead), x)
		defer readHold.Release()
		subHold := make(chan *mcpsynctest.Hold, 1)
		r.setOnDial(func(conn int, kit *mcpsynctest.Transport) {
			subHold <- kit.HoldNextRequest(subscribeMethod(w.version), "")
		})
		done := goCall(context.Background(), r.c.Subscribe, x)
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		require.True(t, arrived(readHold), "x's first read is held")

		reconnected := make(chan error, 1)
		go func() { reconnected <- r.c.Reconnect(context.Background()) }()
		synctest.Wait()
		hold := <-subHold
		defer hold.Release()
		require.True(t, arrived(hold), "the new session's subscribe of x is held")
		readHold.Release()
		quiesce()
		res := releasedIfWaiting(done, hold)
		hold.Release()
		require.NoError(t, <-reconnected)
		requireActivated(t, res)

		minutes(2)
		r.requireWhereLeft([]string{x}, map[string]bool{x: true}, nil)
	})
}

// While a session is lost and healing keeps failing, no subscription
// changes generation or mode, whatever ticks and polls fall due meanwhile,
// and the staleness bound a strict Lookup checks is never widened; once
// the server is back, every watched URI is open in push mode in the new
// session and serves the server's current content. Both eras.
func TestLostSessionChangesNoGenerationOrModeUntilHealed(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const y = "file:///case/lost/y.md"
		r := buildRig(t, w, rigConfig{uris: []string{y}, opts: mcpsync.ClientOptions{
			RevalidateEvery: time.Minute, PingEvery: 10 * time.Second,
			Reconnect: mcpsync.ReconnectPolicy{Initial: time.Second, Max: 5 * time.Second},
		}})
		r.subscribe()
		r.watch(y)
		quiesce()
		before := map[string]mcpsync.Subscription{}
		for _, u := range []string{faultURI, y} {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			require.Equal(t, ledger.ModePush, sub.Mode)
			before[u] = sub
		}

		r.loseSession()
		for range 10 { // five revalidation periods, lost
			time.Sleep(30 * time.Second)
			quiesce()
			require.NotEqual(t, mcpsync.ConnectionUp, r.c.Health().State, "the server is down")
			for u, was := range before {
				sub, err := r.c.Engine().Subscription(u)
				require.NoError(t, err)
				require.Equal(t, was.SubscriptionGeneration, sub.SubscriptionGeneration, "%s changed generation while the session was lost", u)
				require.Equal(t, was.SessionGeneration, sub.SessionGeneration, u)
				require.Equal(t, was.Mode, sub.Mode, "%s changed mode while the session was lost", u)
				require.LessOrEqual(t, sub.StalenessBoundMs, was.StalenessBoundMs, "%s's bound widened while the session was lost", u)
			}
		}

		r.setDown(false)
		r.srv.Set(faultURI, "text/markdown", "v2")
		r.srv.Set(y, "text/markdown", "y2")
		minutes(1)
		require.Equal(t, mcpsync.ConnectionUp, r.c.Health().State)
		for u, text := range map[string]string{faultURI: "v2", y: "y2"} {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			require.Equal(t, r.c.Health().SessionGeneration, sub.SessionGeneration, "%s open in the new session", u)
			require.Equal(t, ledger.ModePush, sub.Mode, u)
			e, err := r.c.Lookup(u)
			require.NoError(t, err)
			require.Equal(t, text, e.Contents[0].Text, u)
			require.Empty(t, e.Degraded, u)
		}
	})
}

// (2025-11-25) While a session is lost, no subscription changes generation
// or mode, also when a request the client gave up on settles meanwhile:
// an Unsubscribe's resources/unsubscribe hangs past RequestTimeout, the URI
// is subscribed again (a new generation, push), and the session is lost
// with the server down. The hung unsubscribe then settles, which asks the
// URI's pass to put the server's subscription right: with no session to
// put it right on, the pass leaves the generation and its mode as they are
// until a new session opens the URI anew.
func TestRequestSettlingWhileTheSessionIsLostChangesNoGenerationOrMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[0], rigConfig{opts: mcpsync.ClientOptions{
			RequestTimeout: 5 * time.Second, RevalidateEvery: time.Hour, PingEvery: 10 * time.Second,
			Reconnect: mcpsync.ReconnectPolicy{Initial: time.Second, Max: 5 * time.Second},
		}})
		r.subscribe()
		hung := make(chan struct{})
		r.wire.set(func(w *faultWire) {
			w.park = func(req wireRequest) <-chan struct{} {
				if req.method == string(mcp.MethodResourcesUnsubscribe) {
					return hung
				}
				return nil
			}
		})
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		_, _ = r.c.Unsubscribe(gone, faultURI) // its pass runs without the caller
		time.Sleep(10 * time.Second)           // past RequestTimeout: the unsubscribe is given up on
		quiesce()
		r.watch(faultURI)
		quiesce()

		r.loseSession()
		time.Sleep(30 * time.Second) // the heartbeat finds the session lost
		quiesce()
		require.NotEqual(t, mcpsync.ConnectionUp, r.c.Health().State, "the server is down")
		before, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, before.Mode, before.ModeReason)
		close(hung) // the given-up unsubscribe settles, on the lost session
		for range 6 {
			time.Sleep(30 * time.Second)
			quiesce()
			require.NotEqual(t, mcpsync.ConnectionUp, r.c.Health().State, "the server is down")
			sub, err := r.c.Engine().Subscription(faultURI)
			require.NoError(t, err)
			require.Equal(t, before.SubscriptionGeneration, sub.SubscriptionGeneration,
				"changed generation while the session was lost: now %s %s (%q)", sub.State, sub.Mode, sub.ModeReason)
			require.Equal(t, before.Mode, sub.Mode, "changed mode while the session was lost: %q", sub.ModeReason)
		}
		r.setDown(false)
	})
}

// A Subscribe waits for its subscription at most about RequestTimeout,
// whatever the session does: here its request (a resources/subscribe, or
// the listen stream that is to carry the URI) hangs, the heartbeat finds
// the session dead, and healing gives up (the server stays down). The
// Subscribe returns, polling with a reason or with an error, within a
// minute; it does not wait for a server that may never come back. Both
// eras.
func TestSubscribeWhileTheSessionIsLostReturnsWithinTheRequestTimeout(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const y = "file:///case/lost/subscribe/y.md"
		r := buildRig(t, w, rigConfig{uris: []string{y}, opts: mcpsync.ClientOptions{
			RequestTimeout: 5 * time.Second, RevalidateEvery: time.Hour,
			PingEvery: 2 * time.Second, PingTimeout: time.Second,
			Reconnect: mcpsync.ReconnectPolicy{MaxAttempts: 2, Initial: time.Second, Max: 2 * time.Second},
		}})
		r.subscribe()
		hung := make(chan struct{})
		defer close(hung)
		r.wire.set(func(fw *faultWire) {
			fw.park = func(req wireRequest) <-chan struct{} {
				if req.method == "ping" || req.method == subscribeMethod(w.version) {
					return hung // a server that stopped answering
				}
				return nil
			}
		})
		r.setDown(true)
		done := goCall(context.Background(), r.c.Subscribe, y)
		select {
		case res := <-done:
			t.Logf("Subscribe: %s %s (%q), err %v; health %s", res.val.State, res.val.Mode, res.val.ModeReason, res.err, r.c.Health().State)
		case <-time.After(time.Minute):
			t.Errorf("Subscribe still waiting a minute later (RequestTimeout 5 s); health %s", r.c.Health().State)
			require.NoError(t, r.c.Close()) // ends the wait
			<-done
		}
	})
}
