package interop

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Over streamable HTTP before 2026-07-28, notifications travel only on the
// standalone GET stream. HTTPDialer gets it without being told: a change is
// read on its notification, with no revalidation for an hour. A dialer that
// cannot open it leaves the subscription polling, and the subscription says
// why, instead of claiming push with nothing arriving.
func TestHTTPLegacyNotificationsReachTheClient(t *testing.T) {
	const doc = "file:///http/doc.md"
	srv := mcpsynctest.NewServer(nil)
	srv.Set(doc, "text/markdown", "v1")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)

	t.Run("HTTPDialer", func(t *testing.T) {
		c, outcomes := connect(t, mcpsync.HTTPDialer(hs.URL, nil), mcpsync.ClientOptions{ProtocolVersion: "2025-11-25"})
		sub, err := c.Subscribe(t.Context(), doc)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sub.Mode, sub.ModeReason)
		await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))
		srv.Set(doc, "text/markdown", "v2")
		await(t, outcomes, "after the notification", decided(mcpsync.DecisionAccepted, ledger.TriggerNotification))
		entry, err := c.Lookup(doc)
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text)
	})
	t.Run("a dialer without the stream", func(t *testing.T) {
		plain := func(context.Context) (transport.Interface, error) { return transport.NewStreamableHTTP(hs.URL) }
		c, _ := connect(t, plain, mcpsync.ClientOptions{ProtocolVersion: "2025-11-25"})
		sub, err := c.Subscribe(t.Context(), doc)
		require.NoError(t, err)
		assert.Equal(t, ledger.ModePoll, sub.Mode)
		assert.Contains(t, sub.ModeReason, "notification stream")
	})
}
