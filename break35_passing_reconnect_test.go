package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Passing coverage. A Reconnect while SubscribeAll's first listen stream
// (carrying every URI) waits for its acknowledgement: every URI still ends
// open in push mode in the new session, with its first version, carried
// by the new session's stream; a later replacement (an Unsubscribe) drops
// only the URI unsubscribed.
func TestBreak35SubscribeAllAcrossReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		c, srv := r.c, r.srv
		uris := make([]string, 8)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b35/reconnect/%d.md", i)
			srv.Set(uris[i], "text/markdown", "v1 "+uris[i])
		}

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
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
		_, err := c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(uris[0]))
		for _, uri := range uris[1:] {
			assert.True(t, srv.Subscribed(uri), uri)
		}
	})
}
