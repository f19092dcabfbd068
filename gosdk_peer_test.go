package mcpsync_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// sdkServer is a server built with the official Go SDK, so the session layer
// is not tuned to mcp-go alone. It is served over streamable HTTP on
// loopback.
type sdkServer struct {
	mu     sync.Mutex
	body   string
	server *sdk.Server
	http   *httptest.Server
}

func newSDKServer(t *testing.T, body string) *sdkServer {
	s := &sdkServer{body: body}
	s.server = sdk.NewServer(&sdk.Implementation{Name: "go-sdk-server", Version: "1.0.0"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	s.server.AddResource(&sdk.Resource{URI: docURI, Name: "a", MIMEType: "text/markdown"},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.body == "" {
				return nil, sdk.ResourceNotFoundError(req.Params.URI)
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: docURI, MIMEType: "text/markdown", Text: s.body}}}, nil
		})
	s.http = httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.server }, nil))
	t.Cleanup(s.http.Close)
	return s
}

// set changes the resource and notifies until a fenced read completes. The
// go-sdk server drops a notification sent before the client's standalone
// stream is up (notifications are at most once there), so the first one
// after a subscribe can be lost; the test is about what a notification that
// arrives triggers, not about that race.
func (s *sdkServer) set(t *testing.T, body string, outcomes chan mcpsync.Outcome, want mcpsync.Decision) mcpsync.Outcome {
	t.Helper()
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
	for range 100 {
		require.NoError(t, s.server.ResourceUpdated(t.Context(), &sdk.ResourceUpdatedNotificationParams{URI: docURI}))
		timeout := time.After(100 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case o := <-outcomes:
				if o.Accepted && o.Version.Decision == want {
					return o
				}
			case <-timeout:
				waiting = false
			}
		}
	}
	t.Fatal("no notification reached the client")
	return mcpsync.Outcome{}
}

// dial connects over streamable HTTP. Before 2026-07-28 notifications
// reach a client only on the standalone GET stream, which mcp-go opens with
// continuous listening (and which in turn rules out 2026-07-28).
func (s *sdkServer) dial(version string) mcpsync.Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		if mcpsync.EraOf(version) == mcpsync.EraLegacy {
			return transport.NewStreamableHTTP(s.http.URL, transport.WithContinuousListening())
		}
		return transport.NewStreamableHTTP(s.http.URL)
	}
}

func TestOfficialGoSDKServerPeer(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			s := newSDKServer(t, "v1")
			outcomes := make(chan mcpsync.Outcome, 16)
			c, err := mcpsync.Connect(t.Context(), s.dial(version), &mcpsync.ClientOptions{
				Subject: alice, ProtocolVersion: version,
				OnOutcome: func(o mcpsync.Outcome) { outcomes <- o },
			})
			require.NoError(t, err)
			defer c.Close()
			caps := c.Capabilities()
			assert.Equal(t, "go-sdk-server", caps.Server.Name)
			assert.Equal(t, version, caps.ProtocolVersion)

			sub, err := c.Subscribe(t.Context(), docURI)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode)
			require.True(t, next(t, outcomes).Accepted)
			assert.Equal(t, "v1", lookupText(t, c))

			updated := s.set(t, "v2", outcomes, mcpsync.DecisionAccepted)
			require.True(t, updated.Accepted)
			assert.Equal(t, ledger.TriggerNotification, updated.Version.Trigger)
			assert.Equal(t, "v2", lookupText(t, c))

			gone := s.set(t, "", outcomes, mcpsync.DecisionTombstonePending)
			require.True(t, gone.Accepted)
			assert.Equal(t, mcpsync.DecisionTombstonePending, gone.Version.Decision, "not found recognised by code")
		})
	}
}

// next returns the next fenced outcome, failing the test if none comes
// within a generous bound (a guard against hangs, not a timing assertion).
func next(t *testing.T, outcomes chan mcpsync.Outcome) mcpsync.Outcome {
	t.Helper()
	select {
	case o := <-outcomes:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no fenced read completed")
		return mcpsync.Outcome{}
	}
}
