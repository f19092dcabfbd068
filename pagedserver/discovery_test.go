package pagedserver

import (
	"context"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The library's own discovery reaches SNAPSHOT_PROVEN against snapshot lists,
// in both protocol eras, while resources are inserted and deleted between
// pages: one snapshot id on every page, every resource of the snapshot once,
// equal names across page boundaries included.
func TestDiscoveryProvesSnapshotLists(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			lists, err := NewSnapshotLists(&SnapshotListOptions{Keyring: keyring(t), PageSize: 4})
			require.NoError(t, err)
			srv := server.NewMCPServer("docs", "1.0.0", append(lists.ServerOptions(), server.WithResourceCapabilities(false, false))...)
			want := addDocs(srv, 0, 10)
			churn := func() { // between the first and second page of the first walk
				srv.DeleteResources(want[7])
				addDocs(srv, 20, 2)
			}
			c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
				return &afterFirstList{Interface: transport.NewInProcessTransport(srv), do: churn}, nil
			}, &mcpsync.ClientOptions{Subject: "user:alice", ProtocolVersion: version})
			require.NoError(t, err)
			defer c.Close()
			require.True(t, c.Capabilities().SnapshotList, "the extension is negotiated")

			first, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotProven, first.Status)
			require.Len(t, first.Scans, 1, "one pass suffices with proof")
			require.Len(t, first.Scans[0].Pages, 3)
			for _, p := range first.Scans[0].Pages {
				assert.Equal(t, first.SnapshotID, p.SnapshotID)
			}
			var got []string
			for d := range first.Items() {
				got = append(got, d.URI)
			}
			assert.ElementsMatch(t, want, got)

			// The next scan proves the changed set.
			second, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotProven, second.Status)
			assert.NotEqual(t, first.SnapshotID, second.SnapshotID)
			assert.Len(t, second.Descriptors, 11)
			items, err := second.Proven(second.MeasuredAt, c.Engine().SessionGeneration())
			require.NoError(t, err)
			assert.Len(t, items, 11)
		})
	}
}

// afterFirstList runs do once, right after the first resources/list
// response has come back: between the pages of a walk.
type afterFirstList struct {
	transport.Interface
	once sync.Once
	do   func()
}

func (a *afterFirstList) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := a.Interface.SendRequest(ctx, req)
	if req.Method == string(mcp.MethodResourcesList) {
		a.once.Do(a.do)
	}
	return resp, err
}
