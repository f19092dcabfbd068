package boltledger_test

// Counters of the bolt ledger: no value is ever handed out twice, the
// outbox numbering included; a reservation or an append past the top of
// uint64 is refused, never wrapped round.

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
)

// Next promises no value is ever returned twice: a reservation past the top
// of the counter is refused, or, if granted, request id 1 is not handed out
// again.
func TestNextNeverWrapsAround(t *testing.T) {
	ctx := context.Background()
	l := open(t, nil)
	first, err := l.Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	if _, err = l.Next(ctx, ledger.CounterRequest, math.MaxUint64); err != nil {
		return // refused: fine
	}
	again, err := l.Next(ctx, ledger.CounterRequest, 1)
	if err == nil {
		assert.NotEqual(t, uint64(1), again, "request id 1 handed out twice")
	}
}

// The outbox numbering is a counter like the others: "entries are numbered
// consecutively" and a consumer's position only rises. Restored to the top
// of uint64, the ledger refuses the snapshot or the next append
// (ErrCounterExhausted), as Next refuses the same wrap, rather than
// numbering the entry 0 and leaving every consumer beyond every entry
// appended from then on.
func TestOutboxNumberingNeverWrapsToZero(t *testing.T) {
	l := open(t, nil)
	snap := ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{}, Counters: map[ledger.Counter]uint64{},
		State: ledger.OutboxState{Last: math.MaxUint64, First: math.MaxUint64, Consumers: map[string]uint64{"index": math.MaxUint64}},
	}
	err := ledger.Restore(ctx, l, snap)
	if errors.Is(err, ledger.ErrSnapshotInvalid) || errors.Is(err, ledger.ErrCounterExhausted) {
		return
	}
	require.NoError(t, err)
	first, ok, err := l.CompareAndSwap(ctx, "file:///a", 0, &ledger.Record{Revision: 1},
		[]ledger.OutboxEntry{{Schema: ledger.SchemaInvalidation, URI: "file:///a", Reason: ledger.InvalidateUpdated}})
	if err != nil {
		assert.ErrorIs(t, err, ledger.ErrCounterExhausted)
		return
	}
	require.True(t, ok)
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	t.Errorf("the append after entry %d was numbered %d; the outbox's last is now %d, its consumer at %d",
		uint64(math.MaxUint64), first, st.Last, st.Consumers["index"])
}
