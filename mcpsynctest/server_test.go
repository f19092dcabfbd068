package mcpsynctest

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEraNegotiation(t *testing.T) {
	tests := []struct {
		name string
		opts *ServerOptions
		want string
	}{
		{"default server negotiates the modern era", nil, mcp.ProtocolVersion20260728},
		{"legacy-only server makes the client fall back", &ServerOptions{LegacyOnly: true}, mcp.ProtocolVersion20251125},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewServer(tt.opts)
			c, _, _ := connect(t, s.NewInProcessTransport(), 1)
			assert.Equal(t, tt.want, c.ProtocolVersion())
		})
	}

	t.Run("modern-only server refuses the handshake", func(t *testing.T) {
		s := NewServer(&ServerOptions{ModernOnly: true})
		tr := NewTransport(s.NewInProcessTransport(), 1)
		c := client.NewClient(tr, legacy)
		require.NoError(t, c.Start(context.Background()))
		defer c.Close()
		_, err := c.Initialize(context.Background(), mcp.InitializeRequest{})
		require.ErrorIs(t, err, mcp.ErrInvalidRequest)

		modern, _, _ := connect(t, s.NewInProcessTransport(), 1)
		assert.Equal(t, mcp.ProtocolVersion20260728, modern.ProtocolVersion())
	})

	t.Run("contradictory options", func(t *testing.T) {
		assert.Panics(t, func() { NewServer(&ServerOptions{LegacyOnly: true, ModernOnly: true}) })
	})
}

func TestNotFoundCodePerEra(t *testing.T) {
	tests := []struct {
		name string
		opts []client.ClientOption
		want error // mcp-go's sentinel for the JSON-RPC code
		code string
	}{
		{"legacy answers -32002", []client.ClientOption{legacy}, mcp.ErrResourceNotFound, "-32002"},
		{"modern answers -32602", nil, mcp.ErrInvalidParams, "-32602"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewServer(nil)
			s.Set("file:///a", "text/plain", "v1")
			c, tr, _ := connect(t, s.NewInProcessTransport(), 1, tt.opts...)
			text, err := read(context.Background(), c, "file:///a")
			require.NoError(t, err)
			assert.Equal(t, "v1", text)

			s.Delete("file:///a")
			_, err = read(context.Background(), c, "file:///a")
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, tr.Log()[len(tr.Log())-1], "answered JSON-RPC error "+tt.code)
			_, ok := s.Text("file:///a")
			assert.False(t, ok)

			s.Recreate("file:///a", "v2")
			text, err = read(context.Background(), c, "file:///a")
			require.NoError(t, err)
			assert.Equal(t, "v2", text)
			assert.Equal(t, 2, s.Reads("file:///a"))
		})
	}
}

func TestPagesStableAndComplete(t *testing.T) {
	for _, n := range []int{4, 5} {
		t.Run(fmt.Sprintf("%d resources with one name", n), func(t *testing.T) {
			s := NewServer(&ServerOptions{PageSize: 2})
			var want []string
			for i := range n {
				uri := fmt.Sprintf("file:///%d", i)
				s.SetResource(mcp.Resource{URI: uri, Name: "same"}, "x")
				want = append(want, uri)
			}
			c, _, _ := connect(t, s.NewInProcessTransport(), 1)

			first := walk(t, c, 10)
			assert.Equal(t, want, uris(first), "no item with an equal name is skipped")
			assert.Len(t, first, (n+1)/2, "no empty last page")
			for _, p := range first {
				assert.NotEmpty(t, p.Resources)
			}
			assert.Equal(t, uris(first), uris(walk(t, c, 10)), "a second walk without changes is identical")
		})
	}
}

func TestDeleteAndRecreateBetweenPages(t *testing.T) {
	setup := func(t *testing.T, opts *ServerOptions) (*Server, *client.Client) {
		s := NewServer(opts)
		for _, u := range []string{"a", "b", "c", "d", "e"} {
			s.Set("file:///"+u, "text/plain", u)
		}
		s.OnPage(func(kind string, page int) {
			if kind == KindResources && page == 1 {
				s.Recreate("file:///a", "a2") // already served
				s.Delete("file:///d")         // not yet served
			}
		})
		c, _, _ := connect(t, s.NewInProcessTransport(), 1)
		return s, c
	}

	t.Run("live walk sees the changes", func(t *testing.T) {
		s, c := setup(t, nil)
		pages := walk(t, c, 10)
		assert.Equal(t, []string{"file:///a", "file:///b", "file:///c", "file:///e", "file:///a"}, uris(pages))
		s.OnPage(nil)
		assert.Equal(t, []string{"file:///b", "file:///c", "file:///e", "file:///a"}, uris(walk(t, c, 10)))
	})

	t.Run("snapshot walk is cut from its first page's set", func(t *testing.T) {
		s, c := setup(t, &ServerOptions{Snapshot: true})
		pages := walk(t, c, 10)
		assert.Equal(t, []string{"file:///a", "file:///b", "file:///c", "file:///d", "file:///e"}, uris(pages))
		for _, p := range pages {
			assert.Equal(t, snapshotID(pages[0]), snapshotID(p))
		}
		require.NotNil(t, snapshotID(pages[0]))

		s.OnPage(nil)
		again := walk(t, c, 10)
		assert.Equal(t, []string{"file:///b", "file:///c", "file:///e", "file:///a"}, uris(again))
		assert.NotEqual(t, snapshotID(pages[0]), snapshotID(again[0]), "a changed set has a new id")
		assert.Equal(t, snapshotID(again[0]), snapshotID(walk(t, c, 10)[0]), "an unchanged set keeps its id")
	})
}

func TestSnapshotCapability(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			s := NewServer(&ServerOptions{Snapshot: on})
			s.Set("file:///a", "text/plain", "a")
			c, _, _ := connect(t, s.NewInProcessTransport(), 1)
			_, declared := c.GetServerCapabilities().Experimental[SnapshotCapability]
			assert.Equal(t, on, declared)
			assert.Equal(t, on, snapshotID(walk(t, c, 1)[0]) != nil)
		})
	}
}

func TestInvalidCursorIsInvalidParams(t *testing.T) {
	s := NewServer(nil)
	c, _, _ := connect(t, s.NewInProcessTransport(), 1)
	req := mcp.ListResourcesRequest{}
	req.Params.Cursor = "bm90LWEtY3Vyc29y"
	_, err := c.ListResourcesByPage(context.Background(), req)
	require.ErrorIs(t, err, mcp.ErrInvalidParams)
}

func TestTemplatesListPaginates(t *testing.T) {
	s := NewServer(&ServerOptions{PageSize: 2})
	for i := range 3 {
		s.SetTemplate(fmt.Sprintf("file:///t%d/{name}", i), "same")
	}
	var pages []int
	s.OnPage(func(kind string, page int) {
		assert.Equal(t, KindTemplates, kind)
		pages = append(pages, page)
	})
	c, _, _ := connect(t, s.NewInProcessTransport(), 1)
	res, err := c.ListResourceTemplates(context.Background(), mcp.ListResourceTemplatesRequest{})
	require.NoError(t, err)
	assert.Len(t, res.ResourceTemplates, 3)
	assert.Equal(t, []int{1, 2}, pages)
}

func TestListChanged(t *testing.T) {
	tests := []struct {
		name     string
		opts     *ServerOptions
		declared bool
		sent     bool
	}{
		{"sent by default", nil, true, true},
		{"declared but never sent", &ServerOptions{SuppressListChanged: true}, true, false},
		{"not declared", &ServerOptions{NoListChanged: true}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewServer(tt.opts)
				c, _, rec := connect(t, s.NewInProcessTransport(), 1, legacy)
				assert.Equal(t, tt.declared, c.GetServerCapabilities().Resources.ListChanged)
				s.Set("file:///new", "text/plain", "x")
				s.Delete("file:///new")
				synctest.Wait()
				assert.Equal(t, tt.sent, rec.count(mcp.MethodNotificationResourcesListChanged) == 2)
				assert.Equal(t, tt.sent, rec.count(mcp.MethodNotificationResourcesListChanged) > 0)
			})
		})
	}
}

func TestChangeOnRead(t *testing.T) {
	s := NewServer(&ServerOptions{ChangeOnRead: true})
	s.Set("file:///clock", "text/plain", "now")
	c, _, _ := connect(t, s.NewInProcessTransport(), 1)
	a, err := read(context.Background(), c, "file:///clock")
	require.NoError(t, err)
	b, err := read(context.Background(), c, "file:///clock")
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	assert.Equal(t, 2, s.Reads("file:///clock"))
}

func TestLegacySubscriptionNotifies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, _, rec := connect(t, s.NewInProcessTransport(), 1, legacy)
		subscribe(t, c, "file:///a")
		assert.True(t, s.Subscribed("file:///a"))
		assert.Equal(t, 1, s.SubscribeCalls())

		s.Set("file:///a", "text/plain", "v2")
		s.Set("file:///b", "text/plain", "not subscribed")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a"}, rec.updated())
		assert.Equal(t, 1, s.NotificationsSent())

		require.NoError(t, c.Unsubscribe(context.Background(), mcp.UnsubscribeRequest{Params: mcp.UnsubscribeParams{URI: "file:///a"}}))
		assert.False(t, s.Subscribed("file:///a"))
		assert.Equal(t, 1, s.UnsubscribeCalls())
	})
}

func TestModernListenNotifies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, _, rec := connect(t, s.NewInProcessTransport(), 1)
		require.Equal(t, mcp.ProtocolVersion20260728, c.ProtocolVersion())

		stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{"file:///a"}}, nil)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, 1, rec.count(mcp.MethodNotificationSubscriptionsAcknowledged))
		assert.True(t, s.Subscribed("file:///a"))

		s.Set("file:///a", "text/plain", "v2")
		synctest.Wait()
		require.Equal(t, []string{"file:///a"}, rec.updated())
		rec.mu.Lock()
		last := rec.notes[len(rec.notes)-1]
		rec.mu.Unlock()
		assert.NotNil(t, last.Params.Meta[mcp.MetaKeySubscriptionID], "modern notifications name their stream")

		stop()
		synctest.Wait()
		assert.False(t, s.Subscribed("file:///a"))
		assert.Equal(t, 1, s.SubscribeCalls())
	})
}

func TestFailSubscribeRecordsThenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(&ServerOptions{FailSubscribe: true})
		s.Set("file:///a", "text/plain", "v1")
		c, _, rec := connect(t, s.NewInProcessTransport(), 1, legacy)
		err := c.Subscribe(context.Background(), mcp.SubscribeRequest{Params: mcp.SubscribeParams{URI: "file:///a"}})
		require.Error(t, err)
		assert.True(t, s.Subscribed("file:///a"), "the server recorded the subscription anyway")

		s.Set("file:///a", "text/plain", "v2")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a"}, rec.updated(), "and notifies the client that thinks it is not subscribed")
	})
}

func TestNoSubscribeCapability(t *testing.T) {
	s := NewServer(&ServerOptions{NoSubscribe: true})
	c, _, _ := connect(t, s.NewInProcessTransport(), 1, legacy)
	assert.False(t, c.GetServerCapabilities().Resources.Subscribe)
	err := c.Subscribe(context.Background(), mcp.SubscribeRequest{Params: mcp.SubscribeParams{URI: "file:///a"}})
	require.ErrorIs(t, err, mcp.ErrMethodNotFound)
	assert.False(t, s.Subscribed("file:///a"))
}

// A stream replaced by one carrying the same URI, whose clean-up is held
// until the new stream subscribed: a server that cleans up per stream
// keeps the URI subscribed; one that cleans up per session, as the
// official Go SDK server does, unsubscribes it although the new stream is
// open and acknowledged.
func TestListenEndAfterTheNextStreamSubscribed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sessionWide bool
	}{
		{"per stream", false},
		{"session wide", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewServer(&ServerOptions{SessionWideListenEnd: tc.sessionWide})
				s.Set("file:///a", "text/plain", "v1")
				s.Set("file:///b", "text/plain", "v1")
				c, _, rec := connect(t, s.NewInProcessTransport(), 1)
				stopA, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{"file:///a"}}, nil)
				require.NoError(t, err)
				synctest.Wait()
				hold := s.HoldNextListenEnd()

				// mcp-go ends stream A as it opens B.
				stopB, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ResourceSubscriptions: []string{"file:///a", "file:///b"}}, nil)
				require.NoError(t, err)
				synctest.Wait()
				select {
				case <-hold.Arrived():
				default:
					t.Fatal("stream A's clean-up is not held")
				}
				require.Equal(t, 2, rec.count(mcp.MethodNotificationSubscriptionsAcknowledged), "B is acknowledged")
				assert.True(t, s.Subscribed("file:///a"), "held: A's clean-up has not run")

				hold.Release()
				stopA()
				synctest.Wait()
				assert.Equal(t, !tc.sessionWide, s.Subscribed("file:///a"), "file:///a after A's clean-up")
				assert.True(t, s.Subscribed("file:///b"), "A never carried file:///b")
				s.Set("file:///a", "text/plain", "v2")
				s.Set("file:///b", "text/plain", "v2")
				synctest.Wait()
				want := []string{"file:///a", "file:///b"}
				if tc.sessionWide {
					want = []string{"file:///b"}
				}
				assert.Equal(t, want, rec.updated(), "B stays open and notifies what the server still has subscribed")

				stopB()
				synctest.Wait()
				assert.False(t, s.Subscribed("file:///b"))
			})
		})
	}
}
