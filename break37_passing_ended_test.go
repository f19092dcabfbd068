package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Passing coverage. The server ends the listen stream a SubscribeAll
// opened, and before the client re-establishes it (its backoff) the
// caller unsubscribes one URI: once things settle the unsubscribed URI is
// not carried, every other one is, in push mode, and their changes reach
// Lookup.
func TestBreak37PassingEndedStreamThenUnsubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		uris := make([]string, 6)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b37/ended/%d.md", i)
			r.srv.Set(uris[i], "text/markdown", "v1")
		}
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()
		r.faults().EndListenStreams()
		synctest.Wait()
		sub, err := r.c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		assert.Equal(t, mcpsync.StateClosed, sub.State)
		time.Sleep(5 * time.Second)
		quiesce()
		assert.False(t, r.srv.Subscribed(uris[0]))
		for _, u := range uris[1:] {
			sub, err := r.c.Engine().Subscription(u)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.ModePush, sub.Mode, u)
			assert.True(t, r.srv.Subscribed(u), u)
			r.srv.Set(u, "text/markdown", "v2")
		}
		quiesce()
		for _, u := range uris[1:] {
			entry, err := r.c.Lookup(u)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text, u)
		}
	})
}
