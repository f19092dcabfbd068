package mcpsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Break 15: a rollback (restoring a snapshot taken before the live ledger
// moved on) must never hand out again an identity the live ledger handed out
// after the export: "unique forever, across restarts and rollbacks", and the
// Ledger contract says no value is returned twice "by a ledger and the
// ledgers restored from its snapshots".
func TestBreak15RollbackHandsOutCountersTheLiveLedgerAlreadyUsed(t *testing.T) {
	ctx := context.Background()
	live := mcpsync.NewMemoryLedger(nil)
	_, err := live.Next(ctx, mcpsync.CounterSession, 1)
	require.NoError(t, err)
	snap, err := live.Export(ctx)
	require.NoError(t, err)

	// The live ledger goes on after the export.
	used := map[mcpsync.Counter]uint64{}
	for _, c := range []mcpsync.Counter{mcpsync.CounterSession, mcpsync.CounterCloseEpoch, mcpsync.CounterRequest} {
		used[c], err = live.Next(ctx, c, 1)
		require.NoError(t, err)
	}

	// Rollback: the snapshot is restored.
	restored, err := mcpsync.NewMemoryLedgerFrom(snap)
	require.NoError(t, err)
	for c, v := range used {
		got, err := restored.Next(ctx, c, 1)
		require.NoError(t, err)
		assert.NotEqual(t, v, got, "%s %d handed out by the live ledger after the export is handed out again by the restored one", c, v)
	}
}

// The reused session generation is not only a number: Catalog.Proven and
// Catalog.Reconcile bind a catalog to its session by the generation alone, so
// after a rollback a SNAPSHOT_PROVEN catalog the live engine measured passes
// as evidence in the restored engine's session, and confirms a deletion
// there (the issue's "a SNAPSHOT_PROVEN catalog of the previous engine's
// session passed Complete in the new one", through a rollback).
func TestBreak15RollbackLetsTheLiveEnginesCatalogProveAbsenceInTheRestoredEngine(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	clock := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	caps := mcpsync.CapabilityReceipt{ProtocolVersion: "2025-11-25", Resources: true, ListChanged: true, SnapshotList: true}

	liveLedger := mcpsync.NewMemoryLedger(nil)
	live, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: liveLedger, Now: now})
	require.NoError(t, err)
	_, err = live.BeginSession(mcpsync.SessionInfo{Capabilities: caps})
	require.NoError(t, err)
	_, err = live.Subscribe(doc, "user:alice")
	require.NoError(t, err)
	_, err = live.Activate(doc, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err := live.IssueTicket(doc, mcpsync.TriggerInitial)
	require.NoError(t, err)
	_, err = live.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: "v1"}}))
	require.NoError(t, err)

	snap, err := mcpsync.ExportLedger(ctx, liveLedger)
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
	restoredLedger, err := mcpsync.NewMemoryLedgerFrom(snap)
	require.NoError(t, err)
	restored, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: restoredLedger, Now: now})
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
	_, err = restored.Activate(doc, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err = restored.IssueTicket(doc, mcpsync.TriggerReconnect)
	require.NoError(t, err)
	clock = clock.Add(-30 * time.Second) // the not-found predates the live catalog
	_, err = restored.AcceptResourceVersion(tk, mcpsync.NotFoundResult())
	require.NoError(t, err)
	clock = clock.Add(time.Minute)
	rec, err := catalog.Reconcile(restored)
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
	assert.Empty(t, rec.Tombstoned, "doc tombstoned in the restored engine on the live engine's listing")
	_, err = restored.Lookup("user:alice", doc)
	assert.NotErrorIs(t, err, mcpsync.ErrTombstoned)
}
