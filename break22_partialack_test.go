package mcpsync_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// break22PartialAck is a server that, once drop is set, no longer accepts
// the URI drop names on its listen streams: its acknowledgements leave it
// out and no resources/updated for it is delivered.
type break22PartialAck struct {
	transport.Interface
	drop *atomic.Pointer[string]
}

func (p break22PartialAck) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	p.Interface.SetNotificationHandler(func(m mcp.JSONRPCNotification) {
		drop := p.drop.Load()
		if drop == nil {
			h(m)
			return
		}
		switch m.Method {
		case string(mcp.MethodNotificationResourceUpdated):
			if u, _ := m.Params.AdditionalFields["uri"].(string); u == *drop {
				return
			}
		case mcp.MethodNotificationSubscriptionsAcknowledged:
			var uris []string
			switch f := m.Params.AdditionalFields["notifications"].(type) {
			case mcp.SubscriptionFilter:
				uris = f.ResourceSubscriptions
			case map[string]any:
				for _, x := range f["resourceSubscriptions"].([]any) {
					uris = append(uris, x.(string))
				}
			}
			fields := map[string]any{}
			for k, v := range m.Params.AdditionalFields {
				fields[k] = v
			}
			fields["notifications"] = mcp.SubscriptionFilter{
				ResourceSubscriptions: slices.DeleteFunc(slices.Clone(uris), func(u string) bool { return u == *drop }),
			}
			m.Params.AdditionalFields = fields
		}
		h(m)
	})
}

// Break22 (2026-07-28): a server that acknowledges only part of a
// replacement stream. x is subscribed in push mode on an acknowledged
// stream. Subscribe y replaces the stream; the server's acknowledgement
// carries y but no longer x. relisten checks only the URI its caller asked
// for (y), and gapped only intersects the acknowledged sets, so nothing
// notices that x lost its server-side subscription: x stays ModePush, with
// no Degraded reason, although no stream will ever notify it. A change of x
// is then served as the old text until the hourly revalidation.
//
// Property violated: no pretence of real time (DESIGN: a URI without a
// working subscription gets periodic reads with an honest bound) and
// progress ("silently stale ... is a bug"): x must either go to poll mode,
// be marked degraded, or be read after it changes.
func TestBreak22PartialAckDropsCarriedURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///partial/x.md", "file:///partial/y.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(x, "text/markdown", "v1")
		srv.Set(y, "text/markdown", "v1")
		var drop atomic.Pointer[string]
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return break22PartialAck{srv.NewInProcessTransport(), &drop}, nil
		}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2026-07-28", RevalidateEvery: time.Hour})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		sx, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sx.Mode)
		time.Sleep(time.Minute)
		quiesce()

		xs := x
		drop.Store(&xs) // the server stops accepting x
		sy, err := c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sy.Mode, sy.ModeReason)
		time.Sleep(time.Minute)
		quiesce()

		srv.Set(x, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()

		sub, err := c.Engine().Subscription(x)
		require.NoError(t, err)
		e, err := c.Lookup(x)
		require.NoError(t, err)
		text := ""
		if len(e.Contents) > 0 {
			text = e.Contents[0].Text
		}
		assert.True(t, text == "v2" || sub.Mode != mcpsync.ModePush || e.Degraded != "",
			"x is off every acknowledged stream yet still claims push mode, serves %q (server has v2), degraded %q", text, e.Degraded)
	})
}
