package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A reconnect re-reads every subscription, paced by ReconnectReads, so a
// restarted server is not stampeded; every one is still read.
func TestReconnectReadsArePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := numbered("file:///paced/%02d.md", 30)
		r := buildRig(t, eras[0], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, ReconnectReads: 1, CoalesceWindow: -1}, uris: uris})
		r.watch(uris...)
		quiesce()
		reads := func() int {
			n := 0
			for _, u := range uris {
				n += r.srv.Reads(u)
			}
			return n
		}
		before := reads()
		require.NoError(t, r.c.Reconnect(t.Context()))
		quiesce()
		burst := reads() - before
		assert.LessOrEqual(t, burst, 21, "reads sent at once after the reconnect")
		time.Sleep(15 * time.Second)
		quiesce()
		assert.Equal(t, len(uris), reads()-before, "every subscription is re-read, at the paced rate")
	})
}

// The live session is the caller's to call tools on.
func TestSessionCallsATool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], nil)
		r.srv.MCPServer().AddTool(mcp.NewTool("echo"), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("echoed"), nil
		})
		s, err := r.c.Session()
		require.NoError(t, err)
		req := mcp.CallToolRequest{}
		req.Params.Name = "echo"
		res, err := s.CallTool(t.Context(), req)
		require.NoError(t, err)
		require.Len(t, res.Content, 1)
		assert.Equal(t, "echoed", res.Content[0].(mcp.TextContent).Text)
	})
}
