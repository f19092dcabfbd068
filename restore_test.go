package mcpsync_test

// Restore and rollback: a snapshot is operator input, so ledger.Restore
// refuses one it cannot hold or that contradicts itself with a typed error,
// and a restored ledger never hands out again an identity the live ledger
// used after the export, nor takes the live engine's evidence as its own.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// A snapshot whose outbox stops short of State.Last (entries 2 and 3
// missing) is refused, or, if restored, its outbox can be read: the memory
// ledger never believes it holds entries it has not got and panics on the
// first read, taking the worker down.
func TestRestoreOfAShortOutboxIsRefusedOrReadable(t *testing.T) {
	ctx := context.Background()
	src := ledger.NewMemory(nil)
	for rev := uint64(1); rev <= 3; rev++ {
		_, ok, err := src.CompareAndSwap(ctx, "file:///a", rev-1, &ledger.Record{Revision: rev},
			[]mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: "file:///a", Reason: ledger.InvalidateUpdated}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	snap, err := src.Export(ctx)
	require.NoError(t, err)
	snap.Outbox = snap.Outbox[:1] // entries 2 and 3 missing, State.Last still 3

	into := ledger.NewMemory(nil)
	err = ledger.Restore(ctx, into, snap)
	if err != nil {
		return // refused: fine
	}
	assert.NotPanics(t, func() {
		_, err = into.Outbox(ctx, 0, 0)
	}, "a snapshot Restore accepted makes Outbox panic")
}

// A rollback (restoring a snapshot taken before the live ledger moved on)
// never hands out again an identity the live ledger handed out after the
// export: "unique forever, across restarts and rollbacks", and the Ledger
// contract says no value is returned twice "by a ledger and the ledgers
// restored from its snapshots".
func TestRollbackNeverHandsOutACounterTheLiveLedgerUsed(t *testing.T) {
	ctx := context.Background()
	live := ledger.NewMemory(nil)
	_, err := live.Next(ctx, ledger.CounterSession, 1)
	require.NoError(t, err)
	snap, err := live.Export(ctx)
	require.NoError(t, err)

	// The live ledger goes on after the export.
	used := map[ledger.Counter]uint64{}
	for _, c := range []ledger.Counter{ledger.CounterSession, ledger.CounterCloseEpoch, ledger.CounterRequest} {
		used[c], err = live.Next(ctx, c, 1)
		require.NoError(t, err)
	}

	// Rollback: the snapshot is restored.
	restored, err := ledger.NewMemoryFrom(snap)
	require.NoError(t, err)
	for c, v := range used {
		got, err := restored.Next(ctx, c, 1)
		require.NoError(t, err)
		assert.NotEqual(t, v, got, "%s %d handed out by the live ledger after the export is handed out again by the restored one", c, v)
	}
}

// A session generation is bound to its engine's ledger, not only a number:
// after a rollback, a SNAPSHOT_PROVEN catalog the live engine measured in
// its new session is no evidence in the restored engine's session
// (Catalog.Proven refuses it with ErrSnapshotUnproven), and its
// Reconcile confirms no deletion there.
func TestRollbackKeepsTheLiveEnginesCatalogOutOfTheRestoredSession(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	clock := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	caps := ledger.CapabilityReceipt{ProtocolVersion: "2025-11-25", Resources: true, ListChanged: true, SnapshotList: true}

	liveLedger := ledger.NewMemory(nil)
	live, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: liveLedger, Now: now})
	require.NoError(t, err)
	_, err = live.BeginSession(mcpsync.SessionInfo{Capabilities: caps})
	require.NoError(t, err)
	subscribeActive(t, live, doc, "user:alice")
	tk, err := live.IssueTicket(doc, ledger.TriggerInitial)
	require.NoError(t, err)
	_, err = live.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: "v1"}}))
	require.NoError(t, err)

	snap, err := ledger.Export(ctx, liveLedger)
	require.NoError(t, err)

	// The live engine reconnects and lists the server of its new session:
	// a proven catalog of that session (it happens not to list doc, say the
	// live engine talks to another tenant's server).
	receipt, err := live.BeginSession(mcpsync.SessionInfo{Capabilities: caps})
	require.NoError(t, err)
	scanner, err := mcpsync.NewScanner(&mcpsync.ScannerOptions{Now: now, StaleAfter: time.Hour})
	require.NoError(t, err)
	clock = clock.Add(time.Minute)
	catalog, err := scanner.Scan(ctx, mcpsync.KindResources, mcpsync.EraLegacy, receipt,
		func(context.Context, *string) (mcpsync.Page, error) {
			return mcpsync.Page{Items: []mcpsync.Descriptor{{URI: "file:///docs/other.md"}}, SnapshotID: "snap-live"}, nil
		}, nil)
	require.NoError(t, err)
	require.Equal(t, mcpsync.CatalogSnapshotProven, catalog.Status)

	// Rollback: the snapshot is restored and a new engine starts on it.
	restoredLedger, err := ledger.NewMemoryFrom(snap)
	require.NoError(t, err)
	restored, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: restoredLedger, Now: now})
	require.NoError(t, err)
	_, err = restored.BeginSession(mcpsync.SessionInfo{Capabilities: caps})
	require.NoError(t, err)
	assert.NotEqual(t, live.SessionGeneration(), restored.SessionGeneration(),
		"the restored engine's session generation was already the live engine's")

	_, err = catalog.Proven(clock, restored.SessionGeneration())
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven,
		"a catalog the live engine measured vouches for the restored engine's session")

	// Worse: it confirms a deletion the restored engine never proved.
	_, err = restored.Subscribe(doc, "user:alice")
	require.NoError(t, err)
	_, err = restored.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	tk, err = restored.IssueTicket(doc, ledger.TriggerReconnect)
	require.NoError(t, err)
	clock = clock.Add(-30 * time.Second) // the not-found predates the live catalog
	_, err = restored.AcceptResourceVersion(tk, mcpsync.NotFoundResult())
	require.NoError(t, err)
	clock = clock.Add(time.Minute)
	rec, err := catalog.Reconcile(restored, nil)
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
	assert.Empty(t, rec.Tombstoned, "doc tombstoned in the restored engine on the live engine's listing")
	_, err = restored.Lookup("user:alice", doc)
	assert.NotErrorIs(t, err, mcpsync.ErrTombstoned)
}

// ForRestore refuses with ErrSnapshotInvalid a snapshot that contradicts
// itself, and entries before the first retained one "may be gone
// (acknowledged or dropped)". A snapshot whose outbox starts at entry 3
// while its consumer is at 0, its State.First is 1 and nothing was dropped
// says entries 1 and 2 are neither (a filtered or hand-trimmed export): it
// is refused, rather than restored into a ledger that hides the loss.
func TestRestoreRefusesAnOutboxMissingEntriesNobodyPassed(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	require.NoError(t, e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, 0)) // the default consumer, at 0
	acceptN(t, e, doc, 5)
	snap, err := ledger.Export(ctx, e.Ledger())
	require.NoError(t, err)
	require.Len(t, snap.Outbox, 5)
	require.Equal(t, uint64(0), snap.State.Consumers[mcpsync.DefaultConsumer])
	require.Equal(t, uint64(1), snap.State.First)
	snap.Outbox = snap.Outbox[2:] // entries 1 and 2 are missing; nothing says why

	into := ledger.NewMemory(nil)
	err = ledger.Restore(ctx, into, snap)
	if errors.Is(err, ledger.ErrSnapshotInvalid) {
		return
	}
	require.NoError(t, err)
	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: into})
	require.NoError(t, err)
	st, err := n.OutboxState(ctx)
	require.NoError(t, err)
	entries, err := n.PullOutbox(0, 0)
	var seqs []uint64
	for _, en := range entries {
		seqs = append(seqs, en.Seq)
	}
	t.Errorf("a snapshot missing entries 1 and 2 (consumer at 0, none dropped) was restored: dropped %d, PullOutbox gave %v, err %v",
		st.Dropped, seqs, err)
	assert.ErrorIs(t, err, mcpsync.ErrOutboxGap, "at least the consumer is told it lost 1 and 2")
}

// A snapshot whose outbox numbering is at the top of uint64 (State.Last =
// MaxUint64, a consumer at 0, nothing retained: each field within range on
// its own) is refused with a typed error (ErrSnapshotInvalid or
// ErrCounterExhausted), not a panic of the memory ledger's Restore.
func TestRestoreRefusesAnOutboxAtTheTopOfItsNumbering(t *testing.T) {
	snap := ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{}, Counters: map[ledger.Counter]uint64{},
		State: ledger.OutboxState{Last: math.MaxUint64, First: math.MaxUint64, Consumers: map[string]uint64{"index": 0}},
	}
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				t.Errorf("RestoreLedger panicked on a snapshot with its outbox at %d: %v", uint64(math.MaxUint64), p)
			}
		}()
		err = ledger.Restore(context.Background(), ledger.NewMemory(nil), snap)
	}()
	assert.True(t, errors.Is(err, ledger.ErrSnapshotInvalid) || errors.Is(err, ledger.ErrCounterExhausted),
		"refused with a typed error, got %v", err)
}

// A ledgerSnapshot.v1 has one consumer, the one PullOutbox acts for
// (DefaultConsumer), and its position in Acked; Upgrade says "its one
// consumer becomes the default consumer". After ledger.Restore the default
// consumer is where the v1 consumer was (its position is 2, so the
// worker does not re-apply what it had acknowledged), no consumer named ""
// appears that nobody can acknowledge, and once the worker acknowledges
// the last entry nothing stays retained.
func TestVersionOneSnapshotKeepsTheDefaultConsumersPosition(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	acceptN(t, e, doc, 3)
	snap, err := ledger.Export(ctx, e.Ledger())
	require.NoError(t, err)
	require.Len(t, snap.Outbox, 3)
	// The same state as an older release exported it: its single consumer
	// had acknowledged entries 1 and 2.
	v1 := ledger.Snapshot{Schema: ledger.SchemaSnapshotV1, Records: snap.Records,
		Revoked: snap.Revoked, Outbox: snap.Outbox[2:], Acked: 2}

	l, err := ledger.NewMemoryFrom(v1)
	require.NoError(t, err)
	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	cursor, err := defaultCursor(n)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), cursor, "the v1 consumer's acknowledged position is the default consumer's")

	require.NoError(t, n.Acknowledge(context.Background(), mcpsync.DefaultConsumer, 3)) // the worker applied entry 3
	st, err := n.OutboxState(ctx)
	require.NoError(t, err)
	t.Logf("consumers after restore and acknowledging 3: %v, first retained %d, last %d", st.Consumers, st.First, st.Last)
	assert.NotContains(t, st.Consumers, "", "a consumer nobody can name or acknowledge for")
	assert.Greater(t, st.First, st.Last, "every consumer passed entry 3: nothing should stay retained")
}
