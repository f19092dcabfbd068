package mcpsync_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// pendingEngine returns an engine whose docURI served "v1" (ordinal 1) and
// then read not found (ordinal 2): TOMBSTONE_PENDING, one second later.
func pendingEngine(t *testing.T) (*mcpsync.Engine, *fixedClock) {
	t.Helper()
	clock := newClock()
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	_, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerInitial), text(docURI, "v1"))
	require.NoError(t, err)
	clock.t = clock.t.Add(time.Second)
	out, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerNotification), mcpsync.NotFoundResult())
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
func corroborate(t *testing.T, e *mcpsync.Engine, scan mcpsync.AbsenceScan) mcpsync.Ticket {
	t.Helper()
	tk, ok, err := e.Corroborate(docURI, scan)
	require.NoError(t, err)
	require.True(t, ok, "the second read goes out")
	require.Equal(t, mcpsync.TriggerReconcile, tk.Trigger)
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
	assert.Equal(t, mcpsync.StateReadPending, sub.State)
	require.NotNil(t, sub.Corroboration)
	assert.Equal(t, uint64(2), sub.Corroboration.FirstRead)
	assert.Equal(t, []string{"scan-a", "scan-b"}, sub.Corroboration.Scans)
	_, err := e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstonePending, "still not served while corroborating")

	out, err := e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.True(t, out.Accepted)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Version.Decision)
	want := mcpsync.DeletionEvidence{Kind: mcpsync.EvidenceCorroborated, Scans: []string{"scan-a", "scan-b"}, Reads: []uint64{2, 3}}
	require.NotNil(t, out.Tombstone)
	assert.Equal(t, want, out.Tombstone.Evidence)
	sub = state(t, e)
	assert.Equal(t, mcpsync.StateTombstoned, sub.State)
	assert.Nil(t, sub.Corroboration)
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	entries := outbox(t, e)
	require.Len(t, entries, before+1)
	last := entries[len(entries)-1]
	assert.Equal(t, mcpsync.InvalidateTombstoned, last.Reason)
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
		between   func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket
		wantState mcpsync.SubscriptionState
	}{
		{name: "the second read finds it", wantState: mcpsync.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				out, err := e.FinishRead(second, text(docURI, "v2"))
				require.NoError(t, err)
				assert.Equal(t, mcpsync.DecisionAccepted, out.Version.Decision)
				assert.Equal(t, "v2", served(t, e))
				return nil
			}},
		{name: "a pulse", wantState: mcpsync.StateReadPending, // its follow-up read is out
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				_, _, err := e.Notify(docURI)
				require.NoError(t, err)
				return &second
			}},
		{name: "a scan lists it", wantState: mcpsync.StateTombstonePending,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				_, _, err := e.ApplyListing(docURI, true, time.Time{})
				require.NoError(t, err)
				return &second
			}},
		{name: "the second read gets no answer", wantState: mcpsync.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				_, err := e.Fail(second)
				require.NoError(t, err)
				return nil
			}},
		{name: "the second read is refused", wantState: mcpsync.StateActive,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				_, err := e.FinishRead(second, mcpsync.NewReadResult(nil))
				require.ErrorIs(t, err, mcpsync.ErrEmptyContents)
				return nil
			}},
		{name: "a newer read is in flight", wantState: mcpsync.StateTombstonePending,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
				_ = issue(t, e, mcpsync.TriggerRevalidate) // its answer would be newer
				return &second
			}},
		{name: "the close begins", wantState: mcpsync.StateUnsubscribing,
			between: func(t *testing.T, e *mcpsync.Engine, second mcpsync.Ticket) *mcpsync.Ticket {
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
				assert.NotEqual(t, mcpsync.InvalidateTombstoned, en.Reason)
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
	assert.Equal(t, mcpsync.StateTombstonePending, sub.State)
	assert.Nil(t, sub.Corroboration)
}

// A not-found of a read issued before the scan was recorded says nothing
// new: it confirms nothing and leaves the corroboration, and the state open,
// for the second read, which decides.
func TestCorroborationNeedsAReadAfterTheScan(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	first, early := issue(t, e, mcpsync.TriggerRevalidate), issue(t, e, mcpsync.TriggerRevalidate)
	_, err := e.FinishRead(first, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.StateTombstonePending, state(t, e).State)
	second := corroborate(t, e, scanAfter(clock))
	assert.Greater(t, second.ReadOrdinal, early.ReadOrdinal)

	out, err := e.FinishRead(early, mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
	assert.Nil(t, out.Tombstone)
	sub := state(t, e)
	assert.Equal(t, mcpsync.StateReadPending, sub.State)
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
	assert.Equal(t, mcpsync.TriggerReconcile, tk.Trigger)
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
	b, err := mcpsync.EncodeRecord(r)
	require.NoError(t, err)
	back, err := mcpsync.DecodeRecord(b)
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
	for name, v := range map[string]any{
		"tombstone_receipt.json": out.Tombstone,
		"outbox_tombstone.json":  entry,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			require.NoError(t, err)
			path := filepath.Join("testdata", "golden", name)
			if *update {
				require.NoError(t, os.WriteFile(path, append(got, '\n'), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestTombstoneReceiptGolden -update")
			assert.JSONEq(t, string(want), string(got))
		})
	}
}

// A confirmed tombstone stands when it is read again, also for a URI that
// never had a version: otherwise every revalidation would make it pending,
// and every scan confirm it again.
func TestTombstoneWithoutAVersionStands(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	_, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerInitial), mcpsync.NotFoundResult())
	require.NoError(t, err)
	out, err := e.FinishRead(corroborate(t, e, scanAfter(clock)), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.NotNil(t, out.Tombstone)
	assert.Zero(t, out.Tombstone.OutboxSeq, "no version to tell consumers about")
	require.False(t, state(t, e).TombstonedAt.IsZero())

	out, err = e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerRevalidate), mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Version.Decision)
	assert.Equal(t, mcpsync.StateTombstoned, state(t, e).State)

	_, err = e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerRevalidate), text(docURI, "back"))
	require.NoError(t, err)
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
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: true, SuppressListChanged: true})
				srv.Set(faultURI, "text/markdown", "v1")
				srv.Set(otherURI, "text/markdown", "v1")
				r, err := newLiveRig(t.Context(), srv, w.version, 0, mcpsync.ClientOptions{RevalidateEvery: time.Hour})
				require.NoError(t, err)
				t.Cleanup(func() { _ = r.c.Close() })
				r.subscribeSettled(t, faultURI)
				srv.Delete(faultURI)
				time.Sleep(time.Second)
				quiesce()
				cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
				require.NoError(t, err)
				_, err = r.c.Reconcile(cat)
				require.NoError(t, err)
				sub, err := r.c.Engine().Subscription(faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.StateTombstoned, sub.State, r.describe(faultURI))

				closed, uerr := r.c.Unsubscribe(t.Context(), faultURI)
				t.Logf("Unsubscribe of a tombstoned URI: %s, err %v", closed.State, uerr)
				quiesce()
				srv.Recreate(faultURI, "v2")
				time.Sleep(time.Minute)
				quiesce()
				sub, err = r.c.Engine().Subscription(faultURI)
				require.NoError(t, err)
				if uerr != nil || openState(sub.State) || srv.Subscribed(faultURI) {
					t.Fatalf("unsubscribe of a tombstoned URI not done (Unsubscribe err %v); after recreation: %s", uerr, r.describe(faultURI))
				}
			})
		})
	}
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
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	_, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerInitial), text(docURI, "v1"))
	require.NoError(t, err)

	// A read outside the queue (Client.Read), then a pulse's queued read.
	direct := issue(t, e, mcpsync.TriggerRevalidate)
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
	assert.Equal(t, mcpsync.StateTombstoned, state(t, e).State)
}
