package mcpsynctest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransportOverStreamableHTTP shows the Transport wraps a network
// transport: request and notification faults work over Streamable HTTP on
// loopback.
func TestTransportOverStreamableHTTP(t *testing.T) {
	s := NewServer(nil)
	s.Set("file:///a", "text/plain", "v1")
	srv := httptest.NewServer(server.NewStreamableHTTPServer(s.MCPServer()))
	t.Cleanup(srv.Close) // after the client closes its streams
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	inner, err := transport.NewStreamableHTTP(srv.URL, transport.WithHTTPBasicClient(hc), transport.WithContinuousListening())
	require.NoError(t, err)

	c, tr, rec := connect(t, inner, 1)
	assert.Equal(t, mcp.ProtocolVersion20251125, c.ProtocolVersion(), "a stateful HTTP server is legacy")

	hold := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
	readA := make(chan string, 1)
	go func() {
		text, err := read(context.Background(), c, "file:///a")
		assert.NoError(t, err)
		readA <- text
	}()
	<-hold.Arrived()
	s.Set("file:///a", "text/plain", "v2")
	textB, err := read(context.Background(), c, "file:///a")
	require.NoError(t, err)
	assert.Equal(t, "v2", textB)
	require.Empty(t, readA)
	hold.Release()
	assert.Equal(t, "v1", <-readA)

	subscribe(t, c, "file:///a")
	tr.DuplicateNext("file:///a", 1)
	s.Set("file:///a", "text/plain", "v3")
	rec.waitUpdated(t, 2)
	assert.Equal(t, []string{"file:///a", "file:///a"}, rec.updated(), tr.Log())

	tr.FailNext(string(mcp.MethodResourcesRead), "", mcp.INTERNAL_ERROR, "injected")
	_, err = read(context.Background(), c, "file:///a")
	require.ErrorIs(t, err, mcp.ErrInternalError)
}
