package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// (2026-07-28) A server may clean up a replaced listen stream after the
// stream that replaced it subscribed the same URIs, and unsubscribe them
// for the whole session, as the official Go SDK server does: the new
// stream stays acknowledged and open, and notifies none of them. A
// replacement must not leave a URI it carries over silent: once the
// replacement is done, a change of each such URI is read, or the URI is
// visibly degraded. Revalidation is an hour away, so a periodic read
// cannot stand in for the lost notifications.
func TestListenReplacementLeavesNoCarriedURISilent(t *testing.T) {
	carried := []string{"file:///replace/a.md", "file:///replace/b.md", "file:///replace/c.md"}
	const extra = "file:///replace/extra.md"
	for _, tc := range []struct {
		name string
		// before is subscribed before the replacement, carried first.
		before []string
		// replace replaces the listen stream.
		replace func(ctx context.Context, c *mcpsync.Client) error
		// late holds the old stream's clean-up until after the client
		// stopped waiting for it and sent the new stream.
		late bool
	}{
		{"by a Subscribe", carried, func(ctx context.Context, c *mcpsync.Client) error {
			_, err := c.Subscribe(ctx, extra)
			return err
		}, false},
		{"by an Unsubscribe", append(carried[:len(carried):len(carried)], extra), func(ctx context.Context, c *mcpsync.Client) error {
			_, err := c.Unsubscribe(ctx, extra)
			return err
		}, false},
		{"by a Subscribe, cleaned up after the new stream went out", carried, func(ctx context.Context, c *mcpsync.Client) error {
			_, err := c.Subscribe(ctx, extra)
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSessionWideRig(t, append(carried[:len(carried):len(carried)], extra)...)
				srv := r.srv
				for _, u := range tc.before {
					r.subscribeSettled(u)
				}

				// The stream the replacement ends is cleaned up only once
				// the client has gone on with it (the client may wait for
				// that end, so the replacement runs beside the test).
				hold := srv.HoldNextListenEnd()
				defer hold.Release()
				replaced := make(chan error, 1)
				go func() { replaced <- tc.replace(context.Background(), r.c) }()
				synctest.Wait()
				require.True(t, arrived(hold), "the replaced stream ended and its clean-up is held")
				for _, u := range carried {
					t.Logf("before the old stream's clean-up, the server has %s subscribed: %v", u, srv.Subscribed(u))
				}
				if tc.late {
					require.NoError(t, <-replaced) // sent and acknowledged
					for _, u := range carried {
						require.True(t, srv.Subscribed(u), "the new stream carries %s", u)
					}
				}
				hold.Release()
				if !tc.late {
					require.NoError(t, <-replaced)
				}
				time.Sleep(time.Minute) // every read the replacement asked for is done
				quiesce()

				for _, u := range carried {
					srv.Set(u, "text/markdown", "v2")
				}
				// Four poll intervals, an hour short of revalidation.
				time.Sleep(2 * time.Minute)
				quiesce()
				for _, u := range carried {
					entry, err := r.c.Lookup(u)
					require.NoError(t, err, r.describe(u))
					if text := entry.Contents[0].Text; text != "v2" && entry.Degraded == "" {
						t.Errorf("silently stale after a stream replacement: %q served, not degraded: %s", text, r.describe(u))
					}
				}
			})
		})
	}
}

// (2026-07-28) A Subscribe that returns no error returns its subscription
// activated (push or poll, open in the current session), even when the
// replaced stream's clean-up lands while it waits for its first read:
//
//  1. a and b are on stream A; Subscribe(x) cancels A, whose clean-up the
//     server holds past the client's patience, and sends B (a, b, x),
//     acknowledged: x's pass activates it and its first read goes out
//     (held).
//  2. A's clean-up lands: B is suspect, and x's next pass closes the
//     generation and opens a new one, whose stream the server holds.
//  3. x's first read is answered: Subscribe returns.
//
// Subscribe returned nil with a subscription never activated (Mode "",
// state SUBSCRIBING): the interop run against the go-sdk server saw it.
func TestSubscribeReturnsAnActivatedSubscriptionWhenTheOldStreamEndsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, b, x = "file:///late/a.md", "file:///late/b.md", "file:///late/x.md"
		r := newSessionWideRig(t, a, b, x)
		for _, u := range []string{a, b} {
			r.watch(u)
			minutes(1)
		}

		endHold := r.srv.HoldNextListenEnd()
		defer endHold.Release()
		// B's clean-up is held too: the replacement after A's late end
		// waits its patience with no stream open, so that x's pass finds
		// none carrying it.
		endHold2 := r.srv.HoldNextListenEnd()
		defer endHold2.Release()
		readHold := r.faults().HoldNextRequest(string(mcp.MethodResourcesRead), x)
		defer readHold.Release()
		done := goCall(context.Background(), r.c.Subscribe, x)
		synctest.Wait()
		require.True(t, arrived(endHold), "stream A ended and its clean-up is held")
		time.Sleep(time.Second) // past the patience: B goes out and is acknowledged
		quiesce()
		require.True(t, arrived(readHold), "x's first read went out on B")

		listenHold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer listenHold.Release()
		endHold.Release()
		time.Sleep(time.Second) // past the patience for B's end
		quiesce()
		require.True(t, arrived(listenHold), "the stream sent after A's late end is held")
		readHold.Release()
		quiesce()
		res := releasedIfWaiting(done, listenHold)
		listenHold.Release()
		endHold2.Release()
		requireActivated(t, res)

		minutes(2)
		r.requireWhereLeft([]string{a, b, x}, map[string]bool{a: true, b: true, x: true}, nil)
	})
}

// (2026-07-28) The stream that carries x and y ends on the client's side
// (a proxy or the network cuts it) while the server, which cleans up a
// stream session-wide as the official Go SDK does, runs that clean-up only
// later, after the client re-established a stream carrying x and y. The
// new stream is acknowledged and open and notifies neither: a change of
// each is read within two minutes, or the URI is visibly degraded.
// Revalidation is an hour away.
func TestStreamCutBeforeItsCleanUpLeavesNoCarriedURISilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///endlate/x.md", "file:///endlate/y.md"
		r := newSessionWideRig(t, x, y)
		r.watchSettled(x, y)

		cleanUp := r.srv.HoldNextListenEnd()
		defer cleanUp.Release()
		r.faults().CutListenStreams()
		time.Sleep(10 * time.Second) // the stream is re-established
		quiesce()
		require.True(t, arrived(cleanUp), "the ended stream's clean-up is held")
		require.True(t, r.srv.Subscribed(x) && r.srv.Subscribed(y), "the re-established stream carries both")
		cleanUp.Release()
		minutes(1)

		r.requireChangesHeard(t, "its ended stream was cleaned up late", x, y)
	})
}

// (2026-07-28) Subscribe(z) replaces the stream that carries x and y: the
// old stream is cancelled, and the new one waits for the server to be done
// with it. The server, which cleans up a stream session-wide as the
// official Go SDK does, has not run that clean-up yet when the network
// cuts the old request (no answer: the server is not done with it). The
// new stream goes out and is acknowledged; the old one's clean-up lands
// after it and silences x and y on it. A change of each is read within two
// minutes, or the URI is visibly degraded, as for a cut of the current
// stream (TestStreamCutBeforeItsCleanUpLeavesNoCarriedURISilent).
// Revalidation is an hour away.
func TestCutDuringAReplacementLeavesNoURISilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y, z = "file:///cutreplace/x.md", "file:///cutreplace/y.md", "file:///cutreplace/z.md"
		r := newSessionWideRig(t, x, y, z)
		r.watchSettled(x, y)

		cleanUp := r.srv.HoldNextListenEnd()
		defer cleanUp.Release()
		subscribed := goCall(context.Background(), r.c.Subscribe, z)
		synctest.Wait()
		require.True(t, arrived(cleanUp), "the replaced stream's clean-up is held")
		r.faults().CutListenStreams() // the replaced stream only: the new one waits for it
		require.NoError(t, (<-subscribed).err)
		quiesce()
		require.True(t, r.srv.Subscribed(x) && r.srv.Subscribed(y), "the new stream carries both")
		cleanUp.Release()
		minutes(1)

		r.requireChangesHeard(t, "the replaced stream was cut and cleaned up late", x, y)
	})
}

// requireChangesHeard changes each of uris on the server and requires,
// two minutes (four poll intervals) later, that each serves the change or
// is visibly degraded: never silently stale (after says what came before).
func (r *rig) requireChangesHeard(t *testing.T, after string, uris ...string) {
	t.Helper()
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v2")
	}
	minutes(2)
	for _, u := range uris {
		entry, err := r.c.Lookup(u)
		require.NoError(t, err)
		if entry.Contents[0].Text != "v2" && entry.Degraded == "" {
			_, desc := r.state(u)
			t.Errorf("%s silently stale after %s: %s", u, after, desc)
		}
	}
}

// newSessionWideRig (2026-07-28) is a rig whose server cleans up a listen
// stream for the whole session, as the official Go SDK server does, and
// holds uris; revalidation is an hour away, so that a periodic read cannot
// stand in for a lost notification.
func newSessionWideRig(t *testing.T, uris ...string) *rig {
	t.Helper()
	return buildRig(t, eras[1], rigConfig{
		opts:   mcpsync.ClientOptions{RevalidateEvery: time.Hour},
		server: &mcpsynctest.ServerOptions{SessionWideListenEnd: true},
		uris:   uris,
	})
}

// watchSettled subscribes uris with one SubscribeAll and lets a minute pass.
func (r *rig) watchSettled(uris ...string) {
	r.t.Helper()
	_, err := r.c.SubscribeAll(r.t.Context(), uris)
	require.NoError(r.t, err)
	minutes(1)
}
