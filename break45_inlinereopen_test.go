package mcpsync_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2025-11-25. A late resources/unsubscribe removed watched x on the
// server; reconcileServer sends resources/subscribe(x) again, holding x's
// key, and that request is stuck before the server. A Reconnect replaces
// the session meanwhile: its resubscribe finds x's key held and only marks
// it (resync), for the holder's settle to honour. reconcileServerOnce does
// not go through settle: when the stuck request fails (its session ended),
// it takes that as a refusal and reopens x inline on the OLD connection
// (closeTold, then subscribe(c.ctx, conn, ...)), and the resync mark is
// never honoured.
//
// Checked right after, and after settling: x is open in the current
// session (push with the server notifying it, or polling with a reason),
// or visibly degraded; and it ends serving current content.
func TestBreak45LegacyInlineReopenRacesReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b45/inline/x.md"
		r := buildRig(t, eras[0], rigConfig{uris: []string{x}})
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		quiesce()
		kit := r.faults()
		hold := kit.HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), x)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := r.c.Unsubscribe(ctx, x)
			done <- err
		}()
		<-hold.Arrived()
		cancel()
		<-done
		quiesce()
		sub, err = r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sub.Mode)
		quiesce()

		resub := kit.HoldNextRequest(string(mcp.MethodResourcesSubscribe), x)
		hold.Release() // the late unsubscribe reaches the server
		<-resub.Arrived()
		t.Logf("reconcile's resources/subscribe is stuck; reconnecting")
		require.NoError(t, r.c.Reconnect(t.Context()))
		quiesce()
		resub.Release() // fails: its session ended
		quiesce()

		gen := r.c.Health().SessionGeneration
		sub, err = r.c.Engine().Subscription(x)
		require.NoError(t, err)
		e, lerr := r.c.Lookup(x)
		require.NoError(t, lerr)
		t.Logf("just after: x %s %s %q session %d/%d; server subscribed %v; degraded %q",
			sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, gen, r.srv.Subscribed(x), e.Degraded)
		openNow := sub.SessionGeneration == gen && generationOpen(sub.State)
		if !openNow {
			if e.Degraded == "" {
				t.Errorf("x is not open in the current session (%s, session %d/%d) and Lookup says nothing", sub.State, sub.SessionGeneration, gen)
			}
		}
		if openNow && sub.Mode == mcpsync.ModePush && e.Degraded == "" {
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
			time.Sleep(time.Minute)
			quiesce()
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
		if sub.Mode == mcpsync.ModePush {
			require.True(t, r.srv.Subscribed(x), desc())
		}
		require.Equal(t, "v2", text, "after the change: "+desc())
	})
}
