package wire_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/internal/wire"
)

type codeError struct {
	method string
	code   int
	data   json.RawMessage
}

func (e *codeError) Error() string { return fmt.Sprintf("%s: %d", e.method, e.code) }

func toError(method string, code int, _ string, data json.RawMessage) error {
	return &codeError{method: method, code: code, data: data}
}

func newServer() *server.MCPServer {
	s := server.NewMCPServer("t", "1", server.WithResourceCapabilities(true, false))
	s.AddResource(mcp.NewResource("test://present", "present"),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "here"}}, nil
		})
	return s
}

// The code of a JSON-RPC error reaches the caller through mcp-go, for the
// selected methods, in both protocol eras.
func TestErrorCodeSurvivesMCPGo(t *testing.T) {
	for version, want := range map[string]int{"2025-11-25": -32002, "2026-07-28": -32602} {
		t.Run(version, func(t *testing.T) {
			c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil, "resources/read"),
				client.WithProtocolVersion(version))
			require.NoError(t, c.Start(t.Context()))
			defer c.Close()
			_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
			require.NoError(t, err)

			req := mcp.ReadResourceRequest{}
			req.Params.URI = "test://absent"
			_, err = c.ReadResource(t.Context(), req)
			var ce *codeError
			require.True(t, errors.As(err, &ce), "got %T %v", err, err)
			assert.Equal(t, want, ce.code)
			assert.Equal(t, "resources/read", ce.method)

			req.Params.URI = "test://present"
			res, err := c.ReadResource(t.Context(), req)
			require.NoError(t, err)
			require.Len(t, res.Contents, 1)
		})
	}
}

// Methods not selected keep mcp-go's own error values.
func TestUnselectedMethodsPassThrough(t *testing.T) {
	c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil, "tools/list"),
		client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://absent"
	_, err = c.ReadResource(t.Context(), req)
	require.Error(t, err)
	var ce *codeError
	assert.False(t, errors.As(err, &ce))
	assert.ErrorIs(t, err, mcp.ErrResourceNotFound)
}

// The wrapper looks like what it wraps: mcp-go changes behaviour on
// transport.HTTPConnection, so only an HTTP transport's wrapper has it.
func TestWrapperKeepsTheTransportKind(t *testing.T) {
	inproc := wire.New(transport.NewInProcessTransport(newServer()), toError, nil)
	_, isHTTP := inproc.(transport.HTTPConnection)
	assert.False(t, isHTTP)

	httpServer := httptest.NewServer(server.NewStreamableHTTPServer(newServer()))
	defer httpServer.Close()
	tr, err := transport.NewStreamableHTTP(httpServer.URL)
	require.NoError(t, err)
	wrapped := wire.New(tr, toError, nil, "resources/read")
	_, isHTTP = wrapped.(transport.HTTPConnection)
	assert.True(t, isHTTP)

	c := client.NewClient(wrapped, client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err = c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://absent"
	_, err = c.ReadResource(t.Context(), req)
	var ce *codeError
	require.True(t, errors.As(err, &ce), "over streamable HTTP too: %v", err)
	assert.Equal(t, -32002, ce.code)
}

func TestRawResultIsKept(t *testing.T) {
	c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil),
		client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	var raw json.RawMessage
	_, err = c.ListResourcesByPage(wire.WithRawResult(t.Context(), &raw), mcp.ListResourcesRequest{})
	require.NoError(t, err)
	var page struct {
		Resources []struct{ URI string } `json:"resources"`
	}
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Len(t, page.Resources, 1)
	assert.Equal(t, "test://present", page.Resources[0].URI)
}
