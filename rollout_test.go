package mcpsync_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// offURI is the second resource of the rollout tests; its refresh position
// lies above faultURI's, so a fraction between them enables only faultURI.
const offURI = "file:///docs/a.md"

// between returns a refresh fraction that enables faultURI and not offURI.
func between(t *testing.T) float64 {
	t.Helper()
	on, err := mcpsync.RefreshPosition(faultURI)
	require.NoError(t, err)
	off, err := mcpsync.RefreshPosition(offURI)
	require.NoError(t, err)
	require.Less(t, on, off)
	return (on + off) / 2
}

// The position is the documented hash of the normalized URI, the same for
// every spelling of one resource, so every process picks the same
// subscriptions.
func TestRefreshFractionPositionIsStable(t *testing.T) {
	sum := sha256.Sum256([]byte(faultURI))
	want := float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
	for _, spelling := range []string{faultURI, "FILE:///docs/handbook.md", "file:///docs/%68andbook.md"} {
		got, err := mcpsync.RefreshPosition(spelling)
		require.NoError(t, err, spelling)
		assert.Equal(t, want, got, spelling)
	}
	assert.InDelta(t, 0.0290902780417549, want, 1e-15, "pinned: a change here moves every subscription")
	_, err := mcpsync.RefreshPosition("::not a uri")
	require.ErrorIs(t, err, mcpsync.ErrInvalidURI)
}

// A fraction of 5% enables about 5% of subscriptions: the hash spreads URIs
// evenly, not by prefix or length.
func TestRefreshFractionShare(t *testing.T) {
	const n = 20000
	for _, f := range []float64{0.05, 0.5} {
		in := 0
		for i := range n {
			p, err := mcpsync.RefreshPosition(fmt.Sprintf("file:///tenant/%d/doc.md", i))
			require.NoError(t, err)
			if p < f {
				in++
			}
		}
		assert.InDelta(t, f, float64(in)/n, 0.01, "fraction %v", f)
	}
}

// Raising the fraction only ever adds subscriptions; 0 enables none and 1
// all; the client's decision is the published position rule.
func TestRefreshFractionMonotonic(t *testing.T) {
	c := connectDoc(t, newDocServer("v1"), "2025-11-25", nil)
	rapid.Check(t, func(rt *rapid.T) {
		uris := rapid.SliceOfN(rapid.StringMatching(`file:///[a-z0-9/]{1,24}\.md`), 1, 20).Draw(rt, "uris")
		lo := rapid.Float64Range(0, 1).Draw(rt, "lo")
		hi := rapid.Float64Range(lo, 1).Draw(rt, "hi")
		enabled := func(f float64) []bool {
			require.NoError(rt, c.SetRefreshFraction(f))
			out := make([]bool, len(uris))
			for i, u := range uris {
				out[i] = c.RefreshEnabled(u)
				p, err := mcpsync.RefreshPosition(u)
				require.NoError(rt, err)
				require.Equal(rt, p < f, out[i], "%s at %v: the client follows the position rule", u, f)
			}
			return out
		}
		atLo, atHi := enabled(lo), enabled(hi)
		for i, u := range uris {
			if atLo[i] && !atHi[i] {
				rt.Fatalf("%s enabled at %v but not at %v", u, lo, hi)
			}
		}
		for i, on := range enabled(0) {
			require.False(rt, on, uris[i])
		}
		for i, on := range enabled(1) {
			require.True(rt, on, uris[i])
		}
	})
}

func TestSetRefreshFractionRejectsOutOfRange(t *testing.T) {
	d := newDocServer("v1")
	c := connectDoc(t, d, "2025-11-25", nil)
	assert.Equal(t, 1.0, c.Rollout().RefreshFraction, "nil option: every subscription refreshes, as before")
	for _, f := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		require.Error(t, c.SetRefreshFraction(f), "%v", f)
		assert.Equal(t, 1.0, c.Rollout().RefreshFraction, "a refused fraction changes nothing")
		_, err := mcpsync.Connect(t.Context(), d.dial, &mcpsync.ClientOptions{Subject: alice, RefreshFraction: &f})
		require.Error(t, err, "Connect refuses RefreshFraction %v", f)
	}
	for _, f := range []float64{0, 0.05, 1} {
		require.NoError(t, c.SetRefreshFraction(f))
		assert.Equal(t, f, c.Rollout().RefreshFraction)
	}
}

// A subscription outside the fraction is subscribed, discovered and fenced,
// but gets no read from the client: not the initial one, none for a
// notification, none from the revalidation timer. The one inside, on the
// same client, gets all of them.
func TestRefreshFractionDisabledSubscriptionGetsNoReads(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{RefreshFraction: new(between(t)), RevalidateEvery: time.Minute})
		r.srv.Set(offURI, "text/markdown", "v1")
		for _, u := range []string{faultURI, offURI} {
			sub, err := r.c.Subscribe(t.Context(), u)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode, u)
		}
		quiesce()
		// In 2026-07-28 the second Subscribe replaces the listen
		// stream, and the URI it carries over is read again.
		initial := r.srv.Reads(faultURI)
		assert.Positive(t, initial)
		assert.Equal(t, 0, r.srv.Reads(offURI), "no initial read")
		assert.True(t, r.srv.Subscribed(offURI), "still subscribed at the server")
		sub, err := r.c.Engine().Subscription(offURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateActive, sub.State, "still an open generation of the fence")
		assert.Zero(t, sub.LastIssuedOrdinal)

		r.srv.Set(faultURI, "text/markdown", "v2")
		r.srv.Set(offURI, "text/markdown", "v2")
		quiesce()
		assert.Equal(t, initial+1, r.srv.Reads(faultURI))
		assert.Equal(t, "v2", r.served())
		assert.Equal(t, 0, r.srv.Reads(offURI), "no read for a notification")

		time.Sleep(2 * time.Minute)
		quiesce()
		assert.Greater(t, r.srv.Reads(faultURI), initial+1, "revalidated")
		assert.Equal(t, 0, r.srv.Reads(offURI), "no revalidation read")
		_, err = r.c.Lookup(offURI)
		require.ErrorIs(t, err, mcpsync.ErrNoVersion)

		st := r.c.Rollout()
		assert.Equal(t, 1, st.Enabled)
		assert.Equal(t, 1, st.Disabled)
		assert.Equal(t, uint64(1), st.Skipped[ledger.TriggerInitial])
		assert.Equal(t, uint64(1), st.Skipped[ledger.TriggerNotification])
		assert.GreaterOrEqual(t, st.Skipped[ledger.TriggerRevalidate], uint64(1))
		assert.Zero(t, r.c.Engine().StaleCounts()[mcpsync.ReasonNotSubscribed],
			"a skipped notification is not reported as one for an unsubscribed URI")
	})
}

// Raising the fraction at runtime starts refreshing the same subscription
// generation, on the same session: notifications and timer ticks read it
// again. Lowering it stops them, and the accepted version stays.
func TestRaisingRefreshFractionStartsRefreshing(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{RefreshFraction: new(0.0), RevalidateEvery: time.Minute})
		before, err := r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(2 * time.Minute)
		quiesce()
		require.Equal(t, 0, r.srv.Reads(faultURI))
		st := r.c.Rollout()
		assert.Equal(t, 0.0, st.RefreshFraction)
		assert.Equal(t, 0, st.Enabled)
		assert.Equal(t, 1, st.Disabled)
		assert.Equal(t, uint64(1), st.Skipped[ledger.TriggerInitial])
		assert.Equal(t, uint64(1), st.Skipped[ledger.TriggerNotification])

		// A URI nobody subscribed is no rollout matter: its
		// notification still leaves a NOT_SUBSCRIBED receipt.
		r.srv.MCPServer().SendNotificationToAllClients(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": "file:///nobody.md"})
		quiesce()
		assert.Equal(t, uint64(1), r.c.Engine().StaleCounts()[mcpsync.ReasonNotSubscribed])
		subscribeCalls := r.srv.SubscribeCalls()

		require.NoError(t, r.c.SetRefreshFraction(1))
		assert.Equal(t, 1, r.c.Rollout().Enabled)
		r.srv.Set(faultURI, "text/markdown", "v3")
		quiesce()
		assert.Equal(t, 1, r.srv.Reads(faultURI), "the notification is read")
		assert.Equal(t, "v3", r.served())
		time.Sleep(90 * time.Second)
		quiesce()
		refreshed := r.srv.Reads(faultURI)
		assert.Greater(t, refreshed, 1, "the timer reads it too")

		after, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, before.SessionGeneration, after.SessionGeneration, "no reconnect")
		assert.Equal(t, before.SubscriptionGeneration, after.SubscriptionGeneration, "no resubscribe")
		assert.Equal(t, subscribeCalls, r.srv.SubscribeCalls())

		require.NoError(t, r.c.SetRefreshFraction(0)) // roll back
		r.srv.Set(faultURI, "text/markdown", "v4")
		time.Sleep(2 * time.Minute)
		quiesce()
		assert.Equal(t, refreshed, r.srv.Reads(faultURI), "no read after the rollback")
		rolledBack, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, after.Watermark, rolledBack.Watermark, "the watermark stays")
	})
}

// The status is data: its JSON form is pinned.
func TestRolloutStatusFormat(t *testing.T) {
	got, err := json.Marshal(mcpsync.RolloutStatus{Schema: mcpsync.SchemaRolloutStatus, RefreshFraction: 0.05, Enabled: 1, Disabled: 19,
		Skipped: map[ledger.Trigger]uint64{ledger.TriggerNotification: 3}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"schema":"rolloutStatus.v1","refreshFraction":0.05,"enabled":1,"disabled":19,"skipped":{"notification":3}}`, string(got))
}

// The refresh fraction only decides which subscriptions the client reads:
// "a subscription outside the fraction stays subscribed, discovered and
// fenced, but the client sends it no reads of its own". A URI outside the
// fraction (SetRefreshFraction(0): the rollout rolled back) whose reopen
// failed (a 2026-07-28 stream the server ends, the write closing the
// generation and opening the next failing once) is still repaired at its
// ticks: half an hour later, with the ledger healthy, it is open in the
// current session.
func TestURIOutsideTheRefreshFractionIsReopenedAfterAFailedReopen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.NoError(t, r.c.SetRefreshFraction(0)) // the rollout is rolled back
		require.False(t, r.c.RefreshEnabled(faultURI))

		r.reestablishRefusingOnce(openingWrite)

		r.sixRevalidations() // half an hour, the ledger healthy
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.SessionGeneration != r.c.Health().SessionGeneration || !(sub.State == ledger.StateActive || sub.State == ledger.StateVersionAccepted) {
			t.Fatalf("a watched URI outside the refresh fraction is no longer subscribed: %s (generation %d) half an hour later, health %s",
				sub.State, sub.SubscriptionGeneration, r.c.Health().State)
		}
	})
}

// The same URI outside the fraction, whose reopen failed (its write, once),
// is left open in push mode with no listen stream carrying it. Its ticks
// put it back on a stream: half an hour later the server notifies it
// again.
func TestURIOutsideTheRefreshFractionIsPutBackOnAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))
		require.NoError(t, r.c.SetRefreshFraction(0)) // the rollout is rolled back
		require.False(t, r.c.RefreshEnabled(faultURI))

		// The reopen's write fails, once.
		r.reestablishRefusingOnce(openingWrite)
		r.requireToldReopen(faultURI)

		r.sixRevalidations() // half an hour, the ledger healthy
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.True(t, r.srv.Subscribed(faultURI),
			"a watched URI outside the refresh fraction is carried by no listen stream half an hour later, "+
				"yet its subscription is %s in %s mode (session %d, client session %d), health %s",
			sub.State, sub.Mode, sub.SessionGeneration, r.c.Health().SessionGeneration, r.c.Health().State)
	})
}
