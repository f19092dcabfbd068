package mcpsync_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A ledgerSnapshot.v1 has one consumer, the one PullOutbox, AckOutbox and
// OutboxCursor act for, and its position in Acked. Upgrade says "its one
// consumer becomes the default consumer", but it files the position under
// the consumer "" while DefaultConsumer is "default". After RestoreLedger:
// OutboxCursor says 0, so the worker re-applies what it had acknowledged;
// and the consumer "" can never be acknowledged (Acknowledge refuses an
// empty name, the command's --consumer too), so it pins every entry from
// its position on until the retention bound drops them and reports them
// lost.
func TestBreak17VersionOneSnapshotLosesTheDefaultConsumersPosition(t *testing.T) {
	ctx := context.Background()
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	break15AcceptN(t, e, doc, 3)
	snap, err := mcpsync.ExportLedger(ctx, e.Ledger())
	require.NoError(t, err)
	require.Len(t, snap.Outbox, 3)
	// The same state as an older release exported it: its single consumer
	// had acknowledged entries 1 and 2.
	v1 := mcpsync.LedgerSnapshot{Schema: mcpsync.SchemaLedgerSnapshotV1, Records: snap.Records,
		Revoked: snap.Revoked, Outbox: snap.Outbox[2:], Acked: 2}

	l, err := mcpsync.NewMemoryLedgerFrom(v1)
	require.NoError(t, err)
	n, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	cursor, err := n.OutboxCursor()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), cursor, "the v1 consumer's acknowledged position is the default consumer's")

	require.NoError(t, n.AckOutbox(3)) // the worker applied entry 3
	st, err := n.OutboxState(ctx)
	require.NoError(t, err)
	t.Logf("consumers after restore and AckOutbox(3): %v, first retained %d, last %d", st.Consumers, st.First, st.Last)
	assert.NotContains(t, st.Consumers, "", "a consumer nobody can name or acknowledge for")
	assert.Greater(t, st.First, st.Last, "every consumer passed entry 3: nothing should stay retained")
}
