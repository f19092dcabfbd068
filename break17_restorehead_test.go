package mcpsync_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// ForRestore promises to refuse with ErrSnapshotInvalid a snapshot that
// contradicts itself, and itself says entries before the first retained one
// "may be gone (acknowledged or dropped)". A snapshot whose outbox starts
// at entry 3 while its consumer is at 0, its State.First is 1 and nothing
// was dropped says entries 1 and 2 are neither: it contradicts itself (a
// filtered or hand-trimmed export). RestoreLedger takes it, and the restored
// ledger then hides the loss: Dropped is 0, OutboxState.Lost finds no gap,
// and PullOutbox hands the default consumer entries 3 to 5 as if 1 and 2
// had never existed.
func TestBreak17RestoreAcceptsAnOutboxMissingEntriesNobodyPassed(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	require.NoError(t, e.AckOutbox(0)) // the default consumer, at 0
	break15AcceptN(t, e, doc, 5)
	snap, err := mcpsync.ExportLedger(ctx, e.Ledger())
	require.NoError(t, err)
	require.Len(t, snap.Outbox, 5)
	require.Equal(t, uint64(0), snap.State.Consumers[mcpsync.DefaultConsumer])
	require.Equal(t, uint64(1), snap.State.First)
	snap.Outbox = snap.Outbox[2:] // entries 1 and 2 are missing; nothing says why

	into := mcpsync.NewMemoryLedger(nil)
	err = mcpsync.RestoreLedger(ctx, into, snap)
	if errors.Is(err, mcpsync.ErrSnapshotInvalid) {
		return
	}
	require.NoError(t, err)
	n, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: into})
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
