package mcpsync_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// isRevocation reports whether err says the client's principal is revoked,
// by either sentinel.
func isRevocation(err error) bool {
	return errors.Is(err, mcpsync.ErrRevoked) || errors.Is(err, mcpsync.ErrSubjectRevoked)
}

// revokedWorker runs a worker on ledger that subscribes doc and stops, then
// revokes alice in the ledger while no worker runs, and returns a new client
// of alice on the ledger, as a worker restarted with the old credentials.
func revokedWorker(t *testing.T, srv *mcpsynctest.Server, doc string) *mcpsync.Client {
	t.Helper()
	ledger := mcpsync.NewMemoryLedger(nil)
	dial := func(context.Context) (transport.Interface, error) { return srv.NewInProcessTransport(), nil }
	first, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: engineOn(t, ledger), Subject: alice})
	require.NoError(t, err)
	_, err = first.Subscribe(t.Context(), doc)
	require.NoError(t, err)
	require.NoError(t, first.WaitForSync(t.Context()))
	require.NoError(t, first.Close())

	_, err = engineOn(t, ledger).RevokeSubject(alice)
	require.NoError(t, err)

	c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: engineOn(t, ledger), Subject: alice})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A worker restarted with credentials revoked while it was down resumes its
// subscriptions, and every read it sends is refused SUBJECT_REVOKED. Nothing
// says so: Health stays UP, OnError hears nothing, and WaitForSync, which
// returns once every watched URI had "a definite answer", waits until its
// context ends, for a read the fence can never accept. Progress (DESIGN.md)
// lets a subscription fail to converge only visibly.
func TestBreak18WaitForSyncOfARevokedPrincipalWaitsForEver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc = "file:///docs/handbook.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(doc, "text/markdown", "v1")
		c := revokedWorker(t, srv, doc)

		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		err := c.WaitForSync(ctx)
		require.Error(t, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "WaitForSync waited an hour for a revoked principal's reads")
		assert.True(t, isRevocation(err), "WaitForSync's error does not say the principal is revoked: %v", err)
	})
}

// Subscribe sends the first read before it returns and says when the URI
// is not found; a first read refused because the principal is revoked is
// reported as nil, and the caller waits for a version that cannot come.
func TestBreak18SubscribeOfARevokedPrincipalSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc, other = "file:///docs/handbook.md", "file:///docs/benefits.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(doc, "text/markdown", "v1")
		srv.Set(other, "text/markdown", "v1")
		c := revokedWorker(t, srv, doc)

		_, err := c.Subscribe(t.Context(), other)
		assert.True(t, isRevocation(err), "Subscribe of a revoked principal returned %v", err)
	})
}
