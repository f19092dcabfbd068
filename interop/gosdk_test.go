package interop

import (
	"context"
	"os"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// gosdkEnv makes the test binary the helper process that serves the
// official Go SDK server over stdio (see TestMain).
const gosdkEnv = "MCPSYNC_INTEROP_GOSDK"

const gosdkDoc = "file:///gosdk/handbook.md"

// runGoSDKServer serves one resource whose body a tool sets; the tool
// notifies subscribers, as a server whose documents change would. An empty
// body makes the resource missing. It returns the process exit code.
func runGoSDKServer() int {
	var mu sync.Mutex // protects body
	body := "v1"
	srv := sdk.NewServer(&sdk.Implementation{Name: "go-sdk-stdio", Version: "1.0.0"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	srv.AddResource(&sdk.Resource{URI: gosdkDoc, Name: "handbook", MIMEType: "text/markdown"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if body == "" {
				return nil, sdk.ResourceNotFoundError(req.Params.URI)
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: gosdkDoc, MIMEType: "text/markdown", Text: body}}}, nil
		})
	type setArgs struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "set", Description: "Set the handbook's body and notify subscribers."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in setArgs) (*sdk.CallToolResult, any, error) {
			mu.Lock()
			body = in.Text
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil,
				srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: gosdkDoc})
		})
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// gosdkServer starts this test binary as the Go SDK server's process.
func gosdkServer() *stdioServer {
	return &stdioServer{command: os.Args[0], env: []string{gosdkEnv + "=1"}, args: []string{"-test.run=^$"}}
}

// The official Go SDK over stdio, in both eras: go-sdk v1.8.0 answers
// server/discover, so without a pin mcp-go negotiates 2026-07-28 and
// subscribes with subscriptions/listen; a legacy pin uses initialize and
// resources/subscribe. In each, a notification triggers a fenced read of the
// new body, and -32602 (go-sdk's not-found on every revision) makes the
// subscription TOMBSTONE_PENDING.
func TestGoSDKStdio(t *testing.T) {
	for _, tc := range []struct{ pin, want string }{
		{"", "2026-07-28"},
		{"2026-07-28", "2026-07-28"},
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
	} {
		t.Run("pin="+tc.pin, func(t *testing.T) {
			t.Parallel()
			s := gosdkServer()
			c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{ProtocolVersion: tc.pin})
			caps := c.Capabilities()
			assert.Equal(t, tc.want, caps.ProtocolVersion)
			assert.Equal(t, "go-sdk-stdio", caps.Server.Name)
			assert.True(t, caps.Subscribe)

			sub, err := c.Subscribe(t.Context(), gosdkDoc)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.ModePush, sub.Mode)
			first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, mcpsync.TriggerInitial))

			s.callTool(t, "set", map[string]any{"text": "v2"})
			updated := await(t, outcomes, "of v2", decided(mcpsync.DecisionAccepted, mcpsync.TriggerNotification))
			assert.Equal(t, first.Version.Version.Digest, updated.Version.PreviousDigest)
			entry, err := c.Lookup(gosdkDoc)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text)

			s.callTool(t, "set", map[string]any{"text": ""})
			await(t, outcomes, "of the deletion", decided(mcpsync.DecisionTombstonePending, mcpsync.TriggerNotification))
			_, err = c.Lookup(gosdkDoc)
			assert.ErrorIs(t, err, mcpsync.ErrTombstonePending)
		})
	}
}

// Reconnect against a stdio server is a new process: a new session
// generation, the subscription re-established as a new generation and
// re-read (the new process serves its initial body again), and
// notifications of the new process drive reads as before.
func TestGoSDKStdioReconnect(t *testing.T) {
	t.Parallel()
	s := gosdkServer()
	c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{})
	_, err := c.Subscribe(t.Context(), gosdkDoc)
	require.NoError(t, err)
	first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, mcpsync.TriggerInitial))
	s.callTool(t, "set", map[string]any{"text": "v2"})
	await(t, outcomes, "of v2", decided(mcpsync.DecisionAccepted, mcpsync.TriggerNotification))

	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	require.NoError(t, c.Reconnect(ctx))
	again := await(t, outcomes, "after the reconnect", decided(mcpsync.DecisionAccepted, mcpsync.TriggerReconnect))
	assert.Greater(t, again.Version.Version.SessionGeneration, first.Version.Version.SessionGeneration)
	assert.Greater(t, again.Version.Version.SubscriptionGeneration, first.Version.Version.SubscriptionGeneration)
	entry, err := c.Lookup(gosdkDoc)
	require.NoError(t, err)
	assert.Equal(t, "v1", entry.Contents[0].Text, "the new process starts from v1")

	s.callTool(t, "set", map[string]any{"text": "v3"})
	await(t, outcomes, "of v3", decided(mcpsync.DecisionAccepted, mcpsync.TriggerNotification))
	entry, err = c.Lookup(gosdkDoc)
	require.NoError(t, err)
	assert.Equal(t, "v3", entry.Contents[0].Text)
}
