package mcpsync_test

// Resolving an outbox entry: the exact contents of the version it names,
// or why there are none, as a kind a consumer switches on.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// loadedLedger hides the memory ledger behind the Ledger interface, so the
// engine reads records by Load, as it does on a durable ledger.
type loadedLedger struct{ ledger.Ledger }

// resolveLedgers are the two ways the engine reads a record.
var resolveLedgers = []struct {
	name string
	open func() ledger.Ledger
}{
	{"memory", func() ledger.Ledger { return ledger.NewMemory(nil) }},
	{"loaded", func() ledger.Ledger { return loadedLedger{ledger.NewMemory(nil)} }},
}

func resolve(t *testing.T, e *mcpsync.Engine, en mcpsync.OutboxEntry) mcpsync.Resolution {
	t.Helper()
	r, err := e.Resolve(context.Background(), en)
	require.NoError(t, err)
	return r
}

// An updated entry whose version is still current resolves to that
// version's contents, also after reads that found it unchanged.
func TestResolveYieldsTheContentsOfTheEntrysVersion(t *testing.T) {
	for _, l := range resolveLedgers {
		t.Run(l.name, func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l.open()})
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			acceptRead(t, e, ledger.TriggerNotification, "v1") // unchanged: no entry, the version stays
			entries := outbox(t, e)
			require.Len(t, entries, 1)
			r := resolve(t, e, entries[0])
			assert.Equal(t, mcpsync.ResolvedContents, r.Kind)
			assert.Equal(t, entries[0].Version, r.Version)
			assert.Equal(t, ledger.VersionServed, r.Status)
			require.Len(t, r.Contents, 1)
			assert.Equal(t, "v1", r.Contents[0].Text)
		})
	}
}

// A consumer is never handed text of another version than its entry names:
// an entry whose version was replaced resolves to superseded, naming the
// newer version, even when the newer one has the same text (v1, v2, v1).
func TestResolveNeverHandsOutTextOfAnotherVersion(t *testing.T) {
	for _, l := range resolveLedgers {
		t.Run(l.name, func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l.open()})
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			acceptRead(t, e, ledger.TriggerNotification, "v2")
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			entries := outbox(t, e)
			require.Len(t, entries, 3)
			require.Equal(t, entries[0].Version.Digest, entries[2].Version.Digest)
			for _, en := range entries[:2] {
				r := resolve(t, e, en)
				assert.Equal(t, mcpsync.ResolvedSuperseded, r.Kind, "entry %d", en.Seq)
				assert.Empty(t, r.Contents, "entry %d", en.Seq)
				assert.Equal(t, en.Version, r.Version)
				assert.Equal(t, entries[2].Version, r.By, "the version that replaced it")
			}
			r := resolve(t, e, entries[2])
			assert.Equal(t, mcpsync.ResolvedContents, r.Kind)
			assert.Equal(t, "v1", r.Contents[0].Text)
		})
	}
}

// A deletion resolves to deleted: the tombstone's own entry with its
// evidence, an entry of the deleted version without (the tombstone's entry
// follows it). While the deletion is only pending, the version's contents
// are still its own, and the status says it is pending.
func TestResolveSaysDeletedWithEvidence(t *testing.T) {
	for _, l := range resolveLedgers {
		t.Run(l.name, func(t *testing.T) {
			clock := newClock()
			e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l.open(), Now: clock.now})
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			clock.t = clock.t.Add(time.Second)
			_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), mcpsync.NotFoundResult())
			require.NoError(t, err)
			updated := outbox(t, e)[0]
			r := resolve(t, e, updated)
			assert.Equal(t, mcpsync.ResolvedContents, r.Kind)
			assert.Equal(t, ledger.VersionTombstonePending, r.Status)
			assert.Equal(t, "v1", r.Contents[0].Text)

			_, _, err = e.ApplyListing(docURI, false, clock.t)
			require.NoError(t, err)
			entries := outbox(t, e)
			require.Len(t, entries, 2)
			tomb := entries[1]
			require.Equal(t, ledger.InvalidateTombstoned, tomb.Reason)

			r = resolve(t, e, updated)
			assert.Equal(t, mcpsync.ResolvedDeleted, r.Kind)
			assert.Empty(t, r.Contents)
			assert.Equal(t, updated.Version, r.Version)
			assert.Nil(t, r.Evidence, "the tombstone's entry carries it")

			r = resolve(t, e, tomb)
			assert.Equal(t, mcpsync.ResolvedDeleted, r.Kind)
			assert.Equal(t, tomb.Previous, r.Version, "what the deleted version fed goes")
			require.NotNil(t, r.Evidence)
			assert.Equal(t, *tomb.Evidence, *r.Evidence)
		})
	}
}

// A revoked subject's entries resolve to revoked, before and after the
// sweep marked its versions; a forgotten version's to forgotten.
func TestResolveSaysRevokedAndForgotten(t *testing.T) {
	for _, l := range resolveLedgers {
		t.Run(l.name, func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l.open()})
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			updated := outbox(t, e)[0]
			_, err := e.RevokeSubject(alice)
			require.NoError(t, err)
			for _, en := range outbox(t, e) {
				r := resolve(t, e, en)
				assert.Equal(t, mcpsync.ResolvedRevoked, r.Kind, "entry %d (%s)", en.Seq, en.Reason)
				assert.Empty(t, r.Contents)
				assert.Equal(t, updated.Version, r.Version)
			}
		})
		t.Run(l.name+"/forgotten", func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l.open()})
			acceptRead(t, e, ledger.TriggerNotification, "v1")
			_, err := e.BeginClose(docURI)
			require.NoError(t, err)
			_, err = e.FinishClose(docURI, true)
			require.NoError(t, err)
			require.NoError(t, e.Forget(docURI))
			entries := outbox(t, e)
			require.Len(t, entries, 2)
			for _, en := range entries {
				r := resolve(t, e, en)
				assert.Equal(t, mcpsync.ResolvedForgotten, r.Kind, "entry %d (%s)", en.Seq, en.Reason)
				assert.Empty(t, r.Contents)
				assert.Equal(t, entries[0].Version, r.Version)
			}
		})
	}
}

// Content the guard refused supersedes the version before it, and its own
// entry resolves to quarantined, naming what must no longer be served.
func TestResolveSaysQuarantined(t *testing.T) {
	e := activeEngine(t, &mcpsync.EngineOptions{Guard: mcpsync.MaxBytes(8)})
	acceptRead(t, e, ledger.TriggerNotification, "short")
	out, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), text(docURI, "far too long for the guard"))
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionQuarantined, out.Version.Decision)
	entries := outbox(t, e)
	require.Len(t, entries, 2)
	r := resolve(t, e, entries[0])
	assert.Equal(t, mcpsync.ResolvedSuperseded, r.Kind)
	assert.Equal(t, entries[1].Version, r.By)
	r = resolve(t, e, entries[1])
	assert.Equal(t, mcpsync.ResolvedQuarantined, r.Kind)
	assert.Equal(t, entries[0].Version, r.Version)
	assert.Empty(t, r.Contents)
}

// An entry the ledger cannot have written is refused, never guessed at.
func TestResolveRefusesAnEntryOfNoKnownVersion(t *testing.T) {
	e := activeEngine(t, nil)
	acceptRead(t, e, ledger.TriggerNotification, "v1")
	en := outbox(t, e)[0]

	_, err := e.Resolve(context.Background(), mcpsync.OutboxEntry{})
	assert.ErrorIs(t, err, ledger.ErrLedgerSchema, "no schema")

	other := en
	other.URI = "file:///docs/never.md"
	_, err = e.Resolve(context.Background(), other)
	assert.ErrorIs(t, err, mcpsync.ErrUnknownURI)

	ahead := en
	ahead.Version.ReadOrdinal += 10
	_, err = e.Resolve(context.Background(), ahead)
	assert.ErrorIs(t, err, mcpsync.ErrUnknownVersion, "a version later than any the ledger holds")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = e.Resolve(cancelled, en)
	assert.ErrorIs(t, err, context.Canceled)
}
