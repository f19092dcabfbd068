package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A Ledger is "safe for concurrent use". One worker calls Acquire(K) (a
// round, or any caller extending a lease it holds) while another of its
// goroutines calls Release(K) (a failed subscribe handing K back, a
// shutdown). ReleaseAll forgets K locally first, then runs its UPDATE;
// AcquireAll read the held epoch before and copies what its statement
// returned into Owned after. When the acquire's UPDATE runs first in the
// database (it extends K at its epoch) and the release's UPDATE second (K
// expires at once), but the acquire's copy into Owned lands after the
// release's forget, the two calls end in a state no order of them
// produces: the database has K released, the worker believes it holds K.
// Another worker then takes K while this one still lists it in Owned, and
// the next Renew of this worker, if it comes first, revives the released
// lease (same owner, same epoch). Property violated: a lease released is
// never still believed held.
//
// Deterministic: the test holds K's row locked, so the acquire waits on it
// first and the release behind it; PostgreSQL grants the row in that order.
func TestBreak21AcquireRacingReleaseLeavesReleasedLeaseBelievedHeld(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	other := fenced(t, conn, schema, time.Hour)
	const key = "file:///k"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	watcher, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { watcher.Close(context.Background()) })
	leases := schemaTable(schema, "leases")

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+leases+" WHERE key = $1 FOR UPDATE", key)
	require.NoError(t, err)

	waiting := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var c int
			require.NoError(t, watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", schema).Scan(&c))
			if c >= n {
				return
			}
		}
		t.Fatalf("fewer than %d statements wait on the row", n)
	}
	acquired := make(chan error, 1)
	go func() { _, err := w.Acquire(ctx, key); acquired <- err }()
	waiting(1)
	released := make(chan error, 1)
	go func() { released <- w.Release(ctx, key) }()
	waiting(2)
	require.NoError(t, tx.Commit(ctx))
	for _, ch := range []chan error{acquired, released} {
		select {
		case err := <-ch:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a lease call did not return")
		}
	}

	var expired bool
	require.NoError(t, db.QueryRow(ctx, "SELECT expires_at <= now() FROM "+leases+" WHERE key = $1", key).Scan(&expired))
	epoch, believed := w.Owned()[key]
	took, errOther := other.Acquire(ctx, key)
	require.False(t, expired && believed,
		"the lease is released in the database (another worker took it at epoch %d, err %v), yet the worker still "+
			"believes it holds it at epoch %d", took, errOther, epoch)
}
