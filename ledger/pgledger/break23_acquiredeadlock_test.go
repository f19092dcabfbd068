package pgledger_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Two workers take new keys at once (a Shard builds its chunk from a map,
// so the order of the keys it passes is random): AcquireAll([a, m, b]) on
// one, AcquireAll([b, m, a]) on the other. The docs promise that "every
// statement that locks many lease rows or records locks them in key
// order, ... so none waits on another in a circle", and lockTakeable does
// order the rows that exist. But the keys nobody holds yet are INSERTed in
// the order the caller gave them, and an INSERT ... ON CONFLICT of a key
// another transaction inserted and has not committed waits for that
// transaction. While a third transaction still holds m uncommitted (a
// third worker's AcquireAll of it, here a bare INSERT), both workers
// insert their first key and queue on m; when m comes free one of them
// takes it and waits on the other's first key, which waits on m: a
// circle, and PostgreSQL fails one of the AcquireAll calls with SQLSTATE
// 40P01. What a user sees: "pgledger: acquire: ERROR: deadlock detected".
//
// Deterministic: the test waits, in pg_stat_activity, for both workers to
// queue on the third transaction before ending it.
func TestBreak23AcquireAllOfNewKeysInOtherOrdersDeadlocks(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w1 := fenced(t, conn, schema, time.Hour)
	w2 := fenced(t, conn, schema, time.Hour)
	const a, m, b = "file:///a", "file:///m", "file:///b"

	holder, watcher := admin(t, w1), admin(t, w1)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "INSERT INTO "+schemaTable(schema, "leases")+
		" (key, owner, epoch, expires_at) VALUES ($1, $2, 1, now() + interval '1 hour')", m, uuid.New())
	require.NoError(t, err)

	errs := make(chan error, 2)
	go func() { _, err := w1.AcquireAll(ctx, []string{a, m, b}); errs <- err }()
	waitLockWaiters(t, watcher, schema, "", 1)
	go func() { _, err := w2.AcquireAll(ctx, []string{b, m, a}); errs <- err }()
	waitLockWaiters(t, watcher, schema, "", 2)
	require.NoError(t, tx.Rollback(ctx)) // m is free: the third worker gave up

	for range 2 {
		select {
		case err := <-errs:
			require.NoError(t, err, "two workers taking free keys must never deadlock")
		case <-time.After(30 * time.Second):
			t.Fatal("an AcquireAll did not return")
		}
	}
}
