package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b35Closing refuses requests once closed, as a real transport does (the
// in-process one still hands them to the server, whose hooks then record
// listen streams of a session already gone).
type b35Closing struct {
	transport.Interface
	closed *atomic.Bool
}

func (c b35Closing) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if c.closed.Load() {
		return nil, errors.New("transport closed")
	}
	return c.Interface.SendRequest(ctx, req)
}

func (c b35Closing) Close() error {
	c.closed.Store(true)
	return c.Interface.Close()
}

// Passing coverage. A Reconnect while SubscribeAll's first listen stream
// (carrying every URI) waits for its acknowledgement: every URI still ends
// open in push mode in the new session, with its first version, carried
// by the new session's stream; a later replacement (an Unsubscribe) drops
// only the URI unsubscribed.
func TestBreak35SubscribeAllAcrossReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		uris := make([]string, 8)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b35/reconnect/%d.md", i)
			srv.Set(uris[i], "text/markdown", "v1 "+uris[i])
		}
		var kit atomic.Pointer[mcpsynctest.Transport]
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			k := mcpsynctest.NewTransport(b35Closing{srv.NewInProcessTransport(), new(atomic.Bool)}, 1)
			kit.Store(k)
			return k, nil
		}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2026-07-28", Seed: 1})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		hold := kit.Load().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		done := make(chan error, 1)
		go func() {
			_, err := c.SubscribeAll(t.Context(), uris)
			done <- err
		}()
		synctest.Wait()
		<-hold.Arrived()
		reconnected := make(chan error, 1)
		go func() { reconnected <- c.Reconnect(t.Context()) }()
		synctest.Wait()
		hold.Release()
		require.NoError(t, <-reconnected)
		require.NoError(t, <-done)
		quiesce()

		gen := c.Health().SessionGeneration
		for _, uri := range uris {
			sub, err := c.Engine().Subscription(uri)
			require.NoError(t, err)
			assert.Equal(t, gen, sub.SessionGeneration, uri)
			assert.Equal(t, mcpsync.ModePush, sub.Mode, uri)
			assert.True(t, srv.Subscribed(uri), uri)
			entry, err := c.Lookup(uri)
			require.NoError(t, err)
			assert.Equal(t, "v1 "+uri, entry.Contents[0].Text)
		}
		_, err = c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(uris[0]))
		for _, uri := range uris[1:] {
			assert.True(t, srv.Subscribed(uri), uri)
		}
	})
}
