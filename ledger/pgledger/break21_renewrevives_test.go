package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A Shard renews on a goroutine of its own while its round hands keys over
// (ReleaseAll of the keys now assigned elsewhere, Release after a failed
// subscribe or of an unlisted key). Renew copies Owned() first, then, in
// its transaction, heartbeats and renews every copied key at its copied
// epoch. A Release that lands between the copy and the renew UPDATE sets
// the lease to '-infinity', but keeps owner and epoch, so the renew UPDATE
// (WHERE owner = me AND epoch = E) matches it and extends it by a whole
// TTL: the released lease is held again in the database, by a worker that
// no longer believes it holds it (it is not in Owned, Renew does not even
// report it lost, and nothing renews it again). The worker the key was
// handed to is refused (ErrLeaseHeld) for the whole TTL, and so is the
// releasing worker itself: the URI is unread by anyone for a TTL, which is
// exactly the handover delay the change under review set out to remove.
// Property violated: a lease released is never still held.
//
// Deterministic: the test holds the releasing worker's members row locked,
// so Renew's heartbeat waits inside its transaction after Renew copied
// Owned; the Release runs meanwhile on the control pool's other connection.
func TestBreak21RenewRevivesALeaseReleasedMeanwhile(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	other := fenced(t, conn, schema, time.Hour)
	const key = "file:///handed-over"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)
	_, err = w.Renew(ctx) // w's members row exists
	require.NoError(t, err)

	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	killer, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { killer.Close(context.Background()) })

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+schemaTable(schema, "members")+" WHERE worker = $1 FOR UPDATE", w.Worker())
	require.NoError(t, err)
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))

	renewed := make(chan error, 1)
	var lost []string
	go func() {
		var err error
		lost, err = w.Renew(ctx)
		renewed <- err
	}()
	// Renew copied Owned and waits on its heartbeat.
	waitForBackend(t, killer, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", holder)

	require.NoError(t, w.Release(ctx, key), "the round hands the key over")
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-renewed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Renew did not return")
	}
	_, believed := w.Owned()[key]
	t.Logf("after Release and the racing Renew: w believes it holds the key: %v; Renew reported lost: %v", believed, lost)

	var expired bool
	require.NoError(t, db.QueryRow(ctx, "SELECT expires_at <= now() FROM "+schemaTable(schema, "leases")+" WHERE key = $1", key).Scan(&expired))

	_, errOther := other.Acquire(ctx, key)
	_, errSelf := w.Acquire(ctx, key)
	require.True(t, expired && errOther == nil,
		"Release returned nil, yet the lease is held again in the database (expired: %v) by a worker that does not "+
			"believe it holds it (in Owned: %v): the worker it was handed to is refused: %v; the releasing worker "+
			"itself is refused too: %v", expired, believed, errOther, errSelf)
}
