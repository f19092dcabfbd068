package mcpsync_test

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// pendingEngine returns an engine whose docURI served "v1" (ordinal 1) and
// then read not found (ordinal 2): TOMBSTONE_PENDING, one second later.
func pendingEngine(t *testing.T) (*mcpsync.Engine, *fixedClock) {
	t.Helper()
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	acceptRead(t, e, ledger.TriggerInitial, "v1")
	clock.t = clock.t.Add(time.Second)
	out, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
	return e, clock
}

// scanAfter is a clean two-pass scan that began a second after now and
// took a second; the clock is left at its end.
func scanAfter(clock *fixedClock) mcpsync.AbsenceScan {
	start := clock.t.Add(time.Second)
	clock.t = start.Add(time.Second)
	return mcpsync.AbsenceScan{Scans: []string{"scan-a", "scan-b"}, StartedAt: start, EndedAt: clock.t}
}

func state(t *testing.T, e *mcpsync.Engine) mcpsync.Subscription {
	t.Helper()
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	return sub
}

// corroborate records scan and returns the second read it asks for.
func corroborate(t *testing.T, e *mcpsync.Engine, scan mcpsync.AbsenceScan) ledger.Ticket {
	t.Helper()
	tk, ok, err := e.Corroborate(docURI, scan)
	require.NoError(t, err)
	require.True(t, ok, "the second read goes out")
	require.Equal(t, ledger.TriggerReconcile, tk.Trigger)
	return tk
}

// The corroborated path, step by step: a scan that began after the
// not-found and did not list the URI is recorded and asks for a second read;
// that read, not found again, confirms the tombstone with both scans and
// both reads named, in the receipt and in the outbox entry.
func TestCorroboratedTombstone(t *testing.T) {
	e, clock := pendingEngine(t)
	before := len(outbox(t, e))
	second := corroborate(t, e, scanAfter(clock))
	sub := state(t, e)
	assert.Equal(t, ledger.StateReadPending, sub.State)
	require.NotNil(t, sub.Corroboration)
	assert.Equal(t, uint64(2), sub.Corroboration.FirstRead)
	assert.Equal(t, []string{"scan-a", "scan-b"}, sub.Corroboration.Scans)
	_, err := e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstonePending, "still not served while corroborating")

	out, err := e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.True(t, out.Accepted)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Version.Decision)
	want := ledger.DeletionEvidence{Kind: ledger.EvidenceCorroborated, Scans: []string{"scan-a", "scan-b"}, Reads: []uint64{2, 3}}
	require.NotNil(t, out.Tombstone)
	assert.Equal(t, want, out.Tombstone.Evidence)
	sub = state(t, e)
	assert.Equal(t, ledger.StateTombstoned, sub.State)
	assert.Nil(t, sub.Corroboration)
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	last := appendedEntry(t, e, before)
	assert.Equal(t, ledger.InvalidateTombstoned, last.Reason)
	assert.Equal(t, uint64(1), last.Previous.ReadOrdinal, "the entry deletes what v1 fed")
	require.NotNil(t, last.Evidence)
	assert.Equal(t, want, *last.Evidence)
	assert.Equal(t, last.Seq, out.Tombstone.OutboxSeq)
}

// Every way back to the live path: a corroboration under way ends, and the
// second not-found (if any) only makes the URI TOMBSTONE_PENDING again.
func TestCorroborationEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between runs after the second read was issued; it returns the
		// ticket to answer not found, if any.
		between   func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket
		wantState ledger.SubscriptionState
	}{
		{name: "the second read finds it", wantState: ledger.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				out, err := e.FinishRead(second, text(docURI, "v2"))
				require.NoError(t, err)
				assert.Equal(t, mcpsync.DecisionAccepted, out.Version.Decision)
				assert.Equal(t, "v2", served(t, e))
				return nil
			}},
		{name: "a pulse", wantState: ledger.StateReadPending, // its follow-up read is out
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_, _, err := e.Notify(docURI)
				require.NoError(t, err)
				return &second
			}},
		{name: "a scan lists it", wantState: ledger.StateTombstonePending,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_, _, err := e.ApplyListing(docURI, true, time.Time{})
				require.NoError(t, err)
				return &second
			}},
		{name: "the second read gets no answer", wantState: ledger.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_, err := e.Fail(second)
				require.NoError(t, err)
				return nil
			}},
		{name: "the second read is refused", wantState: ledger.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_, err := e.FinishRead(second, mcpsync.NewReadResult(nil))
				require.ErrorIs(t, err, mcpsync.ErrEmptyContents)
				return nil
			}},
		{name: "a newer read is in flight", wantState: ledger.StateTombstonePending,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_ = issue(t, e, ledger.TriggerRevalidate) // its answer would be newer
				return &second
			}},
		{name: "the close begins", wantState: ledger.StateUnsubscribing,
			between: func(t *testing.T, e *mcpsync.Engine, second ledger.Ticket) *ledger.Ticket {
				_, err := e.BeginClose(docURI)
				require.NoError(t, err)
				return &second
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, clock := pendingEngine(t)
			before := len(outbox(t, e))
			second := corroborate(t, e, scanAfter(clock))
			if tk := tc.between(t, e, second); tk != nil {
				out, _ := e.FinishRead(*tk, mcpsync.NotFoundResult())
				assert.NotEqual(t, mcpsync.DecisionTombstoned, out.Version.Decision)
				assert.Nil(t, out.Tombstone)
			}
			sub := state(t, e)
			assert.Equal(t, tc.wantState, sub.State)
			assert.Nil(t, sub.Corroboration)
			for _, en := range outbox(t, e)[before:] {
				assert.NotEqual(t, ledger.InvalidateTombstoned, en.Reason)
			}
		})
	}
}

// A scan that began before the not-found cannot corroborate it: the
// resource may have been created again and deleted since.
func TestCorroborationNeedsAScanAfterTheNotFound(t *testing.T) {
	e, clock := pendingEngine(t)
	scan := mcpsync.AbsenceScan{Scans: []string{"a", "b"}, StartedAt: clock.t.Add(-time.Millisecond), EndedAt: clock.t.Add(time.Second)}
	_, ok, err := e.Corroborate(docURI, scan)
	require.ErrorIs(t, err, mcpsync.ErrEvidenceTooOld)
	assert.False(t, ok)
	sub := state(t, e)
	assert.Equal(t, ledger.StateTombstonePending, sub.State)
	assert.Nil(t, sub.Corroboration)
}

// A not-found of a read issued before the scan was recorded says nothing
// new: it confirms nothing and leaves the corroboration, and the state open,
// for the second read, which decides.
func TestCorroborationNeedsAReadAfterTheScan(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	first, early := issue(t, e, ledger.TriggerRevalidate), issue(t, e, ledger.TriggerRevalidate)
	_, err := e.FinishRead(first, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, ledger.StateTombstonePending, state(t, e).State)
	second := corroborate(t, e, scanAfter(clock))
	assert.Greater(t, second.ReadOrdinal, early.ReadOrdinal)

	out, err := e.FinishRead(early, mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
	assert.Nil(t, out.Tombstone)
	sub := state(t, e)
	assert.Equal(t, ledger.StateReadPending, sub.State)
	require.NotNil(t, sub.Corroboration, "an older not-found leaves it standing")

	out, err = e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.NotNil(t, out.Tombstone)
	assert.Equal(t, []uint64{first.ReadOrdinal, second.ReadOrdinal}, out.Tombstone.Evidence.Reads)
}

// An open subscription the scan does not list gets a reconcile read; a
// corroboration starts only from a fenced not-found.
func TestCorroborateOpenSubscriptionReads(t *testing.T) {
	e := activeEngine(t, nil)
	tk, ok, err := e.Corroborate(docURI, mcpsync.AbsenceScan{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ledger.TriggerReconcile, tk.Trigger)
	assert.Nil(t, state(t, e).Corroboration)
}

// The corroboration is ledger state: it is stored with the record, in the
// record's own form.
func TestCorroborationIsStored(t *testing.T) {
	e, clock := pendingEngine(t)
	corroborate(t, e, scanAfter(clock))
	r, err := e.Ledger().Load(t.Context(), docURI)
	require.NoError(t, err)
	require.NotNil(t, r.Corroboration)
	b, err := ledger.EncodeRecord(r)
	require.NoError(t, err)
	back, err := ledger.DecodeRecord(b)
	require.NoError(t, err)
	assert.Equal(t, r.Corroboration, back.Corroboration)
	assert.Equal(t, r.NotFoundOrdinal, back.NotFoundOrdinal)
}

// Golden files pin the JSON of a corroborated tombstone's receipt and
// outbox entry.
func TestTombstoneReceiptGolden(t *testing.T) {
	e, clock := pendingEngine(t)
	second := corroborate(t, e, scanAfter(clock))
	out, err := e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	entries := outbox(t, e)
	entry := entries[len(entries)-1]
	require.Equal(t, e.ID(), entry.Engine)
	entry.Engine = "00000000-0000-4000-8000-000000000000"
	requireGolden(t, map[string]any{
		"tombstone_receipt.json": out.Tombstone,
		"outbox_tombstone.json":  entry,
	})
}

// A confirmed tombstone stands when it is read again, also for a URI that
// never had a version: otherwise every revalidation would make it pending,
// and every scan confirm it again.
func TestTombstoneWithoutAVersionStands(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerInitial), mcpsync.NotFoundResult())
	require.NoError(t, err)
	out, err := e.FinishRead(corroborate(t, e, scanAfter(clock)), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.NotNil(t, out.Tombstone)
	assert.Zero(t, out.Tombstone.OutboxSeq, "no version to tell consumers about")
	require.False(t, state(t, e).TombstonedAt.IsZero())

	out, err = e.AcceptResourceVersion(issue(t, e, ledger.TriggerRevalidate), mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Version.Decision)
	assert.Equal(t, ledger.StateTombstoned, state(t, e).State)

	acceptRead(t, e, ledger.TriggerRevalidate, "back")
	sub := state(t, e)
	assert.True(t, sub.TombstonedAt.IsZero(), "found again")
	assert.Equal(t, "back", served(t, e))
}

// A subscribed resource is deleted and the tombstone confirmed by a proven
// catalog; the caller then unsubscribes. A confirmed tombstone is still
// subscribed on the server, so it closes like an open generation: the
// server is told, and when the resource is recreated the unsubscribed URI
// stays closed instead of coming back against the caller's last word. Both
// eras.
func TestUnsubscribeClosesATombstonedURI(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{
			opts:   mcpsync.ClientOptions{RevalidateEvery: time.Hour},
			server: &mcpsynctest.ServerOptions{Snapshot: true, SuppressListChanged: true},
			uris:   []string{listedURI},
		})
		r.subscribeSettled(faultURI)
		r.srv.Delete(faultURI)
		time.Sleep(time.Second)
		quiesce()
		cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
		require.NoError(t, err)
		_, err = r.c.Reconcile(cat)
		require.NoError(t, err)
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.StateTombstoned, sub.State, r.describe(faultURI))

		closed, uerr := r.c.Unsubscribe(t.Context(), faultURI)
		t.Logf("Unsubscribe of a tombstoned URI: %s, err %v", closed.State, uerr)
		quiesce()
		r.srv.Recreate(faultURI, "v2")
		minutes(1)
		sub, err = r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if uerr != nil || openState(sub.State) || r.srv.Subscribed(faultURI) {
			t.Fatalf("unsubscribe of a tombstoned URI not done (Unsubscribe err %v); after recreation: %s", uerr, r.describe(faultURI))
		}
	})
}

// Corroborate on a pending tombstone whose URI has a queued read in flight
// (sent before the read that said not found passed) issues no read of its
// own: the queue issues the second read when the one in flight ends. The
// read in flight, answered not found too, is older than the scan, so it
// neither confirms nor ends the corroboration; the second read, issued
// after the scan and not found again, confirms the deletion at once rather
// than making the tombstone pending once more and waiting for another scan.
func TestCorroborationSurvivesTheReadInFlight(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	acceptRead(t, e, ledger.TriggerInitial, "v1")

	// A read outside the queue (Client.Read), then a pulse's queued read.
	direct := issue(t, e, ledger.TriggerRevalidate)
	queued, ok, err := e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok)
	out, err := e.AcceptResourceVersion(direct, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Decision())

	_, ok, err = e.Corroborate(docURI, scanAfter(clock))
	require.NoError(t, err)
	require.False(t, ok, "the queued read is in flight: the queue issues the second read after it")
	require.NotNil(t, state(t, e).Corroboration)

	// The read in flight, sent before the scan: not found either.
	out, _ = e.FinishRead(queued, mcpsync.NotFoundResult())
	require.NotNil(t, out.FollowUp, "the second read")
	second := *out.FollowUp
	assert.NotNil(t, state(t, e).Corroboration, "an answer older than the scan, not found, says nothing the scan did not know")

	out, err = e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Decision(), "the second not-found, issued after the scan, confirms the deletion")
	assert.NotNil(t, out.Tombstone)
	assert.Equal(t, ledger.StateTombstoned, state(t, e).State)
}

// unlistedReview is the review interval of unlistedRig's scanner: the
// default span of DeletionUnlisted is two of them.
const unlistedReview = time.Minute

// listedURI is a resource the listing of unlistedRig always has.
const listedURI = "file:///docs/other.md"

// errListFailed is the answer of a listing that fails.
var errListFailed = errors.New("list failed")

// unlistedRig is an engine with docURI open, whose reads keep answering
// "v1" as a server's do that never says not found, and a listing that
// lacks it; each scan comes one review interval after the last.
type unlistedRig struct {
	t       *testing.T
	e       *mcpsync.Engine
	clock   *fixedClock
	listing *fakeListing
	scanner *mcpsync.Scanner
	policy  mcpsync.DeletionPolicy
	fail    bool              // the listing fails
	gone    string            // a URI whose reads say not found
	outs    []mcpsync.Outcome // of the reads the reconciliations sent
}

func newUnlistedRig(t *testing.T, policy mcpsync.DeletionPolicy, store ledger.Ledger) *unlistedRig {
	t.Helper()
	r := &unlistedRig{t: t, clock: newClock(), policy: policy, listing: newFakeListing(mcpsync.KindResources, 10, listedURI)}
	r.listing.onCall = func(int, *fakeListing) error {
		if r.fail {
			return errListFailed
		}
		return nil
	}
	r.scanner = newTestScanner(t, &mcpsync.ScannerOptions{Now: r.clock.now, ReviewAfter: unlistedReview, StaleAfter: 2 * unlistedReview, MaxAttempts: 1})
	r.start(store)
	return r
}

// start begins an engine on ledger (a memory one if nil), as a process
// does, and opens docURI in its session with one read answered.
func (r *unlistedRig) start(store ledger.Ledger) {
	r.t.Helper()
	r.e = newEngine(r.t, &mcpsync.EngineOptions{Now: r.clock.now, Ledger: store})
	_, err := r.e.Subscribe(docURI, alice)
	require.NoError(r.t, err)
	_, err = r.e.Activate(docURI, ledger.ModePush)
	require.NoError(r.t, err)
	r.answer(issue(r.t, r.e, ledger.TriggerInitial))
}

// answer answers t as the server does: content, or not found for r.gone.
func (r *unlistedRig) answer(t ledger.Ticket) mcpsync.Outcome {
	r.t.Helper()
	res := text(t.URI, "v1")
	if t.URI == r.gone {
		res = mcpsync.NotFoundResult()
	}
	out, err := r.e.FinishRead(t, res)
	if err != nil {
		require.ErrorIs(r.t, err, mcpsync.ErrRefused)
	}
	r.outs = append(r.outs, out)
	if out.FollowUp != nil {
		r.answer(*out.FollowUp)
	}
	return out
}

// scan moves the clock one review interval on, scans, reconciles the
// catalog under the rig's policy and answers every read it sends.
func (r *unlistedRig) scan() (mcpsync.Catalog, mcpsync.Reconciliation, error) {
	r.t.Helper()
	c, scanErr := r.list()
	rec, err := r.reconcile(c, 0)
	if r.fail {
		require.ErrorIs(r.t, scanErr, mcpsync.ErrScanUnreconciled)
		require.ErrorIs(r.t, err, mcpsync.ErrSnapshotUnproven)
	} else {
		require.NoError(r.t, scanErr)
		require.Equal(r.t, mcpsync.CatalogSnapshotUnproven, c.Status)
	}
	return c, rec, err
}

// list moves the clock one review interval on and scans, reconciling
// nothing.
func (r *unlistedRig) list() (mcpsync.Catalog, error) {
	r.t.Helper()
	r.clock.t = r.clock.t.Add(unlistedReview)
	caps := capsPlain
	caps.SessionGeneration = r.e.SessionGeneration()
	return runScan(r.t, r.scanner, mcpsync.KindResources, mcpsync.EraLegacy, caps, r.listing.page, nil)
}

// reconcile reconciles c under the rig's policy and answers every read it
// sends.
func (r *unlistedRig) reconcile(c mcpsync.Catalog, unlistedFor time.Duration) (mcpsync.Reconciliation, error) {
	r.t.Helper()
	rec, err := c.Reconcile(r.e, &mcpsync.ReconcileOptions{Deletion: r.policy, UnlistedFor: unlistedFor})
	for _, tk := range rec.Tickets {
		r.answer(tk)
	}
	return rec, err
}

// scanUntilTombstoned scans three times, a span in which docURI is never
// listed, and checks that its absence tombstoned it.
func (r *unlistedRig) scanUntilTombstoned() {
	r.t.Helper()
	for range 3 {
		_, _, err := r.scan()
		require.NoError(r.t, err)
	}
	require.Equal(r.t, ledger.StateTombstoned, r.sub(docURI).State)
}

// reconcileAnOlderCatalogAfter scans once, lists a clean catalog that
// lacks docURI, runs between, and only then reconciles that catalog and
// scans again. It returns the catalog and what the last scan reconciled.
func (r *unlistedRig) reconcileAnOlderCatalogAfter(between func()) (mcpsync.Catalog, mcpsync.Reconciliation) {
	r.t.Helper()
	_, _, err := r.scan()
	require.NoError(r.t, err)
	before, err := r.list()
	require.NoError(r.t, err)
	between()
	_, err = r.reconcile(before, 0)
	require.NoError(r.t, err)
	_, rec, err := r.scan()
	require.NoError(r.t, err)
	return before, rec
}

func (r *unlistedRig) sub(uri string) mcpsync.Subscription {
	r.t.Helper()
	sub, err := r.e.Subscription(uri)
	require.NoError(r.t, err)
	return sub
}

func passes(c mcpsync.Catalog) []string {
	n := len(c.Scans)
	return []string{c.Scans[n-2].ID, c.Scans[n-1].ID}
}

// tombstones returns the URIs the outbox was told are deleted.
func tombstones(t *testing.T, e *mcpsync.Engine) []string {
	t.Helper()
	var out []string
	for _, en := range outbox(t, e) {
		if en.Reason == ledger.InvalidateTombstoned {
			out = append(out, en.URI)
		}
	}
	return out
}

// Under DeletionUnlisted a URI that clean scans have missed for two review
// intervals is deleted although its reads still answer: the third scan
// without it (the span runs from the end of the first to the start of the
// newest) confirms the tombstone, naming the passes of the first and of the
// newest scan, in the receipt and in the outbox entry. Until then it is
// served and read like any other.
func TestUnlistedConfirmsADeletionAfterTheSpan(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	first, rec, err := r.scan()
	require.NoError(t, err)
	assert.Equal(t, []string{docURI}, rec.Unlisted)
	assert.Equal(t, []string{docURI}, rec.Missing, "read again, as every lost subscription is")
	sub := r.sub(docURI)
	require.NotNil(t, sub.Unlisted)
	assert.Equal(t, passes(first), sub.Unlisted.First.Scans)

	_, rec, err = r.scan()
	require.NoError(t, err)
	assert.Equal(t, []string{docURI}, rec.Unlisted)
	assert.Empty(t, rec.Tombstoned, "one review interval is not the span")
	assert.Equal(t, ledger.StateActive, r.sub(docURI).State)
	entry, err := r.e.Lookup(alice, docURI)
	require.NoError(t, err, "served until the span has passed")
	assert.Equal(t, "v1", entry.Contents[0].Text)
	assert.Empty(t, tombstones(t, r.e))

	last, rec, err := r.scan()
	require.NoError(t, err)
	require.Equal(t, []string{docURI}, rec.Tombstoned)
	require.Len(t, rec.Receipts, 1)
	want := ledger.DeletionEvidence{Kind: ledger.EvidenceUnlisted, Scans: append(passes(first), passes(last)...)}
	assert.Equal(t, want, rec.Receipts[0].Evidence)
	assert.Equal(t, ledger.StateTombstoned, r.sub(docURI).State)
	_, err = r.e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	entries := outbox(t, r.e)
	en := entries[len(entries)-1]
	assert.Equal(t, ledger.InvalidateTombstoned, en.Reason)
	assert.Equal(t, docURI, en.URI)
	require.NotNil(t, en.Evidence)
	assert.Equal(t, want, *en.Evidence)
	assert.Equal(t, en.Seq, rec.Receipts[0].OutboxSeq)
	entry, err = r.e.Lookup(alice, listedURI)
	require.ErrorIs(t, err, mcpsync.ErrUnknownURI, "only what the engine holds is ever deleted")
	_ = entry
}

// UnlistedFor sets the span: with three review intervals, the third scan
// without the URI does not confirm its deletion, the fourth does.
func TestUnlistedForSetsTheSpan(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	reconcile := func() mcpsync.Reconciliation {
		c, err := r.list()
		require.NoError(t, err)
		rec, err := r.reconcile(c, 3*unlistedReview)
		require.NoError(t, err)
		return rec
	}
	for range 3 {
		assert.Empty(t, reconcile().Tombstoned)
	}
	assert.Equal(t, []string{docURI}, reconcile().Tombstoned)
}

// A deletion confirmed by the listing alone is not undone by a read that
// finds content (the server answers reads of what it deleted), but a scan
// that lists the URI again brings it back: its read is accepted and served.
func TestUnlistedTombstoneEndsOnlyWhenListed(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	r.scanUntilTombstoned()
	before := len(outbox(t, r.e))

	tk, ok, err := r.e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok)
	out := r.answer(tk)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Version.Decision, "content proves nothing here")
	assert.Equal(t, ledger.StateTombstoned, r.sub(docURI).State)
	_, err = r.e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	assert.Len(t, outbox(t, r.e), before, "nothing to tell consumers")

	r.listing.add(docURI)
	_, rec, err := r.scan()
	require.NoError(t, err)
	assert.Equal(t, []string{docURI}, rec.Present)
	require.Len(t, rec.Tickets, 1)
	assert.Equal(t, mcpsync.DecisionAccepted, r.outs[len(r.outs)-1].Version.Decision)
	sub := r.sub(docURI)
	assert.Equal(t, ledger.StateActive, sub.State)
	assert.Nil(t, sub.Unlisted)
	entry, err := r.e.Lookup(alice, docURI)
	require.NoError(t, err)
	assert.Equal(t, "v1", entry.Contents[0].Text)
}

// A scan that lists the URI again starts the span over.
func TestUnlistedSpanRestartsWhenListed(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	_, _, err := r.scan()
	require.NoError(t, err)
	r.listing.add(docURI)
	_, rec, err := r.scan()
	require.NoError(t, err)
	assert.Empty(t, rec.Unlisted)
	assert.Nil(t, r.sub(docURI).Unlisted)
	r.listing.remove(docURI)
	for range 2 {
		_, rec, err = r.scan()
		require.NoError(t, err)
		assert.Empty(t, rec.Tombstoned, "the absence before the listing does not count")
	}
	_, rec, err = r.scan()
	require.NoError(t, err)
	assert.Equal(t, []string{docURI}, rec.Tombstoned)
}

// A server whose listing fails never deletes anything, under any policy:
// neither a URI whose reads answer nor one whose reads say not found is
// tombstoned however long the failures last, and a failure ends the
// absence DeletionUnlisted was counting. Once the listing works again,
// each policy confirms what it can: DeletionUnlisted the answering URI
// after a whole new span, the corroborating policies the not-found one.
func TestFailedListingDeletesNothing(t *testing.T) {
	const gone = "file:///docs/gone.md"
	for _, tc := range []struct {
		policy mcpsync.DeletionPolicy
		want   []string // the tombstones once the listing works again
	}{
		{mcpsync.DeletionDefault, []string{gone}},
		{mcpsync.DeletionProvenOnly, nil},
		{mcpsync.DeletionCorroborated, []string{gone}},
		{mcpsync.DeletionUnlisted, []string{gone, docURI}},
	} {
		t.Run(cmp.Or(string(tc.policy), "default"), func(t *testing.T) {
			r := newUnlistedRig(t, tc.policy, nil)
			tombstonePending(t, r.e, gone)
			r.gone = gone
			_, _, err := r.scan()
			require.NoError(t, err)
			_, _, err = r.scan()
			require.NoError(t, err)
			if tc.policy == mcpsync.DeletionUnlisted {
				require.NotNil(t, r.sub(docURI).Unlisted, "one interval of absence counted")
			}
			beforeFailure := tombstones(t, r.e)

			r.fail = true
			for range 5 {
				_, rec, _ := r.scan()
				assert.Empty(t, rec.Tombstoned)
			}
			assert.Equal(t, beforeFailure, tombstones(t, r.e), "no deletion while the listing fails")
			assert.Nil(t, r.sub(docURI).Unlisted, "the failure ended the absence")
			assert.NotEqual(t, ledger.StateTombstoned, r.sub(docURI).State)

			r.fail = false
			for range 2 {
				_, _, err = r.scan()
				require.NoError(t, err)
			}
			if tc.policy == mcpsync.DeletionUnlisted {
				assert.Equal(t, ledger.StateActive, r.sub(docURI).State, "a new span began after the failure")
			}
			_, _, err = r.scan()
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, tombstones(t, r.e))
			if tc.policy != mcpsync.DeletionUnlisted {
				assert.Nil(t, r.sub(docURI).Unlisted, "only DeletionUnlisted counts absences")
				assert.Equal(t, ledger.StateActive, r.sub(docURI).State)
			}
		})
	}
}

// The absence is kept in the ledger: a process that restarts on its bolt
// file, in a new session and a new subscription generation, confirms the
// deletion at the scan that completes the span begun before the restart.
func TestUnlistedSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, l)
	first, _, err := r.scan()
	require.NoError(t, err)
	_, _, err = r.scan()
	require.NoError(t, err)
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r.start(l)
	sub := r.sub(docURI)
	assert.Greater(t, sub.SubscriptionGeneration, uint64(1))
	require.NotNil(t, sub.Unlisted)
	assert.Equal(t, passes(first), sub.Unlisted.First.Scans)
	last, rec, err := r.scan()
	require.NoError(t, err)
	require.Equal(t, []string{docURI}, rec.Tombstoned)
	assert.Equal(t, append(passes(first), passes(last)...), rec.Receipts[0].Evidence.Scans)
}

// A subscription opened after an unsubscribe starts afresh: a deletion the
// listing alone confirmed no longer stands in its way, and its first read
// that finds content is served.
func TestUnlistedTombstoneEndsWithANewSubscription(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	r.scanUntilTombstoned()
	_, err := r.e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = r.e.FinishClose(docURI, true)
	require.NoError(t, err)

	_, err = r.e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = r.e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
	assert.Nil(t, r.sub(docURI).Unlisted)
	out := r.answer(issue(t, r.e, ledger.TriggerInitial))
	assert.Equal(t, mcpsync.DecisionAccepted, out.Version.Decision)
	entry, err := r.e.Lookup(alice, docURI)
	require.NoError(t, err)
	assert.Equal(t, "v1", entry.Contents[0].Text)
}

// Connect refuses a negative UnlistedFor and an unknown policy before it
// dials.
func TestConnectRefusesABadDeletionSetting(t *testing.T) {
	for _, o := range []mcpsync.ClientOptions{
		{Subject: alice, Deletion: mcpsync.DeletionUnlisted, UnlistedFor: -time.Second},
		{Subject: alice, Deletion: "listing"},
	} {
		_, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			t.Fatal("dialed")
			return nil, nil
		}, &o)
		require.Error(t, err)
	}
}

// A listing that fails ends the absence DeletionUnlisted was counting, so
// no deletion is confirmed by a span that a failure lies inside. It fails
// while the failure is forgotten by a clean catalog scanned before it and
// reconciled after it (a kept scan finishing after a failed Client.Scan,
// say): that catalog starts a new absence dated before the failure, and
// the next scan, one interval after the failure, deletes the URI.
func TestUnlistedSpanNeverContainsAFailedListing(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	var failedAt time.Time
	before, rec := r.reconcileAnOlderCatalogAfter(func() {
		r.fail = true
		_, _, _ = r.scan()
		require.Nil(t, r.sub(docURI).Unlisted, "the failure ended the absence")
		failedAt = r.clock.t
		r.fail = false
	})
	assert.Empty(t, rec.Tombstoned, "deleted on a span from %v to %v that holds the failed listing of %v",
		before.Scans[0].StartedAt, r.clock.t, failedAt)
	assert.NotEqual(t, ledger.StateTombstoned, r.sub(docURI).State)

	// Progress: a whole span of clean scans after the failure deletes it.
	for range 2 {
		_, _, err := r.scan()
		require.NoError(t, err)
	}
	assert.Equal(t, ledger.StateTombstoned, r.sub(docURI).State)
}

// A scan that lists the URI starts the span over, so a listing that flaps
// deletes nothing until the URI has been missing a whole span since it was
// last listed. It fails while a clean catalog scanned before the listing
// and reconciled after it starts a new absence dated before the listing:
// the next scan, one interval after the URI was listed, deletes it.
func TestUnlistedSpanNeverContainsAListingOfTheURI(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	var listedAt time.Time
	_, rec := r.reconcileAnOlderCatalogAfter(func() {
		r.listing.add(docURI)
		_, _, err := r.scan()
		require.NoError(t, err)
		require.Nil(t, r.sub(docURI).Unlisted, "the listing ended the absence")
		listedAt = r.clock.t
		r.listing.remove(docURI)
	})
	assert.Empty(t, rec.Tombstoned, "deleted one interval after the listing of %v had it", listedAt)
	assert.NotEqual(t, ledger.StateTombstoned, r.sub(docURI).State)
}

// A span of absence cannot be negative: Catalog.Reconcile refuses one, as
// ClientOptions does, and records nothing.
func TestReconcileRefusesANegativeUnlistedFor(t *testing.T) {
	r := newUnlistedRig(t, mcpsync.DeletionUnlisted, nil)
	c, err := r.list()
	require.NoError(t, err)
	rec, err := c.Reconcile(r.e, &mcpsync.ReconcileOptions{Deletion: mcpsync.DeletionUnlisted, UnlistedFor: -time.Second})
	require.ErrorContains(t, err, "negative UnlistedFor")
	require.Empty(t, rec.Tickets)
	require.Empty(t, rec.Unlisted)
}
