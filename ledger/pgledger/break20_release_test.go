package pgledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A worker shutting down lets its leases go with a context that already
// ended (or the database call fails): Release reports the error, but it has
// already forgotten the lease, so the lease stays held in the database for
// its whole TTL, and every retry of Release returns nil without doing
// anything. The worker cannot even take its own lease again.
func TestBreak20ReleaseThatFailedCannotBeRetried(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w, other := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const key = "file:///a"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, w.Release(done, key), "the release did not happen")

	require.NoError(t, w.Release(ctx, key), "retrying the release")
	_, err = other.Acquire(ctx, key)
	require.NoError(t, err, "a Release retried until it returned nil must have let the lease go; it is held for the whole TTL instead")
}

// Same, without retrying Release: the worker's own re-Acquire is refused as
// if another worker held the lease.
func TestBreak20ReleaseThatFailedLocksOutItsOwnWorker(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w := fenced(t, conn, schema, time.Hour)
	const key = "file:///a"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, w.Release(done, key))

	_, err = w.Acquire(ctx, key)
	require.NoError(t, err, "the worker that still holds the lease in the database cannot take it again")
}
