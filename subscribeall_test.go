package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func subscribeAllClient(t *testing.T, srv *mcpsynctest.Server, version string) *mcpsync.Client {
	t.Helper()
	c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
		return srv.NewInProcessTransport(), nil
	}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: version, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// SubscribeAll opens every URI with its first version, in order; from
// 2026-07-28 on one listen stream carries them all, and before it each has
// its own resources/subscribe.
func TestSubscribeAll(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(nil)
				uris := make([]string, 200)
				for i := range uris {
					uris[i] = fmt.Sprintf("file:///all/%03d.md", i)
					srv.Set(uris[i], "text/markdown", "v1 of "+uris[i])
				}
				c := subscribeAllClient(t, srv, era.version)
				subs, err := c.SubscribeAll(t.Context(), uris)
				require.NoError(t, err)
				require.Len(t, subs, len(uris))
				for i, sub := range subs {
					assert.Equal(t, uris[i], sub.URI)
					assert.Equal(t, mcpsync.ModePush, sub.Mode, uris[i])
					entry, err := c.Lookup(uris[i])
					require.NoError(t, err)
					assert.Equal(t, "v1 of "+uris[i], entry.Contents[0].Text)
				}
				if era.version == "2026-07-28" {
					assert.Equal(t, 1, srv.SubscribeCalls(), "one listen stream for every URI")
				} else {
					assert.Equal(t, len(uris), srv.SubscribeCalls())
				}
				for _, uri := range uris {
					assert.True(t, srv.Subscribed(uri), uri)
				}

				// They are notified like any subscription.
				srv.Set(uris[7], "text/markdown", "v2")
				quiesce()
				entry, err := c.Lookup(uris[7])
				require.NoError(t, err)
				assert.Equal(t, "v2", entry.Contents[0].Text)
			})
		})
	}
}

// A URI that fails fails alone, named in the error; the others open. One
// that never got watched is not left on the listen stream.
func TestSubscribeAllFailures(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(nil)
				const a, b, gone, bad = "file:///all/a.md", "file:///all/b.md", "file:///all/gone.md", "::not a uri"
				srv.Set(a, "text/markdown", "a")
				srv.Set(b, "text/markdown", "b")
				c := subscribeAllClient(t, srv, era.version)
				subs, err := c.SubscribeAll(t.Context(), []string{a, bad, gone, b})
				require.Error(t, err)
				assert.ErrorIs(t, err, mcpsync.ErrInvalidURI)
				assert.ErrorIs(t, err, mcpsync.ErrNotFound)
				assert.Contains(t, err.Error(), gone)
				assert.Equal(t, mcpsync.Subscription{}, subs[1], "the URI that is none")
				for _, i := range []int{0, 3} {
					entry, err := c.Lookup(subs[i].URI)
					require.NoError(t, err)
					assert.Equal(t, mcpsync.ModePush, subs[i].Mode)
					assert.NotEmpty(t, entry.Contents)
				}
				// A resource not found stays subscribed, as with Subscribe:
				// it is read when the server says it exists.
				assert.Equal(t, mcpsync.StateTombstonePending, subs[2].State)
				srv.Set(gone, "text/markdown", "back")
				quiesce()
				entry, err := c.Lookup(gone)
				require.NoError(t, err)
				assert.Equal(t, "back", entry.Contents[0].Text)
			})
		})
	}
}

// A URI whose Subscribe fails before it is watched (here: the subject was
// revoked, so nothing is subscribed) is taken back from the listen stream
// SubscribeAll had it wanted on: the next stream does not carry it.
func TestSubscribeAllTakesBackWhatItDidNotOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		const a, b = "file:///all/a.md", "file:///all/b.md"
		srv.Set(a, "text/markdown", "a")
		srv.Set(b, "text/markdown", "b")
		c := subscribeAllClient(t, srv, "2026-07-28")
		_, err := c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		_, err = c.Engine().RevokeSubject(alice)
		require.NoError(t, err)
		_, err = c.SubscribeAll(t.Context(), []string{b})
		require.ErrorIs(t, err, mcpsync.ErrRevoked)

		// The next replacement of the stream (a's close) carries nothing
		// SubscribeAll wanted.
		_, err = c.Unsubscribe(t.Context(), a)
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(b), "b, never subscribed, is on the listen stream")
		assert.False(t, srv.Subscribed(a))
	})
}

// A cancelled context ends SubscribeAll: every URI it had not started is
// told so.
func TestSubscribeAllCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set("file:///all/a.md", "text/markdown", "a")
		c := subscribeAllClient(t, srv, "2026-07-28")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		uris := make([]string, 300)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///all/%03d.md", i)
		}
		subs, err := c.SubscribeAll(ctx, uris)
		require.ErrorIs(t, err, context.Canceled)
		assert.Len(t, subs, len(uris))
		var joined interface{ Unwrap() []error }
		require.True(t, errors.As(err, &joined))
		assert.Len(t, joined.Unwrap(), len(uris), "every URI says why it is not open")
		for sub, err := range c.Engine().Subscriptions() {
			require.NoError(t, err)
			t.Errorf("%s opened", sub.URI)
		}
	})
}
