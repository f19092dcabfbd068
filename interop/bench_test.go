package interop

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync"
)

// BenchmarkFirstVersion measures the time from starting a real stdio server
// (server-everything 2026.8.31 under node) to the first resource content in
// hand: for mcpsync, Connect + Subscribe until the fence accepts the first
// version; for a bare mcp-go client, NewStdioMCPClient + Initialize +
// ReadResource. Shutting the process down is not timed. Each runs with
// mcp-go's default negotiation (a server/discover probe first, which the
// TypeScript SDK refuses with method-not-found) and with 2025-11-25 pinned
// (no probe), so the cost of the probe shows as the difference.
func BenchmarkFirstVersion(b *testing.B) {
	node := needNode(b)
	entry := filepath.Join(npmDir, "node_modules", everythingNow.pkg, "dist", "index.js")
	const uri = "demo://resource/static/document/features.md"
	for _, pin := range []string{"", "2025-11-25"} {
		suffix := ""
		if pin != "" {
			suffix = "/pinned=" + pin
		}
		b.Run("mcpsync"+suffix, func(b *testing.B) {
			for range b.N {
				first := make(chan mcpsync.Outcome, 16)
				s := &stdioServer{command: node, args: []string{entry, "stdio"}}
				ctx, cancel := context.WithTimeout(b.Context(), bound)
				c, err := mcpsync.Connect(ctx, s.dial, &mcpsync.ClientOptions{
					Subject: alice, ProtocolVersion: pin, RevalidateEvery: time.Hour,
					OnOutcome: func(o mcpsync.Outcome) { first <- o },
				})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Subscribe(ctx, uri); err != nil {
					b.Fatal(err)
				}
				select {
				case o := <-first:
					if !o.Accepted {
						b.Fatalf("first read refused: %s", o.Stale.Reason)
					}
				case <-ctx.Done():
					b.Fatal("no first version")
				}
				b.StopTimer()
				cancel()
				_ = c.Close()
				b.StartTimer()
			}
		})
		b.Run("baseline=mcp-go"+suffix, func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(b.Context(), bound)
				// NewStdioMCPClient starts the transport and the process.
				c, err := mcpclient.NewStdioMCPClient(node, nil, entry, "stdio")
				if err != nil {
					b.Fatal(err)
				}
				init := mcp.InitializeRequest{}
				init.Params.ProtocolVersion = pin // a legacy pin skips the probe
				init.Params.ClientInfo = mcp.Implementation{Name: "baseline", Version: "1"}
				if _, err := c.Initialize(ctx, init); err != nil {
					b.Fatal(err)
				}
				req := mcp.ReadResourceRequest{}
				req.Params.URI = uri
				res, err := c.ReadResource(ctx, req)
				if err != nil || len(res.Contents) == 0 {
					b.Fatal("no content", err)
				}
				b.StopTimer()
				cancel()
				_ = c.Close()
				b.StartTimer()
			}
		})
	}
}
