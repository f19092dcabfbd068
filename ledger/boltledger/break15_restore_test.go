package boltledger_test

import (
	"context"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// WaitOutbox blocks "until an entry numbered above after was appended". A
// consumer that waits on an empty ledger while a snapshot is restored into
// it is never told: the restored entries sit there until some later write
// happens to wake it.
func TestBreak15WaitOutboxSleepsThroughARestore(t *testing.T) {
	dir := t.TempDir()
	src, err := boltledger.Open(filepath.Join(dir, "src.db"), nil)
	require.NoError(t, err)
	defer src.Close()
	ctx := context.Background()
	_, ok, err := src.CompareAndSwap(ctx, "file:///a", 0, &mcpsync.Record{Revision: 1},
		[]mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: "file:///a", Reason: mcpsync.InvalidateUpdated}})
	require.NoError(t, err)
	require.True(t, ok)
	snap, err := src.Export(ctx)
	require.NoError(t, err)

	synctest.Test(t, func(t *testing.T) {
		into, err := boltledger.Open(filepath.Join(dir, "into.db"), nil)
		require.NoError(t, err)
		defer into.Close()
		wctx, cancel := context.WithCancel(t.Context())
		woke := make(chan error, 1)
		go func() { woke <- into.WaitOutbox(wctx, 0) }()
		synctest.Wait()
		require.NoError(t, mcpsync.RestoreLedger(ctx, into, snap))
		synctest.Wait()
		select {
		case err := <-woke:
			assert.NoError(t, err)
		default:
			st, _ := into.OutboxState(ctx)
			t.Errorf("WaitOutbox(0) still asleep with entry %d restored", st.Last)
		}
		cancel()
		synctest.Wait()
	})
}

// spinCounter counts WaitOutbox calls: Consume is meant to sleep in it.
type spinCounter struct {
	mcpsync.Ledger
	waits atomic.Int64
}

func (s *spinCounter) WaitOutbox(ctx context.Context, after uint64) error {
	s.waits.Add(1)
	return s.Ledger.WaitOutbox(ctx, after)
}

// Restore accepts a snapshot whose outbox stops short of State.Last (it
// checks order and the upper bound, not the end). On the bolt ledger the
// missing entries are neither there nor counted as dropped, so Consume
// spins: WaitOutbox returns at once (Last is above the consumer), Outbox
// returns nothing, no gap is reported, and round it goes, a core at 100%
// until its context ends.
func TestBreak15RestoreOfAShortOutboxMakesConsumeSpin(t *testing.T) {
	ctx := context.Background()
	src := open(t, nil)
	for rev := uint64(1); rev <= 3; rev++ {
		_, ok, err := src.CompareAndSwap(ctx, "file:///a", rev-1, &mcpsync.Record{Revision: rev},
			[]mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: "file:///a", Reason: mcpsync.InvalidateUpdated}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	snap, err := src.Export(ctx)
	require.NoError(t, err)
	snap.Outbox = snap.Outbox[:1] // entries 2 and 3 missing, State.Last still 3

	into := open(t, nil)
	err = mcpsync.RestoreLedger(ctx, into, snap)
	assert.Error(t, err, "a snapshot whose outbox ends at %d, short of its last entry %d", 1, snap.State.Last)
	if err != nil {
		return
	}
	counted := &spinCounter{Ledger: into}
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: counted})
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var got []uint64
	var end error
	for en, err := range e.Consume(cctx, "index") {
		if err != nil {
			end = err
			break
		}
		got = append(got, en.Seq)
	}
	t.Logf("Consume yielded %v, ended with %v after %d WaitOutbox calls", got, end, counted.waits.Load())
	assert.Less(t, counted.waits.Load(), int64(10), "Consume busy-looped instead of sleeping or reporting a gap")
}

// Next promises no value is ever returned twice; a reservation past the top
// of the counter wraps the stored value round and hands out 1 again.
func TestBreak15NextWrapsAroundAndReusesValues(t *testing.T) {
	ctx := context.Background()
	l := open(t, nil)
	first, err := l.Next(ctx, mcpsync.CounterRequest, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	if _, err = l.Next(ctx, mcpsync.CounterRequest, math.MaxUint64); err != nil {
		return // refused: fine
	}
	again, err := l.Next(ctx, mcpsync.CounterRequest, 1)
	if err == nil {
		assert.NotEqual(t, uint64(1), again, "request id 1 handed out twice")
	}
}
