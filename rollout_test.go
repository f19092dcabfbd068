package mcpsync_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
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
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, w, &mcpsync.ClientOptions{RefreshFraction: new(between(t)), RevalidateEvery: time.Minute})
				r.srv.Set(offURI, "text/markdown", "v1")
				for _, u := range []string{faultURI, offURI} {
					sub, err := r.c.Subscribe(t.Context(), u)
					require.NoError(t, err)
					assert.Equal(t, mcpsync.ModePush, sub.Mode, u)
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
				assert.Equal(t, mcpsync.StateActive, sub.State, "still an open generation of the fence")
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
				assert.Equal(t, uint64(1), st.Skipped[mcpsync.TriggerInitial])
				assert.Equal(t, uint64(1), st.Skipped[mcpsync.TriggerNotification])
				assert.GreaterOrEqual(t, st.Skipped[mcpsync.TriggerRevalidate], uint64(1))
				assert.Zero(t, r.c.Engine().StaleCounts()[mcpsync.ReasonNotSubscribed],
					"a skipped notification is not reported as one for an unsubscribed URI")
			})
		})
	}
}

// Raising the fraction at runtime starts refreshing the same subscription
// generation, on the same session: notifications and timer ticks read it
// again. Lowering it stops them, and the accepted version stays.
func TestRaisingRefreshFractionStartsRefreshing(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
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
				assert.Equal(t, uint64(1), st.Skipped[mcpsync.TriggerInitial])
				assert.Equal(t, uint64(1), st.Skipped[mcpsync.TriggerNotification])

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
		})
	}
}

// shadowCase builds engine state, then observes what the caller served.
type shadowCase struct {
	name      string
	principal string
	setup     func(t *testing.T, e *mcpsync.Engine)
	served    string // text the caller's path served for docURI
	verdict   mcpsync.ShadowVerdict
	refusal   mcpsync.LookupRefusal
}

func acceptText(t *testing.T, e *mcpsync.Engine, body string) {
	t.Helper()
	out, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerNotification), text(docURI, body))
	require.NoError(t, err)
	require.True(t, out.Accepted)
}

func readNotFound(t *testing.T, e *mcpsync.Engine) {
	t.Helper()
	out, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerNotification), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
}

func TestShadowVerdicts(t *testing.T) {
	subscribed := func(t *testing.T, e *mcpsync.Engine) {
		_, err := e.Subscribe(docURI, alice)
		require.NoError(t, err)
		_, err = e.Activate(docURI, mcpsync.ModePush)
		require.NoError(t, err)
	}
	withV1 := func(t *testing.T, e *mcpsync.Engine) {
		subscribed(t, e)
		acceptText(t, e, "v1")
	}
	cases := []shadowCase{
		{name: "agree", setup: withV1, served: "v1", verdict: mcpsync.VerdictAgree},
		{name: "differs", setup: withV1, served: "v0", verdict: mcpsync.VerdictDiffers},
		{name: "no version yet", setup: subscribed, served: "v1", verdict: mcpsync.VerdictWouldRefuse, refusal: mcpsync.LookupNoVersion},
		{name: "tombstone pending", served: "v1", verdict: mcpsync.VerdictWouldRefuse, refusal: mcpsync.LookupTombstonePending,
			setup: func(t *testing.T, e *mcpsync.Engine) { withV1(t, e); readNotFound(t, e) }},
		{name: "tombstoned", served: "v1", verdict: mcpsync.VerdictWouldRefuse, refusal: mcpsync.LookupTombstoned,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				readNotFound(t, e)
				_, _, err := e.ApplyListing(docURI, false, newClock().t)
				require.NoError(t, err)
			}},
		{name: "revoked", served: "v1", verdict: mcpsync.VerdictWouldRefuse, refusal: mcpsync.LookupRevoked,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				_, err := e.RevokeSubject(alice)
				require.NoError(t, err)
			}},
		{name: "forbidden", principal: bob, setup: withV1, served: "v1", verdict: mcpsync.VerdictWouldRefuse, refusal: mcpsync.LookupForbidden},
		{name: "not subscribed", setup: func(*testing.T, *mcpsync.Engine) {}, served: "v1", verdict: mcpsync.VerdictNotSynced},
		{name: "discovered only", served: "v1", verdict: mcpsync.VerdictNotSynced,
			setup: func(t *testing.T, e *mcpsync.Engine) { require.NoError(t, e.Discover(docURI)) }},
		{name: "closed", served: "v1", verdict: mcpsync.VerdictNotSynced,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				_, err := e.BeginClose(docURI)
				require.NoError(t, err)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, nil)
			tc.setup(t, e)
			principal := alice
			if tc.principal != "" {
				principal = tc.principal
			}
			s, err := mcpsync.NewShadow(e, principal)
			require.NoError(t, err)
			before := ledgerState(t, e)

			servedAt := time.Date(2026, 11, 30, 8, 59, 0, 0, time.UTC)
			rep, err := s.Observe(docURI, text(docURI, tc.served).Contents(), servedAt)
			require.NoError(t, err)
			assert.Equal(t, tc.verdict, rep.Verdict)
			assert.Equal(t, tc.refusal, rep.Refusal)
			assert.Equal(t, text(docURI, tc.served).Digest(), rep.ServedDigest)
			assert.Equal(t, servedAt, rep.ServedAt)
			switch tc.verdict {
			case mcpsync.VerdictAgree, mcpsync.VerdictDiffers:
				assert.Equal(t, text(docURI, "v1").Digest(), rep.AcceptedDigest)
				assert.Equal(t, uint64(1), rep.ReadOrdinal)
				assert.Equal(t, uint64(1), rep.SessionGeneration)
				assert.Equal(t, uint64(1), rep.SubscriptionGeneration)
			default:
				assert.Empty(t, rep.AcceptedDigest)
				assert.Zero(t, rep.ReadOrdinal)
			}
			assert.Equal(t, map[mcpsync.ShadowVerdict]uint64{tc.verdict: 1}, s.Counts())
			assert.Equal(t, before, ledgerState(t, e), "the shadow writes nothing")
		})
	}
}

// ledgerStateOf is everything the fence writes: records (watermarks,
// versions, tombstones, close receipts), the outbox and the audit.
type ledgerStateOf struct {
	Ledger ledger.Snapshot
	Outbox []mcpsync.OutboxEntry
	Stale  []mcpsync.StaleReceipt
	Counts map[mcpsync.StaleReason]uint64
}

func ledgerState(t *testing.T, e *mcpsync.Engine) ledgerStateOf {
	t.Helper()
	snap, err := ledger.Export(context.Background(), e.Ledger())
	require.NoError(t, err)
	entries, err := e.PullOutbox(0, 0)
	require.NoError(t, err)
	return ledgerStateOf{Ledger: snap, Outbox: entries, Stale: e.StaleReceipts(), Counts: e.StaleCounts()}
}

// The report is data: its JSON form is pinned.
func TestShadowReportFormat(t *testing.T) {
	e := activeEngine(t, nil)
	acceptText(t, e, "v1")
	s, err := mcpsync.NewShadow(e, alice)
	require.NoError(t, err)
	rep, err := s.Observe(docURI, text(docURI, "v0").Contents(), time.Date(2026, 11, 30, 8, 59, 0, 0, time.UTC))
	require.NoError(t, err)
	got, err := json.Marshal(rep)
	require.NoError(t, err)
	want := fmt.Sprintf(`{"schema":"shadowReport.v1","uri":"file:///docs/a.md","subject":"user:alice","verdict":"DIFFERS",`+
		`"servedDigest":%q,"acceptedDigest":%q,"readOrdinal":1,"sessionGeneration":1,"subscriptionGeneration":1,`+
		`"state":"ACTIVE","watermark":1,"servedAt":"2026-11-30T08:59:00Z","observedAt":"2026-11-30T09:00:00Z"}`,
		text(docURI, "v0").Digest(), text(docURI, "v1").Digest())
	assert.JSONEq(t, want, string(got))

	got, err = json.Marshal(mcpsync.RolloutStatus{Schema: mcpsync.SchemaRolloutStatus, RefreshFraction: 0.05, Enabled: 1, Disabled: 19,
		Skipped: map[mcpsync.Trigger]uint64{mcpsync.TriggerNotification: 3}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"schema":"rolloutStatus.v1","refreshFraction":0.05,"enabled":1,"disabled":19,"skipped":{"notification":3}}`, string(got))
}

// Served content that cannot be a version (empty, here) differs from any
// accepted one, and the report says why; an invalid URI is an error and is
// not counted.
func TestShadowServedContentAndBadURI(t *testing.T) {
	e := activeEngine(t, nil)
	acceptText(t, e, "v1")
	s, err := mcpsync.NewShadow(e, alice)
	require.NoError(t, err)
	rep, err := s.Observe(docURI, nil, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, mcpsync.VerdictDiffers, rep.Verdict)
	assert.Empty(t, rep.ServedDigest)
	assert.Contains(t, rep.Detail, string(mcpsync.ReasonEmptyContents))

	_, err = s.Observe("::not a uri", nil, time.Time{})
	require.ErrorIs(t, err, mcpsync.ErrInvalidURI)
	assert.Equal(t, map[mcpsync.ShadowVerdict]uint64{mcpsync.VerdictDiffers: 1}, s.Counts())

	_, err = mcpsync.NewShadow(e, "")
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
	_, err = mcpsync.NewShadow(nil, alice)
	require.Error(t, err)
}

// Observe is called from every request the caller serves: counts add up
// under concurrency (and -race is clean).
func TestShadowCountsConcurrent(t *testing.T) {
	e := activeEngine(t, nil)
	acceptText(t, e, "v1")
	s, err := mcpsync.NewShadow(e, alice)
	require.NoError(t, err)
	agree, differ := text(docURI, "v1").Contents(), text(docURI, "v0").Contents()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				served := agree
				if i%2 == 1 {
					served = differ
				}
				_, err := s.Observe(docURI, served, time.Time{})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[mcpsync.ShadowVerdict]uint64{mcpsync.VerdictAgree: 200, mcpsync.VerdictDiffers: 200}, s.Counts())
}

// Typical use: a Client syncs its own engine beside the caller's read path,
// which keeps serving its own copy; the shadow reports agreement, a change
// the caller has not caught up with, and a deleted resource the fence would
// no longer serve, and never touches the outbox.
func TestShadowBesideClient(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			r := newRig(t, w, nil)
			r.subscribe()
			s, err := mcpsync.NewShadow(r.c.Engine(), alice)
			require.NoError(t, err)
			callerServes := func(body string) mcpsync.ShadowReport {
				t.Helper()
				before := r.outbox()
				served := []mcpsync.Content{{URI: faultURI, MIMEType: "text/markdown", Text: body}}
				rep, err := s.Observe(faultURI, served, time.Now())
				require.NoError(t, err)
				assert.Equal(t, before, r.outbox(), "the shadow never writes to the outbox")
				return rep
			}
			assert.Equal(t, mcpsync.VerdictAgree, callerServes("v1").Verdict)

			r.srv.Set(faultURI, "text/markdown", "v2")
			require.True(t, next(t, r.outcomes).Accepted)
			rep := callerServes("v1") // the caller's own cache is behind
			assert.Equal(t, mcpsync.VerdictDiffers, rep.Verdict)
			assert.Equal(t, uint64(2), rep.ReadOrdinal)

			r.srv.Delete(faultURI)
			gone := next(t, r.outcomes)
			require.Equal(t, mcpsync.DecisionTombstonePending, gone.Version.Decision)
			rep = callerServes("v2")
			assert.Equal(t, mcpsync.VerdictWouldRefuse, rep.Verdict)
			assert.Equal(t, mcpsync.LookupTombstonePending, rep.Refusal)
			assert.Equal(t, map[mcpsync.ShadowVerdict]uint64{
				mcpsync.VerdictAgree: 1, mcpsync.VerdictDiffers: 1, mcpsync.VerdictWouldRefuse: 1,
			}, s.Counts())
		})
	}
}

// The shadow of discovery: the caller's own listing against the library's
// two-pass scan. Sets are compared by key; a task needing a complete
// enumeration would refuse an unproven catalog, and the report says so.
func TestShadowListing(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: snapshot})
			for _, u := range []string{faultURI, offURI, "file:///docs/b.md"} {
				srv.Set(u, "text/markdown", "v1")
			}
			c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
			require.NoError(t, err)
			defer c.Close()
			cat, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			s, err := mcpsync.NewShadow(c.Engine(), alice)
			require.NoError(t, err)
			before := ledgerState(t, c.Engine())
			now := cat.MeasuredAt

			refusal := mcpsync.CatalogReasonNotProven
			if snapshot {
				refusal = ""
			}
			rep := s.ObserveListing(cat, []mcpsync.Descriptor{{URI: "FILE:///docs/b.md"}, {URI: offURI}, {URI: faultURI}}, now)
			assert.Equal(t, mcpsync.VerdictAgree, rep.Verdict, "%+v", rep)
			assert.Equal(t, refusal, rep.CompletenessRefusal)

			rep = s.ObserveListing(cat, []mcpsync.Descriptor{{URI: faultURI}, {URI: "file:///docs/ghost.md"}}, now)
			assert.Equal(t, mcpsync.VerdictDiffers, rep.Verdict)
			assert.Equal(t, []string{"file:///docs/ghost.md"}, rep.Missing)
			assert.Equal(t, []string{offURI, "file:///docs/b.md"}, rep.Extra)
			assert.Equal(t, before, ledgerState(t, c.Engine()), "the shadow writes nothing")

			rep = s.ObserveListing(mcpsync.Catalog{Kind: mcpsync.KindResources, Status: mcpsync.CatalogUnreconciled},
				[]mcpsync.Descriptor{{URI: faultURI}}, now)
			assert.Equal(t, mcpsync.VerdictWouldRefuse, rep.Verdict)
			assert.Equal(t, mcpsync.CatalogReasonNotProven, rep.CompletenessRefusal)
			assert.Empty(t, s.Counts(), "listings are not counted with reads")
		})
	}
}

// A Shadow beside the caller's read path: the caller served "v0" while the
// fence accepted "v1" with read ordinal 1.
func ExampleShadow() {
	e, _ := mcpsync.NewEngine(nil)
	_, _ = e.BeginSession(mcpsync.SessionInfo{})
	_, _ = e.Subscribe("file:///handbook.md", "user:alice")
	_, _ = e.Activate("file:///handbook.md", mcpsync.ModePush)
	ticket, _ := e.IssueTicket("file:///handbook.md", mcpsync.TriggerInitial)
	_, _ = e.AcceptResourceVersion(ticket, mcpsync.NewReadResult([]mcpsync.Content{{URI: "file:///handbook.md", Text: "v1"}}))

	shadow, _ := mcpsync.NewShadow(e, "user:alice")
	rep, _ := shadow.Observe("file:///handbook.md", []mcpsync.Content{{URI: "file:///handbook.md", Text: "v0"}}, time.Now())
	fmt.Println(rep.Verdict, rep.ReadOrdinal)
	rep, _ = shadow.Observe("file:///handbook.md", []mcpsync.Content{{URI: "file:///handbook.md", Text: "v1"}}, time.Now())
	fmt.Println(rep.Verdict, shadow.Counts())
	// Output:
	// DIFFERS 1
	// AGREE map[AGREE:1 DIFFERS:1]
}

// The refresh fraction only decides which subscriptions the client reads:
// "a subscription outside the fraction stays subscribed, discovered and
// fenced, but the client sends it no reads of its own". A URI outside the
// fraction (SetRefreshFraction(0): the rollout rolled back) whose reopen
// stopped half way (a 2026-07-28 stream the server ends, the write opening
// the next generation failing once) is still repaired at its ticks: half
// an hour later, with the ledger healthy, it is open in the current
// session, not left CLOSED.
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
		if sub.SessionGeneration != r.c.Health().SessionGeneration || !(sub.State == mcpsync.StateActive || sub.State == mcpsync.StateVersionAccepted) {
			t.Fatalf("a watched URI outside the refresh fraction is no longer subscribed: %s (generation %d) half an hour later, health %s",
				sub.State, sub.SubscriptionGeneration, r.c.Health().State)
		}
	})
}

// The same URI outside the fraction, whose reopen failed at its first write
// (beginning the close, once), is left open in push mode with no listen
// stream carrying it. Its ticks put it back on a stream: half an hour later
// the server notifies it again.
func TestURIOutsideTheRefreshFractionIsPutBackOnAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		require.True(t, r.srv.Subscribed(faultURI))
		require.NoError(t, r.c.SetRefreshFraction(0)) // the rollout is rolled back
		require.False(t, r.c.RefreshEnabled(faultURI))

		// The write beginning the reopen's close fails, once.
		r.reestablishRefusingOnce(writeTo(mcpsync.StateUnsubscribing))
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
