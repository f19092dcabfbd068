package boltledger_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The outbox numbering is a counter like the others: "entries are numbered
// consecutively" and a consumer's position only rises. Restored (or grown)
// to the top of uint64, the bolt ledger's next append wraps it: the entry is
// numbered 0 and the outbox's Last goes back from MaxUint64 to 0, so every
// consumer (at MaxUint64) is beyond every entry appended from then on and
// never sees one. Next refuses the same wrap with ErrCounterExhausted; the
// append, or the restore, must refuse it too.
func TestBreak17OutboxNumberingWrapsToZero(t *testing.T) {
	l := open(t, nil)
	snap := mcpsync.LedgerSnapshot{
		Schema: mcpsync.SchemaLedgerSnapshot, Records: map[string]*mcpsync.Record{}, Counters: map[mcpsync.Counter]uint64{},
		State: mcpsync.OutboxState{Last: math.MaxUint64, First: math.MaxUint64, Consumers: map[string]uint64{"index": math.MaxUint64}},
	}
	err := mcpsync.RestoreLedger(ctx, l, snap)
	if errors.Is(err, mcpsync.ErrSnapshotInvalid) || errors.Is(err, mcpsync.ErrCounterExhausted) {
		return
	}
	require.NoError(t, err)
	first, ok, err := l.CompareAndSwap(ctx, "file:///a", 0, &mcpsync.Record{Revision: 1},
		[]mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: "file:///a", Reason: mcpsync.InvalidateUpdated}})
	if err != nil {
		assert.ErrorIs(t, err, mcpsync.ErrCounterExhausted)
		return
	}
	require.True(t, ok)
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	t.Errorf("the append after entry %d was numbered %d; the outbox's last is now %d, its consumer at %d",
		uint64(math.MaxUint64), first, st.Last, st.Consumers["index"])
}
