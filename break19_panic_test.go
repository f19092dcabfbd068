package mcpsync_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A user's OnOutcome panics once, during Subscribe's synchronous first read
// (it runs on the caller's goroutine there). The caller recovers the panic
// and goes on. DESIGN.md: "user code (observers, guards) runs outside every
// lock, and a panic in it is a refusal, never a stuck URI". The URI's key
// lock is still held by the panicked Subscribe, so every later Subscribe or
// Unsubscribe of that URI blocks until its context ends.
func TestBreak19PanickingOnOutcomeInSubscribeWedgesTheURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/markdown", "v1")
		var panicked atomic.Bool
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return srv.NewInProcessTransport(), nil
		}, &mcpsync.ClientOptions{Subject: alice, OnOutcome: func(mcpsync.Outcome) {
			if panicked.CompareAndSwap(false, true) {
				panic("bug in the caller's prompt cache")
			}
		}})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		func() {
			defer func() { _ = recover() }()
			_, _ = c.Subscribe(t.Context(), docURI)
		}()
		synctest.Wait() // OnOutcome runs on the client's delivering goroutine
		require.True(t, panicked.Load(), "the observer ran, and panicked")

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err = c.Unsubscribe(ctx, docURI)
		require.NoError(t, err, "a panic in an observer must not leave the URI locked")
	})
}
