package pgledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// endsAfterCheck is a context whose deadline passes right after Renew
// first looks at it: the caller's timeout ends while Renew is under way,
// as any per-call timeout (or Shard.Run's stop) may.
type endsAfterCheck struct {
	context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func (c *endsAfterCheck) Err() error {
	err := c.Context.Err()
	c.once.Do(c.cancel)
	return err
}

// A live worker holds a lease with an hour left and renews it. One Renew
// is given up on (its context ends) while it pings the liveness
// connection: liveness.ensure takes the failed Ping, caused by the
// caller's context and not by a lost session, for a dead connection and
// closes it, freeing the advisory lock, and the reconnect fails on the
// same ended context. The worker's membership row now names a lock
// nobody holds, so gone() lists a worker that is alive and well, and
// another worker takes its lease at once, an hour early. Before liveness,
// a Renew given up on cost nothing: the leases stayed until their TTL.
// What a user sees: a Renew that timed out makes the worker lose every
// key it holds to the others within a round (its writes then fail with
// ErrNotLeaseholder), though its process and its sessions are fine.
func TestBreak23RenewGivenUpOnKillsTheWorkersLiveness(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	w, other := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const key = "file:///docs/a.md"
	_, err := w.Acquire(ctx, key)
	require.NoError(t, err)
	for _, l := range []*pgledger.Ledger{w, other} {
		_, err := l.Renew(ctx)
		require.NoError(t, err)
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = w.Renew(&endsAfterCheck{Context: rctx, cancel: cancel})
	require.ErrorIs(t, err, context.Canceled, "the Renew given up on fails, as it may")

	members, err := other.Members(ctx)
	require.NoError(t, err)
	assert.Contains(t, members, w.Worker(), "a worker whose Renew was given up on is alive: its process and sessions are fine")
	_, err = other.Acquire(ctx, key)
	require.ErrorIs(t, err, pgledger.ErrLeaseHeld, "the lease has an hour left and its holder lives")
}
