package ledgertest

import (
	"iter"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// testSharedConsumer holds a consumer name that several workers consume
// under (each with an engine of its own on the ledger) to one position,
// shared: entries a peer acknowledged are passed by the name, not lost,
// and not handed out again once the name passed them; a gap is reported
// only for entries the retention bound dropped before the name passed
// them, and a worker goes on once a peer acknowledged past the gap.
func testSharedConsumer(t *testing.T, open Opener) {
	const name = "indexer"
	workers := func(t *testing.T, l ledger.Ledger) (a, b *mcpsync.Engine) {
		a, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		b, err = mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		return a, b
	}
	// pull starts e consuming as name; the caller stops it.
	pull := func(t *testing.T, e *mcpsync.Engine) func() (ledger.OutboxEntry, error) {
		next, stop := iter.Pull2(e.Consume(ctx, name))
		t.Cleanup(stop)
		return func() (ledger.OutboxEntry, error) {
			en, err, ok := next()
			require.True(t, ok, "the sequence ended")
			return en, err
		}
	}

	for _, tc := range []struct {
		name   string
		others []string // other consumers, which keep every entry retained
	}{
		{"PeerAcknowledgedAheadAndNoOneElseHoldsTheEntries", nil},
		{"PeerAcknowledgedAheadAndAnotherConsumerHoldsTheEntries", []string{"audit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := open(t, nil)
			a, b := workers(t, l)
			for _, other := range tc.others {
				require.NoError(t, l.Ack(ctx, other, 0))
			}
			write(t, l, "a", 1, 1)
			next := pull(t, a)
			en, err := next()
			require.NoError(t, err)
			require.Equal(t, uint64(1), en.Seq)

			write(t, l, "a", 2, 2) // entries 2 and 3
			require.NoError(t, b.Acknowledge(ctx, name, 3), "the peer applied 1 to 3")
			write(t, l, "a", 3, 1) // entry 4

			en, err = next()
			require.NoError(t, err, "a peer's acknowledgement is no gap")
			assert.Equal(t, uint64(4), en.Seq, "entries the name passed are not handed out again")
			require.NoError(t, a.Acknowledge(ctx, name, en.Seq))
			st, err := l.OutboxState(ctx)
			require.NoError(t, err)
			assert.Equal(t, uint64(4), st.Consumers[name], "one position for the name")
			assert.Zero(t, st.Dropped)
		})
	}

	t.Run("GapOnlyForWhatTheBoundDroppedBeforeTheNamePassedIt", func(t *testing.T) {
		l := open(t, &ledger.Options{OutboxRetention: 2})
		a, b := workers(t, l)
		write(t, l, "a", 1, 1)
		next := pull(t, a)
		en, err := next()
		require.NoError(t, err)
		require.Equal(t, uint64(1), en.Seq)
		require.NoError(t, b.Acknowledge(ctx, name, 2)) // ahead of the newest entry: stops at 1
		for rev := uint64(2); rev <= 5; rev++ {
			write(t, l, "a", rev, 1) // entries 2 to 5; the bound keeps 4 and 5
		}
		_, err = next()
		var gap *ledger.OutboxGapError
		require.ErrorAs(t, err, &gap)
		assert.Equal(t, ledger.OutboxGapError{Consumer: name, From: 2, Through: 3}, *gap,
			"entry 1, which the name passed, is not lost")

		// Progress: once a worker rebuilt and acknowledged the gap, the
		// name goes on, in a worker that had not seen the gap too.
		require.NoError(t, a.Acknowledge(ctx, name, gap.Through))
		en, err = pull(t, b)()
		require.NoError(t, err)
		assert.Equal(t, uint64(4), en.Seq)
	})

	t.Run("NoGapOnceAPeerAcknowledgedPastIt", func(t *testing.T) {
		l := open(t, &ledger.Options{OutboxRetention: 2})
		a, b := workers(t, l)
		write(t, l, "a", 1, 1)
		next := pull(t, a)
		en, err := next()
		require.NoError(t, err)
		require.Equal(t, uint64(1), en.Seq)
		for rev := uint64(2); rev <= 5; rev++ {
			write(t, l, "a", rev, 1) // the bound drops 2 and 3
		}
		require.NoError(t, b.Acknowledge(ctx, name, 5), "the peer rebuilt and passed everything")
		write(t, l, "a", 6, 1)
		en, err = next()
		require.NoError(t, err, "the gap was the name's, and the name is past it")
		assert.Equal(t, uint64(6), en.Seq)
	})
}
