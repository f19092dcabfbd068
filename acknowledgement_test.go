package mcpsync_test

// Acknowledgements of 2026-07-28 listen streams: only an acknowledged
// stream counts as carrying a URI, and only for the URIs it both asked for
// and had acknowledged. An acknowledgement that leaves a URI out, names one
// never asked for, names another stream, comes late or never, never leaves
// a URI that claims push silently stale.

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Acknowledgements that name another stream (a wrong id), or that never
// come before RequestTimeout: the Subscribe waiting for one returns within
// twice RequestTimeout, in poll mode saying why, and the URI already pushed
// keeps being read; both serve each change within the poll bound.
func TestWrongOrLateAcknowledgementPollsSayingWhy(t *testing.T) {
	eachCase(t, []string{"wrong-id", "slow"}, nil, func(t *testing.T, fault string) {
		const a, b = "file:///b40/ack/a.md", "file:///b40/ack/b.md"
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second}, uris: []string{a, b}})
		sa, err := r.c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sa.Mode)
		r.wire.set(func(w *faultWire) {
			switch fault {
			case "wrong-id":
				w.rewrite = func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification {
					if m.Method == mcp.MethodNotificationSubscriptionsAcknowledged {
						m = withStreamID(m, "9999")
					}
					return []mcp.JSONRPCNotification{m}
				}
			case "slow":
				w.ackDelay = time.Minute
			}
		})
		start := time.Now()
		sb, err := r.c.Subscribe(t.Context(), b)
		require.NoError(t, err)
		require.LessOrEqual(t, time.Since(start), 10*time.Second)
		require.Equal(t, ledger.ModePoll, sb.Mode)
		require.Contains(t, sb.ModeReason, "subscribe failed")
		for i := range 5 {
			time.Sleep(2 * time.Minute)
			want := fmt.Sprintf("v%d", i+2)
			r.srv.Set(a, "text/markdown", want)
			r.srv.Set(b, "text/markdown", want)
			time.Sleep(40 * time.Second)
			quiesce()
			for _, u := range []string{a, b} {
				got, desc := r.state(u)
				require.Equal(t, want, got, "%s: %s", u, desc)
			}
		}
	})
}

// A server that acknowledges only part of a replacement stream. x is
// subscribed in push mode on an acknowledged stream; Subscribe y replaces
// the stream, and the server's acknowledgement carries y but no longer x
// (nor does it notify x). x must go to poll mode, be marked degraded, or be
// read after it changes: it may not stay in push mode serving the old text
// until the hourly revalidation (DESIGN: no pretence of real time,
// "silently stale ... is a bug").
func TestURILeftOutOfAnAcknowledgementIsNotLeftSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///partial/x.md", "file:///partial/y.md"
		r := newRig(t, eras[1], &mcpsync.ClientOptions{RevalidateEvery: time.Hour})
		c, srv := r.c, r.srv
		srv.Set(x, "text/markdown", "v1")
		srv.Set(y, "text/markdown", "v1")

		sx, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sx.Mode)
		minutes(1)

		r.wire.leaveOut(x) // the server stops accepting x
		sy, err := c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sy.Mode, sy.ModeReason)
		minutes(1)

		srv.Set(x, "text/markdown", "v2")
		minutes(1)

		sub, err := c.Engine().Subscription(x)
		require.NoError(t, err)
		e, err := c.Lookup(x)
		require.NoError(t, err)
		text := ""
		if len(e.Contents) > 0 {
			text = e.Contents[0].Text
		}
		assert.True(t, text == "v2" || sub.Mode != ledger.ModePush || e.Degraded != "",
			"x is off every acknowledged stream yet still claims push mode, serves %q (server has v2), degraded %q", text, e.Degraded)
	})
}

// A server whose first acknowledgement of a listen stream names a URI z the
// stream never asked for. A later Subscribe(z) must still put z on a stream
// the server acknowledges for it, rather than take the stray
// acknowledgement's word: a minute after the server changes z, Lookup
// serves the change, or z is not claiming push mode.
func TestAcknowledgementOfAnUnaskedURIIsNotTakenAsSubscribed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, z = "file:///b40/unasked/a.md", "file:///b40/unasked/z.md"
		var forged bool
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{a, z}, wire: func(w *faultWire) {
			w.ackFilter = func(asked []string) []string {
				if forged {
					return asked
				}
				forged = true
				return append(slices.Clone(asked), z)
			}
		}})
		r.watch(a)
		before := r.listens()
		sz, err := r.c.Subscribe(t.Context(), z)
		require.NoError(t, err)
		t.Logf("z: %s %s (%q); listen requests sent for it: %d; filters so far %v",
			sz.State, sz.Mode, sz.ModeReason, r.listens()-before, r.wire.listenFilters())
		quiesce()

		time.Sleep(time.Minute)
		r.srv.Set(z, "text/markdown", "v2")
		minutes(1)
		got, desc := r.state(z)
		require.True(t, got == "v2" || sz.Mode != ledger.ModePush,
			"z serves %q a minute after the server changed it to v2: %s", got, desc)
	})
}

// A slow but honest server, which acknowledges every subscriptions/listen
// stream, naming every URI asked for, one second after RequestTimeout (30 s
// by default): it carries every stream it is sent. Three URIs are
// subscribed one after another; each Subscribe times out waiting and polls.
// Three hours later every URI is in push mode: the retries of the streams
// do not take turns replacing each other's streams for ever.
func TestLateButHonestAcknowledgementsEndPushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b41/slow/a.md", "file:///b41/slow/b.md", "file:///b41/slow/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.ackDelay = 31 * time.Second // RequestTimeout is 30 s
		}})
		for _, u := range uris {
			sub, err := r.c.Subscribe(t.Context(), u)
			require.NoError(t, err)
			t.Logf("%s: %s %q", u, sub.Mode, sub.ModeReason)
		}
		time.Sleep(3 * time.Hour)
		quiesce()
		push, lines := r.pushed(uris)
		for _, l := range lines {
			t.Log(l)
		}
		f := r.wire.listenFilters()
		t.Logf("%d listen requests in 3 hours; the last four filters: %v", len(f), f[len(f)-4:])
		require.NoError(t, r.c.Close())
		time.Sleep(time.Minute) // the wire's delayed acknowledgements
		require.Equal(t, len(uris), push, fmt.Sprintf("after 3 hours, %d of %d URIs pushed by a server that acknowledges every stream", push, len(uris)))
	})
}

// A server that carries at most max URIs per listen stream, the newest ones
// (the last of the filter): it acknowledges every stream, naming only the
// last max URIs it asked for. A steady fault: the same filter always gets
// the same answer. Subscribing more than max URIs leaves the older ones out
// of the acknowledgement; once steady, the client sends at most two listen
// requests per URI per revalidation period, rather than trying one URI
// after another on a stream that displaces the last one tried.
func TestServerCarryingOnlyTheNewestURIsDrawsNoStorm(t *testing.T) {
	type capped struct{ n, max int }
	eachCase(t, []capped{{2, 1}, {20, 10}}, func(tc capped) string {
		return fmt.Sprintf("%d-URIs-max-%d", tc.n, tc.max)
	}, func(t *testing.T, tc capped) {
		var uris []string
		for i := range tc.n {
			uris = append(uris, fmt.Sprintf("file:///b41/cap/%02d.md", i))
		}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.ackFilter = func(asked []string) []string {
				if len(asked) <= tc.max {
					return asked
				}
				return asked[len(asked)-tc.max:]
			}
		}})
		r.watch(uris...)
		// Let the fault become steady: half an hour.
		time.Sleep(30 * time.Minute)
		quiesce()
		before, reads := r.listens(), r.srv.Reads(uris[0])
		const periods = 12 // revalidation periods of 5 minutes
		time.Sleep(periods * 5 * time.Minute)
		quiesce()
		listens := r.listens() - before
		push, _ := r.pushed(uris)
		t.Logf("%d listen requests and %d reads of %s in %d revalidation periods; %d of %d URIs pushed now",
			listens, r.srv.Reads(uris[0])-reads, uris[0], periods, push, tc.n)
		require.LessOrEqual(t, listens, periods*2*tc.n,
			"a server that steadily carries only the newest %d URIs drew %d listen requests in %d revalidation periods", tc.max, listens, periods)
	})
}

// A listen stream the server never acknowledges does not count as carrying
// the URIs its filter names. x is pushed on an acknowledged stream;
// Subscribe(y) sends the replacement naming both, which is stuck before the
// server (never acknowledged, never ended): y polls. Half an hour later the
// server notifies x on some stream, or Lookup's Degraded says it does not
// (DESIGN: a watched URI is carried, or Degraded says why).
func TestUnacknowledgedStreamIsNotTakenAsCarrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newRig(t, eras[1], nil)
		r.subscribeOnAnUnacknowledgedStream(y)
		xs, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		if !r.srv.Subscribed(faultURI) && entry.Degraded == "" {
			t.Fatalf("%s is %s in %s mode, carried by no stream on the server, and Lookup's Degraded is empty", faultURI, xs.State, xs.Mode)
		}
	})
}

// The same with polls too rare to help: no poll tick of y tries its stream
// again within the test, so only x's own revalidation tick can see that the
// stream carrying it never reached the server, and open x on a new one.
// Half an hour later the server notifies x, and a change of x is pushed.
func TestUnacknowledgedStreamIsFoundByTheURIsOwnTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const y = "file:///docs/zz-other.md"
		r := newRig(t, eras[1], &mcpsync.ClientOptions{PollEvery: 24 * time.Hour})
		r.subscribeOnAnUnacknowledgedStream(y)
		require.True(t, r.srv.Subscribed(faultURI), "%s is carried by no stream the server has", faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		require.Equal(t, "v2", r.served(), "a change of %s was not pushed", faultURI)
	})
}

// subscribeOnAnUnacknowledgedStream (2026-07-28) has faultURI pushed on an
// acknowledged stream, then a Subscribe(y) send the replacement naming
// both, which stays stuck before the server (never acknowledged, never
// ended) until the test ends: y polls. Then half an hour passes.
func (r *rig) subscribeOnAnUnacknowledgedStream(y string) {
	t := r.t
	t.Helper()
	r.subscribe()
	r.srv.Set(y, "text/markdown", "y1")
	hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
	t.Cleanup(hold.Release)
	sub, err := r.c.Subscribe(t.Context(), y)
	require.NoError(t, err)
	require.Equal(t, ledger.ModePoll, sub.Mode, "y's stream was never acknowledged")
	quiesce()
	r.sixRevalidations() // half an hour
}
