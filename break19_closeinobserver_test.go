package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// An agent closes its client when a watched document changes (the outcome
// says Changed): Close from OnOutcome on a background read waits for that
// very read's goroutine, so it returns ErrCloseTimeout after CloseTimeout
// instead of closing. (Close from OnError is handled; OnOutcome's doc does
// not forbid Close.)
func TestBreak19CloseFromOnOutcomeTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/markdown", "v1")
		var c *mcpsync.Client
		closed := make(chan error, 1)
		subscribed := make(chan struct{})
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return srv.NewInProcessTransport(), nil
		}, &mcpsync.ClientOptions{Subject: alice, OnOutcome: func(o mcpsync.Outcome) {
			select {
			case <-subscribed:
			default:
				return // the first read, on Subscribe's goroutine
			}
			if o.Changed() {
				closed <- c.Close()
			}
		}})
		require.NoError(t, err)
		_, err = c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		close(subscribed)
		srv.Set(docURI, "text/markdown", "v2")
		require.NoError(t, <-closed, "Close from OnOutcome")
	})
}
