package mcpsync_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Passing coverage. A ledger that refuses a reopen's write every time for
// an hour, then recovers: the URI is repaired once it does, and OnError
// hears one *ReopenError per revalidation tick at most, not a burst.
// Promises: everything right is eventually accepted; a repeating failure is
// visible without flooding OnError.
func TestBreak34PassingRepeatingFaultHealsWithoutFlood(t *testing.T) {
	for _, m := range b33Matchers {
		t.Run("reestablish-"+m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, eras[1], l, &errs)
				r.subscribe()

				l.armCAS(1000, m.match)
				r.faults().EndListenStreams()
				b34Hour(t, r, &errs)
				l.armCAS(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v2")
			})
		})
	}
	for _, w := range eras {
		t.Run("reconnect-activate-"+w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, w, l, &errs)
				r.subscribe()

				l.armCAS(1000, b33Matchers[2].match)
				require.Error(t, r.c.Reconnect(t.Context()))
				b34Hour(t, r, &errs)
				l.armCAS(0, nil)
				r.srv.Set(faultURI, "text/markdown", "v2")
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v2")
			})
		})
	}
}

// Passing coverage. A server without resources.subscribe: the URI polls.
// A Reconnect whose activation write fails once leaves it SUBSCRIBING in
// the new session; its next poll tick opens it again, and it reads the
// server's current content. Promise: everything right is eventually
// accepted, in poll mode too.
func TestBreak34PassingPollModeRepaired(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{NoSubscribe: true})
				srv.Set(faultURI, "text/markdown", "v1")
				l := newB33Ledger()
				eng, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
				require.NoError(t, err)
				var errs b33Errors
				c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
					return srv.NewInProcessTransport(), nil
				}, &mcpsync.ClientOptions{Engine: eng, Subject: alice, ProtocolVersion: version, Seed: 1, OnError: errs.add})
				require.NoError(t, err)
				defer func() { require.NoError(t, c.Close()) }()
				sub, err := c.Subscribe(t.Context(), faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePoll, sub.Mode)

				l.armCAS(1, b33Matchers[2].match)
				require.Error(t, c.Reconnect(t.Context()))
				quiesce()
				b33Told(t, c, &errs, faultURI)
				srv.Set(faultURI, "text/markdown", "v2")
				for range 6 {
					time.Sleep(6 * time.Minute)
					quiesce()
				}
				b33Healed(t, c, faultURI, "v2")
			})
		})
	}
}

func b34Reopens(errs *b33Errors) int {
	n := 0
	for _, err := range errs.list() {
		var re *mcpsync.ReopenError
		if errors.As(err, &re) {
			n++
		}
	}
	return n
}

// b34Hour waits an hour of failing writes and checks that OnError heard
// at most one *ReopenError per revalidation period (5 min, jitter 20%),
// plus the first failure.
func b34Hour(t *testing.T, r *rig, errs *b33Errors) {
	t.Helper()
	start := time.Now()
	for range 60 {
		time.Sleep(time.Minute)
		quiesce()
		b33Drain(r)
		limit := 2 + int(time.Since(start)/(4*time.Minute))
		if n := b34Reopens(errs); n > limit {
			t.Fatalf("%d *ReopenError in %v: more than one per revalidation tick", n, time.Since(start))
		}
	}
	require.Positive(t, b34Reopens(errs), "the failing reopen was never told")
}
