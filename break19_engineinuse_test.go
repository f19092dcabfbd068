package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Pins a property (passes today): Connect's context ends while the server holds the initialize answer: the
// Connect fails, and the engine must be free for the next Connect.
func TestBreak19ConnectCancelledMidHandshakeFreesTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		e := newEngine(t, nil)
		var holds []*mcpsynctest.Hold
		defer func() {
			for _, h := range holds {
				h.Release()
			}
		}()
		hold := true
		dial := func(context.Context) (transport.Interface, error) {
			kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
			if hold {
				holds = append(holds, kit.HoldNext("initialize", ""), kit.HoldNext("server/discover", ""))
			}
			return kit, nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Engine: e, Subject: alice})
		cancel()
		require.Error(t, err)
		hold = false
		c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: e, Subject: alice})
		require.NoError(t, err, "a Connect cancelled mid-handshake left the engine in use")
		require.NoError(t, c.Close())
	})
}
