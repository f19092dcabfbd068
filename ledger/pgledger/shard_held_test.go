package pgledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A take whose subscribe fails hands the lease back; when that release
// fails too (the connection was terminated), the worker holds the lease of
// a URI it never subscribed. Its Shard must subscribe it at a later round,
// not pass it over as already its own: otherwise the URI stays unread, its
// lease renewed for ever.
func TestShardSubscribesALeaseItHoldsButNeverRead(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	const key = "file:///docs/held.md"
	r := newShardRig(t, conn, schema, pgledger.LeaseOptions{TTL: time.Minute}, key, mcpsync.ClientOptions{PingEvery: -1})

	// The state a failed subscribe and a failed release leave behind.
	_, err := r.ledger.Acquire(r.ctx, key)
	require.NoError(t, err)

	r.run(t)
	// The server counts its read before the worker accepts it: wait for
	// the worker's copy.
	require.True(t, waitFor(10*time.Second, func() bool { return r.srv.Subscribed(key) && r.text() == "v1" }),
		"the URI whose lease the worker held was never subscribed nor read")
}
