package pgledger

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// The outbox keeps "at most LedgerOptions.OutboxRetention entries". Each
// write trims at most trimStep (1,024) entries, which keeps the bound for
// any write appending up to 1,024 entries, as every CompareAndSwap here
// does. But writes made at once now share one compare_and_swap_all
// statement, which appends all their entries and still trims only 1,024:
// two writes of 600 entries leave 176 past a bound of 10, and while a busy
// worker's statements carry more than 1,024 entries each (64 writes of 17
// entries are enough), every statement adds more than it trims and the
// outbox grows without bound; with the outbox turned off (a negative
// retention) the entries past 1,024 are kept all the same. What a user
// sees: OutboxState.Last-First+1 far beyond OutboxRetention, growing with
// load, where the same writes made one at a time keep it.
//
// The statement is the one the batcher sends for two writes that queued
// together (swapAll, as TestSwapAllDecidesEachKey calls it).
func TestBreak23BatchedWritesOutgrowTheRetentionBound(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	ctx := context.Background()
	const retain, each = 10, 600
	l, err := Open(ctx, conn, &Options{Schema: schema, Ledger: &mcpsync.LedgerOptions{OutboxRetention: retain}})
	require.NoError(t, err)
	defer l.Close()
	write := func(key string) swap {
		rec, err := mcpsync.EncodeRecord(&mcpsync.Record{Revision: 1, State: mcpsync.StateActive})
		require.NoError(t, err)
		s := swap{key: key, record: rec}
		for range each {
			b, err := encodeEntry(mcpsync.OutboxEntry{Schema: mcpsync.SchemaInvalidation, URI: key, Reason: mcpsync.InvalidateUpdated})
			require.NoError(t, err)
			s.entries = append(s.entries, b)
		}
		return s
	}

	// One at a time, a write of 600 entries keeps the bound.
	_, _, err = l.CompareAndSwap(ctx, "file:///alone", 0, &mcpsync.Record{Revision: 1, State: mcpsync.StateActive},
		make([]mcpsync.OutboxEntry, each))
	require.NoError(t, err)
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Last-st.First+1, uint64(retain), "a write alone keeps the bound")

	var kept []uint64
	for round := range 4 {
		got, err := l.swapAll(ctx, []swap{write(fmt.Sprintf("file:///a%d", round)), write(fmt.Sprintf("file:///b%d", round))})
		require.NoError(t, err)
		require.True(t, got[0].stored && got[1].stored)
		st, err := l.OutboxState(ctx)
		require.NoError(t, err)
		kept = append(kept, st.Last-st.First+1)
	}
	for round, n := range kept {
		require.LessOrEqual(t, n, uint64(retain),
			"after each statement of two batched writes the outbox keeps %v entries, beyond its bound of %d (round %d)", kept, retain, round)
	}
}
