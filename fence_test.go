package mcpsync_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

const (
	docURI = "file:///docs/a.md"
	alice  = "user:alice"
	bob    = "user:bob"
)

// fixedClock is a clock that moves only when told.
type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time { return c.t }

func newClock() *fixedClock {
	return &fixedClock{t: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
}

// newEngine returns an engine in a live session with opts applied.
func newEngine(t testing.TB, opts *mcpsync.EngineOptions) *mcpsync.Engine {
	t.Helper()
	if opts == nil {
		opts = &mcpsync.EngineOptions{}
	}
	if opts.Now == nil {
		opts.Now = newClock().now
	}
	e, err := mcpsync.NewEngine(opts)
	require.NoError(t, err)
	_, err = e.BeginSession(legacySession(testServer))
	require.NoError(t, err)
	return e
}

// testServer is the server the engine tests' sessions are with.
var testServer = ledger.Implementation{Name: "test-server", Version: "1.0.0"}

// legacySession is a session at protocol version 2025-11-25 with server,
// which offers resources and their subscriptions.
func legacySession(server ledger.Implementation) mcpsync.SessionInfo {
	return mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{
		ProtocolVersion: "2025-11-25", Server: server, Resources: true, Subscribe: true,
	}}
}

// activeEngine returns an engine with docURI subscribed by alice and ACTIVE.
func activeEngine(t testing.TB, opts *mcpsync.EngineOptions) *mcpsync.Engine {
	t.Helper()
	e := newEngine(t, opts)
	_, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
	return e
}

func text(uri, body string) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/markdown", Text: body}})
}

func issue(t testing.TB, e *mcpsync.Engine, trigger ledger.Trigger) ledger.Ticket {
	t.Helper()
	tk, err := e.IssueTicket(docURI, trigger)
	require.NoError(t, err)
	return tk
}

// acceptRead issues a read of docURI for trigger and checks that the
// fence accepts body as its answer.
func acceptRead(t testing.TB, e *mcpsync.Engine, trigger ledger.Trigger, body string) mcpsync.Outcome {
	t.Helper()
	out, err := e.AcceptResourceVersion(issue(t, e, trigger), text(docURI, body))
	require.NoError(t, err)
	require.True(t, out.Accepted)
	return out
}

func served(t testing.TB, e *mcpsync.Engine) string {
	t.Helper()
	entry, err := e.Lookup(alice, docURI)
	require.NoError(t, err)
	return entry.Contents[0].Text
}

func outbox(t testing.TB, e *mcpsync.Engine) []mcpsync.OutboxEntry {
	t.Helper()
	entries, err := e.PullOutbox(0, 0)
	require.NoError(t, err)
	return entries
}

// appendedEntry checks that the outbox of e grew by one entry from its
// first before, and returns that entry.
func appendedEntry(t testing.TB, e *mcpsync.Engine, before int) mcpsync.OutboxEntry {
	t.Helper()
	entries := outbox(t, e)
	require.Len(t, entries, before+1)
	return entries[before]
}

// readsFiveAndSix returns an engine whose ordinals 1-4 were accepted and
// the tickets of reads A (ordinal 5) and B (ordinal 6), both in flight.
func readsFiveAndSix(t *testing.T) (*mcpsync.Engine, ledger.Ticket, ledger.Ticket) {
	t.Helper()
	e := activeEngine(t, nil)
	for range 4 {
		acceptRead(t, e, ledger.TriggerRevalidate, "v0")
	}
	return e, issue(t, e, ledger.TriggerNotification), issue(t, e, ledger.TriggerNotification)
}

// The seed's first example: B (ordinal 6) returns before A (ordinal 5);
// 6 is accepted and 5 can only leave a stale receipt.
func TestReadBSixBeforeAFive(t *testing.T) {
	e, a, b := readsFiveAndSix(t)
	require.Equal(t, uint64(5), a.ReadOrdinal)
	require.Equal(t, uint64(6), b.ReadOrdinal)

	outB, err := e.AcceptResourceVersion(b, text(docURI, "new"))
	require.NoError(t, err)
	assert.True(t, outB.Accepted)
	assert.Equal(t, mcpsync.DecisionAccepted, outB.Version.Decision)

	outA, err := e.AcceptResourceVersion(a, text(docURI, "old"))
	require.ErrorIs(t, err, mcpsync.ErrStaleOrdinal)
	require.ErrorIs(t, err, mcpsync.ErrRefused)
	assert.False(t, outA.Accepted)
	assert.Equal(t, mcpsync.ReasonStaleOrdinal, outA.Stale.Reason)
	assert.Equal(t, uint64(6), outA.Stale.Watermark)

	assert.Equal(t, "new", served(t, e))
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), sub.Watermark)
}

// The seed's second example: A returns first, so 5 and then 6 are accepted.
func TestReadAFiveBeforeBSix(t *testing.T) {
	e, a, b := readsFiveAndSix(t)
	outA, err := e.AcceptResourceVersion(a, text(docURI, "five"))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionAccepted, outA.Version.Decision)
	assert.Equal(t, "five", served(t, e))
	outB, err := e.AcceptResourceVersion(b, text(docURI, "six"))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionAccepted, outB.Version.Decision)
	assert.Equal(t, "six", served(t, e))

	entries := outbox(t, e)
	require.Len(t, entries, 3) // v0, five, six
	assert.Equal(t, uint64(5), entries[1].Version.ReadOrdinal)
	assert.Equal(t, uint64(6), entries[2].Version.ReadOrdinal)
	assert.Equal(t, entries[1].Version.Digest, entries[2].Previous.Digest)
}

// Close vs accept race: a read sent before beginUnsubscribe and answered
// after it, with content or with not-found, only leaves a STALE_AFTER_CLOSE
// audit receipt: no version, no tombstone, no outbox entry.
func TestCloseVersusReadAcceptRace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result mcpsync.ReadResult
	}{
		{"late content", text(docURI, "late")},
		{"late not found", mcpsync.NotFoundResult()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := activeEngine(t, nil)
			acceptRead(t, e, ledger.TriggerInitial, "kept")
			inFlight := issue(t, e, ledger.TriggerNotification)
			before := outbox(t, e)

			rc, err := e.BeginClose(docURI)
			require.NoError(t, err)
			assert.Equal(t, inFlight.ReadOrdinal, rc.CloseOrdinal)
			assert.NotZero(t, rc.CloseEpoch)
			assert.Equal(t, ledger.StateUnsubscribing, rc.State)

			out, err := e.AcceptResourceVersion(inFlight, tc.result)
			require.ErrorIs(t, err, mcpsync.ErrStaleAfterClose)
			assert.Equal(t, mcpsync.ReasonStaleAfterClose, out.Stale.Reason)
			assert.Equal(t, rc.CloseOrdinal, out.Stale.CloseOrdinal)
			assert.Equal(t, before, outbox(t, e), "no outbox entry after close")
			// Unsubscribe stops notifications; cached content stays.
			assert.Equal(t, "kept", served(t, e))

			_, err = e.IssueTicket(docURI, ledger.TriggerRevalidate)
			require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "no ordinal after closeOrdinal")
		})
	}
}

// Late content and late not-found after CLOSED are audit only, whichever
// way the unsubscribe ended.
func TestLateContentAndNotFoundAfterClosed(t *testing.T) {
	for _, acked := range []bool{true, false} {
		e := activeEngine(t, nil)
		tk := issue(t, e, ledger.TriggerInitial)
		notFound := issue(t, e, ledger.TriggerNotification)
		_, err := e.BeginClose(docURI)
		require.NoError(t, err)
		sub, err := e.FinishClose(docURI, acked)
		require.NoError(t, err)
		if acked {
			assert.Equal(t, ledger.StateClosed, sub.State)
			assert.False(t, sub.EndedAt.IsZero())
		} else {
			assert.Equal(t, ledger.StateUnsubscribeUnknown, sub.State)
		}
		_, err = e.AcceptResourceVersion(tk, text(docURI, "late"))
		require.ErrorIs(t, err, mcpsync.ErrStaleAfterClose)
		_, err = e.AcceptResourceVersion(notFound, mcpsync.NotFoundResult())
		require.ErrorIs(t, err, mcpsync.ErrStaleAfterClose)
		assert.Empty(t, outbox(t, e))
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrNoVersion)
		counts := e.StaleCounts()
		assert.Equal(t, uint64(2), counts[mcpsync.ReasonStaleAfterClose])
	}
}

// Unsubscribe ack lost: UNSUBSCRIBE_UNKNOWN stays silent, is never reopened,
// and a later Subscribe is a new generation whose fence starts afresh.
func TestUnsubscribeAckLost(t *testing.T) {
	e := activeEngine(t, nil)
	acceptRead(t, e, ledger.TriggerInitial, "v1")
	_, err := e.BeginClose(docURI)
	require.NoError(t, err)
	sub, err := e.FinishClose(docURI, false)
	require.NoError(t, err)
	require.Equal(t, ledger.StateUnsubscribeUnknown, sub.State)

	_, err = e.Activate(docURI, ledger.ModePush)
	require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "never reopened")
	_, _, err = e.Notify(docURI)
	require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "silent: a pulse issues no read")

	again, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	assert.Equal(t, sub.SubscriptionGeneration+1, again.SubscriptionGeneration)
	assert.Equal(t, ledger.StateSubscribing, again.State)
	assert.Zero(t, again.Watermark)
	assert.Equal(t, "v1", served(t, e), "cached content survives the close")
}

// A read of an older session or subscription generation never overwrites a
// newer one.
func TestOldGenerationNeverOverwritesNew(t *testing.T) {
	t.Run("subscription generation", func(t *testing.T) {
		e := activeEngine(t, nil)
		old := issue(t, e, ledger.TriggerInitial)
		resubscribe(t, e)
		fresh := issue(t, e, ledger.TriggerInitial)
		require.Equal(t, old.ReadOrdinal, fresh.ReadOrdinal, "ordinals restart per generation")
		_, err := e.AcceptResourceVersion(fresh, text(docURI, "new"))
		require.NoError(t, err)

		// Same ordinal, same URI, older (closed) generation: refused.
		old.RequestID = fresh.RequestID
		_, err = e.AcceptResourceVersion(old, text(docURI, "old"))
		require.ErrorIs(t, err, mcpsync.ErrStaleAfterClose)
		assert.Equal(t, "new", served(t, e))
	})
	t.Run("session generation", func(t *testing.T) {
		e := activeEngine(t, nil)
		old := issue(t, e, ledger.TriggerInitial)
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
		_, err = e.AcceptResourceVersion(old, text(docURI, "old session"))
		require.ErrorIs(t, err, mcpsync.ErrGenerationMismatch)
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrNoVersion)
		_, _, err = e.Notify(docURI)
		require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "old-session subscription issues no read")
	})
}

func TestEveryRefusalReason(t *testing.T) {
	otherURI := "file:///docs/b.md"
	cases := []struct {
		name   string
		setup  func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult)
		reason mcpsync.StaleReason
		target error
	}{
		{"unknown request id", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			tk.RequestID += 100
			return tk, text(docURI, "x")
		}, mcpsync.ReasonUnknownRequest, mcpsync.ErrUnknownRequest},
		{"ticket for a URI never subscribed", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			tk.URI = otherURI
			return tk, text(otherURI, "x")
		}, mcpsync.ReasonUnknownRequest, mcpsync.ErrUnknownRequest},
		{"settled ticket delivered twice", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			_, err := e.AcceptResourceVersion(tk, text(docURI, "x"))
			require.NoError(t, err)
			return tk, text(docURI, "x")
		}, mcpsync.ReasonStaleOrdinal, mcpsync.ErrStaleOrdinal},
		{"abandoned ticket answered late", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			require.NoError(t, e.AbandonRead(tk))
			return tk, text(docURI, "x")
		}, mcpsync.ReasonUnknownRequest, mcpsync.ErrUnknownRequest},
		{"ordinal the ledger never issued", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			tk.ReadOrdinal += 7
			return tk, text(docURI, "x")
		}, mcpsync.ReasonReconciliationRequired, mcpsync.ErrReconciliationRequired},
		{"wrong URI in contents", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			return issue(t, e, ledger.TriggerInitial), text(otherURI, "x")
		}, mcpsync.ReasonURIMismatch, mcpsync.ErrURIMismatch},
		{"empty contents", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			return issue(t, e, ledger.TriggerInitial), mcpsync.NewReadResult(nil)
		}, mcpsync.ReasonEmptyContents, mcpsync.ErrEmptyContents},
		{"content URI that is not a URI", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			return issue(t, e, ledger.TriggerInitial), text("no scheme", "x")
		}, mcpsync.ReasonInvalidContent, mcpsync.ErrInvalidContent},
		{"subject revoked while the read was in flight", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			tk := issue(t, e, ledger.TriggerInitial)
			_, err := e.RevokeSubject(alice)
			require.NoError(t, err)
			return tk, text(docURI, "x")
		}, mcpsync.ReasonSubjectRevoked, mcpsync.ErrSubjectRevoked},
		{"result while a tombstone is pending", func(t *testing.T, e *mcpsync.Engine) (ledger.Ticket, mcpsync.ReadResult) {
			gone := issue(t, e, ledger.TriggerInitial)
			later := issue(t, e, ledger.TriggerNotification)
			_, err := e.AcceptResourceVersion(gone, mcpsync.NotFoundResult())
			require.NoError(t, err)
			return later, text(docURI, "x")
		}, mcpsync.ReasonNotActive, mcpsync.ErrNotActive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := activeEngine(t, nil)
			tk, res := tc.setup(t, e)
			before := outbox(t, e)
			out, err := e.AcceptResourceVersion(tk, res)
			require.ErrorIs(t, err, tc.target)
			require.ErrorIs(t, err, mcpsync.ErrRefused)
			var re *mcpsync.RefusalError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.reason, re.Reason)
			assert.False(t, out.Accepted)
			assert.Equal(t, tc.reason, out.Stale.Reason)
			assert.Equal(t, mcpsync.SchemaStaleReceipt, out.Stale.Schema)
			assert.Equal(t, before, outbox(t, e), "a refusal writes no outbox entry")
			receipts := e.StaleReceipts()
			require.NotEmpty(t, receipts)
			assert.Equal(t, out.Stale, receipts[len(receipts)-1])
		})
	}
}

// Bad input spends its ticket but loses nothing already accepted.
func TestBadInputLosesNothingAccepted(t *testing.T) {
	e := activeEngine(t, nil)
	acceptRead(t, e, ledger.TriggerInitial, "good")
	for _, bad := range []mcpsync.ReadResult{mcpsync.NewReadResult(nil), text("file:///elsewhere", "x")} {
		tk := issue(t, e, ledger.TriggerNotification)
		_, err := e.AcceptResourceVersion(tk, bad)
		require.ErrorIs(t, err, mcpsync.ErrRefused)
		assert.Equal(t, "good", served(t, e))
	}
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateActive, sub.State, "a spent ticket leaves no read pending")
}

func TestUnchangedDigestRaisesWatermarkWithoutOutbox(t *testing.T) {
	e := activeEngine(t, nil)
	acceptRead(t, e, ledger.TriggerInitial, "same")
	again := issue(t, e, ledger.TriggerRevalidate)
	out, err := e.AcceptResourceVersion(again, text(docURI, "same").WithLastModified("2026-11-30T10:00:00Z"))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionUnchanged, out.Version.Decision)
	assert.Zero(t, out.Version.OutboxSeq)
	assert.Len(t, outbox(t, e), 1)
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, again.ReadOrdinal, sub.Watermark)
	assert.Equal(t, out.Version.Version.Digest, sub.LastAcceptedDigest)
}

func TestNotFoundGoesToTombstonePendingThenReconciliation(t *testing.T) {
	for _, present := range []bool{false, true} {
		e := activeEngine(t, nil)
		acceptRead(t, e, ledger.TriggerInitial, "v1")
		gone := issue(t, e, ledger.TriggerNotification)
		out, err := e.AcceptResourceVersion(gone, mcpsync.NotFoundResult())
		require.NoError(t, err)
		assert.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
		sub, err := e.Subscription(docURI)
		require.NoError(t, err)
		require.Equal(t, ledger.StateTombstonePending, sub.State)
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrTombstonePending)
		require.Len(t, outbox(t, e), 1, "the tombstone waits for reconciliation")

		reread, ok, err := e.ApplyListing(docURI, present, newClock().t)
		require.NoError(t, err)
		sub, err = e.Subscription(docURI)
		require.NoError(t, err)
		if present {
			require.True(t, ok)
			assert.Equal(t, ledger.TriggerReconcile, reread.Trigger)
			assert.Equal(t, ledger.StateReadPending, sub.State)
			_, err = e.FinishRead(reread, text(docURI, "v2"))
			require.NoError(t, err)
			assert.Equal(t, "v2", served(t, e))
			continue
		}
		assert.False(t, ok)
		assert.Equal(t, ledger.StateTombstoned, sub.State)
		entries := outbox(t, e)
		require.Len(t, entries, 2)
		assert.Equal(t, ledger.InvalidateTombstoned, entries[1].Reason)
		assert.Equal(t, "v1", textOf(t, entries[0]))
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	}
}

func textOf(t *testing.T, entry mcpsync.OutboxEntry) string {
	t.Helper()
	if entry.Version.Digest == text(docURI, "v1").Digest() {
		return "v1"
	}
	return "?"
}

func TestContentGuardQuarantines(t *testing.T) {
	e := activeEngine(t, &mcpsync.EngineOptions{Guard: mcpsync.Guards(mcpsync.MaxBytes(8), mcpsync.AllowMIME("text/*"))})
	acceptRead(t, e, ledger.TriggerInitial, "short")

	older := issue(t, e, ledger.TriggerNotification)
	big := issue(t, e, ledger.TriggerNotification)
	out, err := e.AcceptResourceVersion(big, text(docURI, "far too long for the guard"))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionQuarantined, out.Version.Decision)
	assert.NotEmpty(t, out.Version.GuardReason)
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrQuarantined, "neither the refused nor the superseded version is served")
	entries := outbox(t, e)
	require.Len(t, entries, 2)
	assert.Equal(t, ledger.InvalidateQuarantined, entries[1].Reason)

	_, err = e.AcceptResourceVersion(older, text(docURI, "older"))
	require.ErrorIs(t, err, mcpsync.ErrStaleOrdinal, "quarantine raised the watermark")

	blob := issue(t, e, ledger.TriggerRevalidate)
	out, err = e.AcceptResourceVersion(blob, mcpsync.NewReadResult([]mcpsync.Content{{URI: docURI, MIMEType: "image/png", Data: []byte{1}, Binary: true}}))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionQuarantined, out.Version.Decision)

	fine := issue(t, e, ledger.TriggerRevalidate)
	_, err = e.AcceptResourceVersion(fine, text(docURI, "ok now"))
	require.NoError(t, err)
	assert.Equal(t, "ok now", served(t, e))
}

func TestLookupIsBoundToTheSubject(t *testing.T) {
	e := activeEngine(t, nil)
	acceptRead(t, e, ledger.TriggerInitial, "alice's")
	_, err := e.Lookup(bob, docURI)
	require.ErrorIs(t, err, mcpsync.ErrForbidden)
	var target *mcpsync.RefusalError
	assert.False(t, errors.As(err, &target))
}

// Rollback and restart keep the fence: a read issued before the ledger was
// exported and answered after it was restored is refused, late content and
// late not-found alike, and nothing accepted before is lost.
func TestFenceSurvivesExportAndRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		late mcpsync.ReadResult
	}{{"late content", text(docURI, "late")}, {"late not found", mcpsync.NotFoundResult()}} {
		t.Run(tc.name, func(t *testing.T) {
			e := activeEngine(t, nil)
			acceptRead(t, e, ledger.TriggerInitial, "v1")
			inFlight := issue(t, e, ledger.TriggerNotification)
			closing := "file:///docs/closing.md"
			subscribeActive(t, e, closing, alice)
			closingRead, err := e.IssueTicket(closing, ledger.TriggerInitial)
			require.NoError(t, err)
			rc, err := e.BeginClose(closing)
			require.NoError(t, err)

			back := restored(t, e, nil)
			_, err = back.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)

			_, err = back.AcceptResourceVersion(inFlight, tc.late)
			require.ErrorIs(t, err, mcpsync.ErrRefused, "a read from before the export")
			_, err = back.AcceptResourceVersion(closingRead, tc.late)
			require.ErrorIs(t, err, mcpsync.ErrRefused, "a read answered after its close")
			entry, err := back.Lookup(alice, docURI)
			require.NoError(t, err)
			assert.Equal(t, "v1", entry.Contents[0].Text, "nothing accepted is lost")
			sub, err := back.Subscription(closing)
			require.NoError(t, err)
			assert.Equal(t, rc.CloseOrdinal, sub.CloseOrdinal, "the close receipt survives")
			assert.Equal(t, ledger.StateUnsubscribing, sub.State)

			// New tickets never reuse an identity from before.
			_, err = back.Subscribe(docURI, alice)
			require.NoError(t, err)
			_, err = back.Activate(docURI, ledger.ModePush)
			require.NoError(t, err)
			fresh, err := back.IssueTicket(docURI, ledger.TriggerReconnect)
			require.NoError(t, err)
			assert.Greater(t, fresh.RequestID, inFlight.RequestID)
			assert.Greater(t, fresh.SubscriptionGeneration, inFlight.SubscriptionGeneration)
		})
	}
}

// Outcome tells the decisions apart at a glance: Accepted is true for all
// that passed, Changed only for new content.
func TestOutcomeSaysWhatPassingMeant(t *testing.T) {
	e := activeEngine(t, nil)
	accept := func(r mcpsync.ReadResult) mcpsync.Outcome {
		out, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), r)
		require.NoError(t, err)
		return out
	}
	out := accept(text(docURI, "v1"))
	assert.Equal(t, mcpsync.DecisionAccepted, out.Decision())
	assert.True(t, out.Changed())
	assert.False(t, out.Withdrawn())
	out = accept(text(docURI, "v1"))
	assert.Equal(t, mcpsync.DecisionUnchanged, out.Decision())
	assert.False(t, out.Changed())
	assert.False(t, out.Withdrawn())
	out = accept(mcpsync.NotFoundResult())
	assert.True(t, out.Accepted)
	assert.Equal(t, mcpsync.DecisionTombstonePending, out.Decision())
	assert.False(t, out.Changed())
	assert.True(t, out.Withdrawn(), "a not-found takes the text away")

	stale := issue(t, e, ledger.TriggerNotification)
	accept(text(docURI, "v2"))
	out, err := e.AcceptResourceVersion(stale, text(docURI, "old"))
	require.Error(t, err)
	assert.Empty(t, out.Decision())
	assert.False(t, out.Changed())
	assert.False(t, out.Withdrawn())
}
