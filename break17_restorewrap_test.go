package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mcpsync/mcpsync"
)

// A snapshot is operator input (a JSON file carried between stores), so
// RestoreLedger must refuse one it cannot hold with a typed error. One whose
// outbox numbering is at the top of uint64 (State.Last = MaxUint64, a
// consumer at 0, nothing retained: each field within what ForRestore checks)
// panics the memory ledger's Restore: the first retained number, Last+1,
// wraps to 0, and trimming for the consumer indexes an empty chunk list.
// ForRestore refuses counters within RestoreCounterGap of their top
// (ErrCounterExhausted) but not the outbox numbering, the one counter it
// leaves out.
func TestBreak17RestoreOfAnOutboxAtTheTopOfItsNumberingPanics(t *testing.T) {
	snap := mcpsync.LedgerSnapshot{
		Schema: mcpsync.SchemaLedgerSnapshot, Records: map[string]*mcpsync.Record{}, Counters: map[mcpsync.Counter]uint64{},
		State: mcpsync.OutboxState{Last: math.MaxUint64, First: math.MaxUint64, Consumers: map[string]uint64{"index": 0}},
	}
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				t.Errorf("RestoreLedger panicked on a snapshot with its outbox at %d: %v", uint64(math.MaxUint64), p)
			}
		}()
		err = mcpsync.RestoreLedger(context.Background(), mcpsync.NewMemoryLedger(nil), snap)
	}()
	assert.True(t, errors.Is(err, mcpsync.ErrSnapshotInvalid) || errors.Is(err, mcpsync.ErrCounterExhausted),
		"refused with a typed error, got %v", err)
}
