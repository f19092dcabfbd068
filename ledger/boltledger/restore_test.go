package boltledger_test

// Restoring a snapshot into a bolt ledger: a consumer waiting on the ledger
// is woken by what the restore brings, and a snapshot whose outbox stops
// short of its last entry is refused.

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// WaitOutbox blocks "until an entry numbered above after was appended". A
// consumer that waits on an empty ledger while a snapshot is restored into
// it is woken by the restored entries, not left asleep until some later
// write happens to wake it.
func TestWaitOutboxWakesOnARestore(t *testing.T) {
	dir := t.TempDir()
	src, err := boltledger.Open(filepath.Join(dir, "src.db"), nil)
	require.NoError(t, err)
	defer src.Close()
	ctx := context.Background()
	_, ok, err := src.CompareAndSwap(ctx, "file:///a", 0, &ledger.Record{Revision: 1},
		[]ledger.OutboxEntry{{Schema: ledger.SchemaInvalidation, URI: "file:///a", Reason: ledger.InvalidateUpdated}})
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
		require.NoError(t, ledger.Restore(ctx, into, snap))
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
	ledger.Ledger
	waits atomic.Int64
}

func (s *spinCounter) WaitOutbox(ctx context.Context, after uint64) error {
	s.waits.Add(1)
	return s.Ledger.WaitOutbox(ctx, after)
}

// A snapshot whose outbox stops short of State.Last (entries 2 and 3
// missing) is refused by ledger.Restore. Were it restored, the missing
// entries would be neither there nor counted as dropped, and Consume would
// spin (WaitOutbox returning at once, Outbox returning nothing, no gap
// reported); if it is restored all the same, Consume sleeps or reports a
// gap rather than busy-looping.
func TestRestoreOfAShortOutboxIsRefused(t *testing.T) {
	ctx := context.Background()
	src := open(t, nil)
	for rev := uint64(1); rev <= 3; rev++ {
		_, ok, err := src.CompareAndSwap(ctx, "file:///a", rev-1, &ledger.Record{Revision: rev},
			[]ledger.OutboxEntry{{Schema: ledger.SchemaInvalidation, URI: "file:///a", Reason: ledger.InvalidateUpdated}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	snap, err := src.Export(ctx)
	require.NoError(t, err)
	snap.Outbox = snap.Outbox[:1] // entries 2 and 3 missing, State.Last still 3

	into := open(t, nil)
	err = ledger.Restore(ctx, into, snap)
	assert.Error(t, err, "a snapshot whose outbox ends at %d, short of its last entry %d", 1, snap.State.Last)
	if err != nil {
		return
	}
	counted := &spinCounter{Ledger: into}
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: counted})
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
