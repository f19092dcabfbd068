package mcpsynctest

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

// Requests counts every request the client sent, whatever a fault made of
// it: answered, failed before the server, or sent after the session was
// dropped.
func TestRequestsCountsWhatTheClientSentWhateverTheFault(t *testing.T) {
	s := NewServer(nil)
	s.Set("file:///a", "text/plain", "v1")
	c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
	method := string(mcp.MethodResourcesRead)
	require.Zero(t, tr.Requests(method))

	_, err := read(context.Background(), c, "file:///a")
	require.NoError(t, err)
	tr.FailNext(method, "file:///a", mcp.INTERNAL_ERROR, "not now")
	_, err = read(context.Background(), c, "file:///a")
	require.Error(t, err)
	require.Equal(t, 2, tr.Requests(method))
	require.Equal(t, 1, s.Reads("file:///a"), "the failed read never reached the server")

	tr.DropSession()
	_, err = read(context.Background(), c, "file:///a")
	require.Error(t, err)
	require.Equal(t, 3, tr.Requests(method))
	require.Zero(t, tr.Requests(string(mcp.MethodResourcesSubscribe)))
}
