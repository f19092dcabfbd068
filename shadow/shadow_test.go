package shadow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
	"github.com/mcpsync/mcpsync/shadow"
)

// The tests beside a Client start its goroutines; every one must be gone
// when a test is done with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	docURI   = "file:///docs/a.md"
	faultURI = "file:///docs/handbook.md"
	alice    = "user:alice"
	bob      = "user:bob"
)

// observedAt is the time of the engines' clock, which the observers read.
var observedAt = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func clock() time.Time { return observedAt }

// newEngine returns an engine in a live session, at observedAt.
func newEngine(t testing.TB) *mcpsync.Engine {
	t.Helper()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Now: clock})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{
		ProtocolVersion: "2025-11-25", Server: ledger.Implementation{Name: "test-server", Version: "1.0.0"},
		Resources: true, Subscribe: true,
	}})
	require.NoError(t, err)
	return e
}

// subscribe subscribes docURI for alice and makes it ACTIVE.
func subscribe(t testing.TB, e *mcpsync.Engine) {
	t.Helper()
	_, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
}

// activeEngine returns an engine with docURI subscribed by alice and ACTIVE.
func activeEngine(t testing.TB) *mcpsync.Engine {
	t.Helper()
	e := newEngine(t)
	subscribe(t, e)
	return e
}

func text(uri, body string) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/markdown", Text: body}})
}

func issue(t testing.TB, e *mcpsync.Engine) ledger.Ticket {
	t.Helper()
	tk, err := e.IssueTicket(docURI, ledger.TriggerNotification)
	require.NoError(t, err)
	return tk
}

func acceptText(t testing.TB, e *mcpsync.Engine, body string) {
	t.Helper()
	out, err := e.AcceptResourceVersion(issue(t, e), text(docURI, body))
	require.NoError(t, err)
	require.True(t, out.Accepted)
}

func readNotFound(t testing.TB, e *mcpsync.Engine) {
	t.Helper()
	out, err := e.AcceptResourceVersion(issue(t, e), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
}

// newObserver returns an Observer of e for subject on the engines' clock.
func newObserver(t testing.TB, e *mcpsync.Engine, subject string) *shadow.Observer {
	t.Helper()
	o, err := shadow.New(e, subject)
	require.NoError(t, err)
	return o
}

// ledgerStateOf is everything the fence writes: records (watermarks,
// versions, tombstones, close receipts), the outbox and the audit.
type ledgerStateOf struct {
	Ledger ledger.Snapshot
	Outbox []mcpsync.OutboxEntry
	Stale  []mcpsync.StaleReceipt
	Counts map[mcpsync.StaleReason]uint64
}

func ledgerState(t testing.TB, e *mcpsync.Engine) ledgerStateOf {
	t.Helper()
	snap, err := ledger.Export(context.Background(), e.Ledger())
	require.NoError(t, err)
	entries, err := e.PullOutbox(0, 0)
	require.NoError(t, err)
	return ledgerStateOf{Ledger: snap, Outbox: entries, Stale: e.StaleReceipts(), Counts: e.StaleCounts()}
}

// verdictCase builds engine state, then observes what the caller served.
type verdictCase struct {
	name      string
	principal string
	setup     func(t *testing.T, e *mcpsync.Engine)
	served    string // text the caller's path served for docURI
	verdict   shadow.Verdict
	refusal   mcpsync.LookupRefusal
}

// Each state of the fence gives its verdict, and observing writes nothing.
func TestVerdicts(t *testing.T) {
	subscribed := func(t *testing.T, e *mcpsync.Engine) { subscribe(t, e) }
	withV1 := func(t *testing.T, e *mcpsync.Engine) {
		subscribe(t, e)
		acceptText(t, e, "v1")
	}
	cases := []verdictCase{
		{name: "agree", setup: withV1, served: "v1", verdict: shadow.Agree},
		{name: "differs", setup: withV1, served: "v0", verdict: shadow.Differs},
		{name: "no version yet", setup: subscribed, served: "v1", verdict: shadow.WouldRefuse, refusal: mcpsync.LookupNoVersion},
		{name: "tombstone pending", served: "v1", verdict: shadow.WouldRefuse, refusal: mcpsync.LookupTombstonePending,
			setup: func(t *testing.T, e *mcpsync.Engine) { withV1(t, e); readNotFound(t, e) }},
		{name: "tombstoned", served: "v1", verdict: shadow.WouldRefuse, refusal: mcpsync.LookupTombstoned,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				readNotFound(t, e)
				_, _, err := e.ApplyListing(docURI, false, observedAt)
				require.NoError(t, err)
			}},
		{name: "revoked", served: "v1", verdict: shadow.WouldRefuse, refusal: mcpsync.LookupRevoked,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				_, err := e.RevokeSubject(alice)
				require.NoError(t, err)
			}},
		{name: "forbidden", principal: bob, setup: withV1, served: "v1", verdict: shadow.WouldRefuse, refusal: mcpsync.LookupForbidden},
		{name: "not subscribed", setup: func(*testing.T, *mcpsync.Engine) {}, served: "v1", verdict: shadow.NotSynced},
		{name: "discovered only", served: "v1", verdict: shadow.NotSynced,
			setup: func(t *testing.T, e *mcpsync.Engine) { require.NoError(t, e.Discover(docURI)) }},
		{name: "closed", served: "v1", verdict: shadow.NotSynced,
			setup: func(t *testing.T, e *mcpsync.Engine) {
				withV1(t, e)
				_, err := e.BeginClose(docURI)
				require.NoError(t, err)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			tc.setup(t, e)
			principal := alice
			if tc.principal != "" {
				principal = tc.principal
			}
			s := newObserver(t, e, principal)
			before := ledgerState(t, e)

			servedAt := time.Date(2026, 11, 30, 8, 59, 0, 0, time.UTC)
			rep, err := s.Observe(docURI, text(docURI, tc.served).Contents(), servedAt)
			require.NoError(t, err)
			assert.Equal(t, tc.verdict, rep.Verdict)
			assert.Equal(t, tc.refusal, rep.Refusal)
			assert.Equal(t, text(docURI, tc.served).Digest(), rep.ServedDigest)
			assert.Equal(t, servedAt, rep.ServedAt)
			switch tc.verdict {
			case shadow.Agree, shadow.Differs:
				assert.Equal(t, text(docURI, "v1").Digest(), rep.AcceptedDigest)
				assert.Equal(t, uint64(1), rep.ReadOrdinal)
				assert.Equal(t, uint64(1), rep.SessionGeneration)
				assert.Equal(t, uint64(1), rep.SubscriptionGeneration)
			default:
				assert.Empty(t, rep.AcceptedDigest)
				assert.Zero(t, rep.ReadOrdinal)
			}
			assert.Equal(t, map[shadow.Verdict]uint64{tc.verdict: 1}, s.Counts())
			assert.Equal(t, before, ledgerState(t, e), "the shadow writes nothing")
		})
	}
}

// The report is data: its JSON form is pinned.
func TestReportFormat(t *testing.T) {
	e := activeEngine(t)
	acceptText(t, e, "v1")
	s := newObserver(t, e, alice)
	rep, err := s.Observe(docURI, text(docURI, "v0").Contents(), time.Date(2026, 11, 30, 8, 59, 0, 0, time.UTC))
	require.NoError(t, err)
	got, err := json.Marshal(rep)
	require.NoError(t, err)
	want := fmt.Sprintf(`{"schema":"shadowReport.v1","uri":"file:///docs/a.md","subject":"user:alice","verdict":"DIFFERS",`+
		`"servedDigest":%q,"acceptedDigest":%q,"readOrdinal":1,"sessionGeneration":1,"subscriptionGeneration":1,`+
		`"state":"ACTIVE","watermark":1,"servedAt":"2026-11-30T08:59:00Z","observedAt":"2026-11-30T09:00:00Z"}`,
		text(docURI, "v0").Digest(), text(docURI, "v1").Digest())
	assert.JSONEq(t, want, string(got))
}

// Served content that cannot be a version (empty, here) differs from any
// accepted one, and the report says why; an invalid URI is an error and is
// not counted.
func TestObserveServedContentAndBadURI(t *testing.T) {
	e := activeEngine(t)
	acceptText(t, e, "v1")
	s := newObserver(t, e, alice)
	rep, err := s.Observe(docURI, nil, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, shadow.Differs, rep.Verdict)
	assert.Empty(t, rep.ServedDigest)
	assert.Contains(t, rep.Detail, string(mcpsync.ReasonEmptyContents))

	_, err = s.Observe("::not a uri", nil, time.Time{})
	require.ErrorIs(t, err, mcpsync.ErrInvalidURI)
	assert.Equal(t, map[shadow.Verdict]uint64{shadow.Differs: 1}, s.Counts())

	_, err = shadow.New(e, "")
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
	_, err = shadow.New(nil, alice)
	require.Error(t, err)
}

// New refuses exactly the subjects Engine.Lookup refuses as invalid: the
// Observer checks the documented rule itself, from outside the engine.
func TestNewRefusesTheSubjectsLookupRefuses(t *testing.T) {
	e := activeEngine(t)
	acceptText(t, e, "v1")
	for name, subject := range map[string]string{
		"valid":           alice,
		"longest":         strings.Repeat("x", mcpsync.MaxSubjectBytes),
		"empty":           "",
		"not UTF-8":       "user:\xff",
		"too long":        strings.Repeat("x", mcpsync.MaxSubjectBytes+1),
		"holding NUL":     "user:\x00alice",
		"control, no NUL": "user:\x01alice",
	} {
		t.Run(name, func(t *testing.T) {
			_, lookupErr := e.Lookup(subject, docURI)
			_, err := shadow.New(e, subject)
			assert.Equal(t, errors.Is(lookupErr, mcpsync.ErrInvalidSubject), errors.Is(err, mcpsync.ErrInvalidSubject),
				"Lookup: %v; New: %v", lookupErr, err)
			if !errors.Is(err, mcpsync.ErrInvalidSubject) {
				require.NoError(t, err)
			}
		})
	}
}

// A listing's CompletenessRefusal is the reason Catalog.ProvenIn gives for
// the engine's session, with staleness judged at the caller's now.
func TestListingCompletenessRefusalIsProvenIns(t *testing.T) {
	e := newEngine(t)
	gen := e.SessionGeneration()
	proven := mcpsync.Catalog{
		Kind: mcpsync.KindResources, Status: mcpsync.CatalogSnapshotProven, SessionGeneration: gen,
		Engine: e.ID(), MeasuredAt: observedAt.Add(-time.Minute), StaleAfter: observedAt.Add(time.Minute),
	}
	with := func(change func(c *mcpsync.Catalog)) mcpsync.Catalog {
		c := proven
		change(&c)
		return c
	}
	s := newObserver(t, e, alice)
	for _, tc := range []struct {
		name string
		cat  mcpsync.Catalog
		want mcpsync.CatalogRefusalReason
	}{
		{"proven", proven, ""},
		{"no engine named", with(func(c *mcpsync.Catalog) { c.Engine = "" }), ""},
		{"unproven", with(func(c *mcpsync.Catalog) { c.Status = mcpsync.CatalogSnapshotUnproven }), mcpsync.CatalogReasonNotProven},
		{"unproven, another engine", with(func(c *mcpsync.Catalog) {
			c.Status, c.Engine = mcpsync.CatalogSnapshotUnproven, "another"
		}), mcpsync.CatalogReasonNotProven},
		{"another engine", with(func(c *mcpsync.Catalog) { c.Engine = "another" }), mcpsync.CatalogReasonOtherEngine},
		{"another engine, another session, stale", with(func(c *mcpsync.Catalog) {
			c.Engine, c.SessionGeneration, c.StaleAfter = "another", gen+1, observedAt
		}), mcpsync.CatalogReasonOtherEngine},
		{"another session", with(func(c *mcpsync.Catalog) { c.SessionGeneration = gen + 1 }), mcpsync.CatalogReasonOtherSession},
		{"another session, stale", with(func(c *mcpsync.Catalog) {
			c.SessionGeneration, c.StaleAfter = gen+1, observedAt
		}), mcpsync.CatalogReasonOtherSession},
		{"stale", with(func(c *mcpsync.Catalog) { c.StaleAfter = observedAt }), mcpsync.CatalogReasonStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cat.ProvenIn(e) // at the engine's clock, observedAt
			var want mcpsync.CatalogRefusalReason
			if ce, ok := errors.AsType[*mcpsync.CatalogError](err); ok {
				want = ce.Reason
			}
			require.Equal(t, tc.want, want, "the case says what ProvenIn says")
			assert.Equal(t, tc.want, s.ObserveListing(tc.cat, nil, observedAt).CompletenessRefusal)
		})
	}

	// The caller's now, not the engine's clock, decides staleness.
	assert.Equal(t, mcpsync.CatalogReasonStale, s.ObserveListing(proven, nil, proven.StaleAfter).CompletenessRefusal)
	assert.Empty(t, s.ObserveListing(with(func(c *mcpsync.Catalog) { c.StaleAfter = observedAt }), nil,
		observedAt.Add(-time.Second)).CompletenessRefusal)
}

// Observe is called from every request the caller serves: counts add up
// under concurrency (and -race is clean).
func TestCountsConcurrent(t *testing.T) {
	e := activeEngine(t)
	acceptText(t, e, "v1")
	s := newObserver(t, e, alice)
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
	assert.Equal(t, map[shadow.Verdict]uint64{shadow.Agree: 200, shadow.Differs: 200}, s.Counts())
}

// eras are the protocol revisions a Client is tested in, one per era.
var eras = []struct{ name, version string }{{"legacy", "2025-11-25"}, {"modern", "2026-07-28"}}

// next returns the next fenced outcome, failing the test if none comes
// within a generous bound of the bubble's time (a guard against hangs).
func next(t *testing.T, outcomes chan mcpsync.Outcome) mcpsync.Outcome {
	t.Helper()
	select {
	case o := <-outcomes:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no fenced read completed")
		return mcpsync.Outcome{}
	}
}

// Typical use: a Client syncs its own engine beside the caller's read path,
// which keeps serving its own copy; the shadow reports agreement, a change
// the caller has not caught up with, and a deleted resource the fence would
// no longer serve, and never touches the outbox.
func TestObserveBesideClient(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(nil)
				srv.Set(faultURI, "text/markdown", "v1")
				outcomes := make(chan mcpsync.Outcome, 1024)
				c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{
					Subject: alice, ProtocolVersion: w.version, Seed: 1,
					OnOutcome: func(out mcpsync.Outcome) {
						select {
						case outcomes <- out:
						default:
						}
					},
				})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, c.Close()) })
				require.Equal(t, w.version, c.Capabilities().ProtocolVersion)
				sub, err := c.Subscribe(t.Context(), faultURI)
				require.NoError(t, err)
				require.Equal(t, ledger.ModePush, sub.Mode)
				require.True(t, next(t, outcomes).Accepted)

				s, err := shadow.New(c.Engine(), alice)
				require.NoError(t, err)
				outbox := func() []mcpsync.OutboxEntry {
					t.Helper()
					entries, err := c.Engine().PullOutbox(0, 0)
					require.NoError(t, err)
					return entries
				}
				callerServes := func(body string) shadow.Report {
					t.Helper()
					before := outbox()
					served := []mcpsync.Content{{URI: faultURI, MIMEType: "text/markdown", Text: body}}
					rep, err := s.Observe(faultURI, served, time.Now())
					require.NoError(t, err)
					assert.Equal(t, before, outbox(), "the shadow never writes to the outbox")
					return rep
				}
				assert.Equal(t, shadow.Agree, callerServes("v1").Verdict)

				srv.Set(faultURI, "text/markdown", "v2")
				require.True(t, next(t, outcomes).Accepted)
				rep := callerServes("v1") // the caller's own cache is behind
				assert.Equal(t, shadow.Differs, rep.Verdict)
				assert.Equal(t, uint64(2), rep.ReadOrdinal)

				srv.Delete(faultURI)
				gone := next(t, outcomes)
				require.Equal(t, mcpsync.DecisionTombstonePending, gone.Version.Decision)
				rep = callerServes("v2")
				assert.Equal(t, shadow.WouldRefuse, rep.Verdict)
				assert.Equal(t, mcpsync.LookupTombstonePending, rep.Refusal)
				assert.Equal(t, map[shadow.Verdict]uint64{
					shadow.Agree: 1, shadow.Differs: 1, shadow.WouldRefuse: 1,
				}, s.Counts())
			})
		})
	}
}

// The shadow of discovery: the caller's own listing against the library's
// two-pass scan. Sets are compared by key; a task needing a complete
// enumeration would refuse an unproven catalog, and the report says so.
func TestObserveListing(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: snapshot})
			for _, u := range []string{faultURI, docURI, "file:///docs/b.md"} {
				srv.Set(u, "text/markdown", "v1")
			}
			c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
			require.NoError(t, err)
			defer c.Close()
			cat, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			s, err := shadow.New(c.Engine(), alice)
			require.NoError(t, err)
			before := ledgerState(t, c.Engine())
			now := cat.MeasuredAt

			refusal := mcpsync.CatalogReasonNotProven
			if snapshot {
				refusal = ""
			}
			rep := s.ObserveListing(cat, []mcpsync.Descriptor{{URI: "FILE:///docs/b.md"}, {URI: docURI}, {URI: faultURI}}, now)
			assert.Equal(t, shadow.Agree, rep.Verdict, "%+v", rep)
			assert.Equal(t, refusal, rep.CompletenessRefusal)

			rep = s.ObserveListing(cat, []mcpsync.Descriptor{{URI: faultURI}, {URI: "file:///docs/ghost.md"}}, now)
			assert.Equal(t, shadow.Differs, rep.Verdict)
			assert.Equal(t, []string{"file:///docs/ghost.md"}, rep.Missing)
			assert.Equal(t, []string{docURI, "file:///docs/b.md"}, rep.Extra)
			assert.Equal(t, before, ledgerState(t, c.Engine()), "the shadow writes nothing")

			rep = s.ObserveListing(mcpsync.Catalog{Kind: mcpsync.KindResources, Status: mcpsync.CatalogUnreconciled},
				[]mcpsync.Descriptor{{URI: faultURI}}, now)
			assert.Equal(t, shadow.WouldRefuse, rep.Verdict)
			assert.Equal(t, mcpsync.CatalogReasonNotProven, rep.CompletenessRefusal)
			assert.Empty(t, s.Counts(), "listings are not counted with reads")
		})
	}
}

// An Observer beside the caller's read path: the caller served "v0" while
// the fence accepted "v1" with read ordinal 1.
func ExampleObserver() {
	e, _ := mcpsync.NewEngine(nil)
	_, _ = e.BeginSession(mcpsync.SessionInfo{})
	_, _ = e.Subscribe("file:///handbook.md", "user:alice")
	_, _ = e.Activate("file:///handbook.md", ledger.ModePush)
	ticket, _ := e.IssueTicket("file:///handbook.md", ledger.TriggerInitial)
	_, _ = e.AcceptResourceVersion(ticket, mcpsync.NewReadResult([]mcpsync.Content{{URI: "file:///handbook.md", Text: "v1"}}))

	observer, _ := shadow.New(e, "user:alice")
	rep, _ := observer.Observe("file:///handbook.md", []mcpsync.Content{{URI: "file:///handbook.md", Text: "v0"}}, time.Now())
	fmt.Println(rep.Verdict, rep.ReadOrdinal)
	rep, _ = observer.Observe("file:///handbook.md", []mcpsync.Content{{URI: "file:///handbook.md", Text: "v1"}}, time.Now())
	fmt.Println(rep.Verdict, observer.Counts())
	// Output:
	// DIFFERS 1
	// AGREE map[AGREE:1 DIFFERS:1]
}
