package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// AcquireAll locks, in key order, the rows that are takeable when its
// first statement (lockTakeable) reads them, then its second statement
// (acquire) updates every row takeable when *it* reads them. A row that
// became takeable in between - its holder's liveness session ended, or its
// lease expired - is locked by the UPDATE alone, in the order the join
// yields, not key order. Meanwhile that holder, still alive, Renews and
// locks its own rows in key order (lockOwn). The two wait on each other
// in a circle and PostgreSQL fails one with SQLSTATE 40P01, though the
// docs promise that every statement locking many lease rows locks them in
// key order "so none waits on another in a circle". A stress run (two
// workers with a short TTL looping AcquireAll/Renew/ReleaseAll beside
// batched writes) hits it several times in 20 s, in both AcquireAll and
// Renew. What a user sees: "pgledger: renew: ERROR: deadlock detected"
// (or "pgledger: acquire: ..."): the worker's renewal fails, and its keys
// may expire.
//
// Fixed by locking every row of the keys, takeable or not, in key order
// before the acquire.
//
// Deterministic: worker A holds 3, 1, 2 (taken in that order, so the
// UPDATE's join meets 3 first). B's AcquireAll([3, 1, z]) reads
// 1 and 3 as A's live leases and queues on z (takeable, held by the test).
// A's liveness session is ended. A renews: it locks 1 and queues on 2
// (held by the test). The test lets z go: B's second statement finds 1
// and 3 takeable (A looks gone), locks 3 and queues on 1. The test lets 2
// go: A locks 2 and queues on 3. Circle.
func TestBreak23RenewAndAcquireAllDeadlockOnLeasesThatTurnedTakeable(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const k1, k2, k3, z = "file:///1", "file:///2", "file:///3", "file:///z"
	leases := schemaTable(schema, "leases")
	_, err := a.Renew(ctx) // a member, its liveness lock recorded
	require.NoError(t, err)
	for _, k := range []string{k3, k1, k2} {
		_, err = a.Acquire(ctx, k)
		require.NoError(t, err)
	}

	watcher := admin(t, a)
	_, err = watcher.Exec(ctx, "INSERT INTO "+leases+" (key, owner, epoch, expires_at) VALUES ($1, $2, 1, now() - interval '1 hour')", z, uuid.New())
	require.NoError(t, err)
	hold := func(key string) pgx.Tx {
		c := admin(t, a)
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, "SELECT FROM "+leases+" WHERE key = $1 FOR UPDATE", key)
		require.NoError(t, err)
		return tx
	}

	holdZ := hold(z)
	acquired := make(chan error, 1)
	go func() { _, err := b.AcquireAll(ctx, []string{k3, k1, z}); acquired <- err }()
	waitLockWaiters(t, watcher, schema, "ANY($1) ORDER BY key", 1) // B's lock of every row of its keys, on z

	// A's liveness session ends; A lives on and renews.
	var ended int
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(pg_terminate_backend(k.pid)) FROM pg_locks AS k
		JOIN `+schemaTable(schema, "members")+` AS m
		ON k.classid = (m.alive_lock >> 32)::oid AND k.objid = (m.alive_lock & 4294967295)::oid
		WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1 AND m.worker = $1`, a.Worker()).Scan(&ended))
	require.Equal(t, 1, ended)
	hold2 := hold(k2)
	renewed := make(chan error, 1)
	go func() { _, err := a.Renew(ctx); renewed <- err }()
	waitLockWaiters(t, watcher, schema, "AND owner = $2 ORDER BY key", 1) // A's lockOwn, on 1 (B holds it)

	// B already holds every row its acquire updates (1 and 3, taken in key
	// order before z), so no row turns up for it out of order.
	require.NoError(t, holdZ.Rollback(ctx))
	require.NoError(t, hold2.Rollback(ctx))

	for range 2 {
		select {
		case err := <-acquired:
			require.NoError(t, err, "AcquireAll must not deadlock")
		case err := <-renewed:
			require.NoError(t, err, "Renew must not deadlock")
		case <-time.After(30 * time.Second):
			t.Fatal("a lease call did not return")
		}
	}
}
