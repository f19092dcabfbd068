package mcpsync_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// acceptN subscribes doc and accepts n changed versions, one outbox entry
// each.
func break15AcceptN(t *testing.T, e *mcpsync.Engine, doc string, n int) {
	t.Helper()
	if e.SessionGeneration() == 0 {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
		_, err = e.Subscribe(doc, "user:alice")
		require.NoError(t, err)
		_, err = e.Activate(doc, mcpsync.ModePush)
		require.NoError(t, err)
	}
	for i := range n {
		tk, err := e.IssueTicket(doc, mcpsync.TriggerNotification)
		require.NoError(t, err)
		out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: fmt.Sprintf("v%d-%s", i, t.Name())}}))
		require.NoError(t, err)
		require.True(t, out.Accepted)
	}
}

// The default consumer (PullOutbox / AckOutbox / OutboxCursor) is a named
// consumer like the others, yet when the retention bound overtakes it
// PullOutbox hands out what is left as if nothing was lost: no
// *OutboxGapError, no error at all. LedgerOptions.OutboxRetention promises
// "a consumer that had not passed them gets an *OutboxGapError".
func TestBreak15PullOutboxHidesEntriesTheRetentionBoundDropped(t *testing.T) {
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: mcpsync.NewMemoryLedger(&mcpsync.LedgerOptions{OutboxRetention: 3})})
	require.NoError(t, err)
	require.NoError(t, e.AckOutbox(0)) // the default consumer is registered
	break15AcceptN(t, e, doc, 5)

	st, err := e.OutboxState(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Dropped, "entries 1 and 2 were dropped before the default consumer passed them")
	require.Equal(t, uint64(0), st.Consumers[mcpsync.DefaultConsumer])

	cursor, err := e.OutboxCursor()
	require.NoError(t, err)
	entries, err := e.PullOutbox(cursor, 0)
	var gap *mcpsync.OutboxGapError
	if assert.ErrorAs(t, err, &gap, "PullOutbox after the bound overtook the default consumer") {
		assert.Equal(t, uint64(1), gap.From)
		assert.Equal(t, uint64(2), gap.Through)
	}
	if err == nil {
		t.Logf("PullOutbox(%d) returned entries %d..%d and no error", cursor, entries[0].Seq, entries[len(entries)-1].Seq)
	}
}

// Consume promises "Cancelling ctx ends the sequence with ctx's error". On
// the memory ledger (whose methods ignore their context) a consumer whose
// context is already cancelled is registered and handed the whole backlog
// before the cancellation is noticed; on the bolt ledger the same call ends
// at once.
func TestBreak15ConsumeOnMemoryLedgerIgnoresACancelledContext(t *testing.T) {
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	break15AcceptN(t, e, doc, 5)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var yielded []uint64
	var firstErr error
	for en, err := range e.Consume(ctx, "index") {
		if err != nil {
			firstErr = err
			break
		}
		yielded = append(yielded, en.Seq)
	}
	assert.ErrorIs(t, firstErr, context.Canceled)
	assert.Empty(t, yielded, "entries yielded under a cancelled context")
	st, err := e.OutboxState(context.Background())
	require.NoError(t, err)
	assert.NotContains(t, st.Consumers, "index", "a cancelled Consume registered its consumer (and now pins the outbox)")
}

// Restore's validation (LedgerSnapshot.check) accepts a snapshot whose
// outbox stops short of State.Last; the memory ledger then believes it holds
// entries it has not got, and the first read of the outbox panics with an
// index out of range, taking the worker down.
func TestBreak15MemoryRestoreOfAShortOutboxPanicsOnRead(t *testing.T) {
	ctx := context.Background()
	src := mcpsync.NewMemoryLedger(nil)
	for rev := uint64(1); rev <= 3; rev++ {
		_, ok, err := src.CompareAndSwap(ctx, "file:///a", rev-1, &mcpsync.Record{Revision: rev},
			[]mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: "file:///a", Reason: mcpsync.InvalidateUpdated}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	snap, err := src.Export(ctx)
	require.NoError(t, err)
	snap.Outbox = snap.Outbox[:1] // entries 2 and 3 missing, State.Last still 3

	into := mcpsync.NewMemoryLedger(nil)
	err = mcpsync.RestoreLedger(ctx, into, snap)
	if err != nil {
		return // refused: fine
	}
	assert.NotPanics(t, func() {
		_, err = into.Outbox(ctx, 0, 0)
	}, "a snapshot Restore accepted makes Outbox panic")
}
