package mcpsync_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func rawClient(b *testing.B, srv *mcpsynctest.Server) *mcpclient.Client {
	b.Helper()
	c := mcpclient.NewClient(srv.NewInProcessTransport(), mcpclient.WithProtocolVersion("2025-11-25"))
	if err := c.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Initialize(b.Context(), mcp.InitializeRequest{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func syncClient(b *testing.B, srv *mcpsynctest.Server) *mcpsync.Client {
	b.Helper()
	c, err := mcpsync.Connect(b.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// reportCPU reports the process's CPU time per op since since: every
// thread's, so a hand-off that wakes another thread counts, and so does the
// garbage collector; over stdio the server's, in its own process, does not.
func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime()-since)/float64(b.N), "cpu-ns/op")
}

// benchRawReads measures mcp-go's ReadResource of faultURI, of size bytes,
// on c.
func benchRawReads(b *testing.B, c *mcpclient.Client, size int) {
	req := mcp.ReadResourceRequest{}
	req.Params.URI = faultURI
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		if _, err := c.ReadResource(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// benchSyncReads subscribes faultURI, of size bytes, on c and measures
// its Read.
func benchSyncReads(b *testing.B, c *mcpsync.Client, size int) {
	if _, err := c.Subscribe(b.Context(), faultURI); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		out, err := c.Read(b.Context(), faultURI)
		if err != nil || !out.Accepted {
			b.Fatal("read not accepted", err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkRead compares a read through mcpsync (ticket, wire, digest,
// fence, receipt) with a raw mcp-go ReadResource of the same resource over
// the in-process transport.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(faultURI, "text/plain", strings.Repeat("x", size))
		b.Run(byteSize(size)+"/baseline=mcp-go", func(b *testing.B) {
			c := rawClient(b, srv)
			benchRawReads(b, c, size)
		})
		b.Run(byteSize(size)+"/mcpsync", func(b *testing.B) {
			c := syncClient(b, srv)
			benchSyncReads(b, c, size)
		})
	}
}

// BenchmarkReadStdio is BenchmarkRead over stdio: each side starts this
// test binary as a stdio server of the same resource, mcp-go's stdio
// client beside a Client of CommandDialer.
func BenchmarkReadStdio(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		env := append(os.Environ(), readServerEnv+"="+strconv.Itoa(size))
		b.Run(byteSize(size)+"/baseline=mcp-go", func(b *testing.B) {
			tr := transport.NewStdio(self, env)
			if err := tr.Start(b.Context()); err != nil {
				b.Fatal(err)
			}
			c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion("2025-11-25"))
			defer c.Close()
			if _, err := c.Initialize(b.Context(), mcp.InitializeRequest{}); err != nil {
				b.Fatal(err)
			}
			benchRawReads(b, c, size)
		})
		b.Run(byteSize(size)+"/mcpsync", func(b *testing.B) {
			dial := mcpsync.CommandDialer(mcpsync.Command{Name: self, Env: env})
			c, err := mcpsync.Connect(b.Context(), dial, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchSyncReads(b, c, size)
		})
	}
}

// BenchmarkDiscovery compares a two-pass discovery of 10,000 resources
// (pages of 100) with one raw mcp-go pass over the same pages. Two passes
// are the floor, 2.0x.
func BenchmarkDiscovery(b *testing.B) {
	// A plain mcp-go server with its own pagination: names are unique, so
	// its equal-name skip cannot bite, and 10,000/100 ends on an empty page,
	// which both sides fetch.
	srv := server.NewMCPServer("corpus", "1.0.0", server.WithResourceCapabilities(false, false), server.WithPaginationLimit(100))
	for i := range 10000 {
		uri := fmt.Sprintf("file:///corpus/%05d.md", i)
		srv.AddResource(mcp.NewResource(uri, fmt.Sprintf("doc-%05d", i)), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: "x"}}, nil
		})
	}
	dial := func(context.Context) (transport.Interface, error) { return transport.NewInProcessTransport(srv), nil }
	b.Run("baseline=mcp-go-one-pass", func(b *testing.B) {
		c := mcpclient.NewClient(transport.NewInProcessTransport(srv), mcpclient.WithProtocolVersion("2025-11-25"))
		if err := c.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Initialize(b.Context(), mcp.InitializeRequest{}); err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			req := mcp.ListResourcesRequest{}
			for {
				res, err := c.ListResourcesByPage(b.Context(), req)
				if err != nil {
					b.Fatal(err)
				}
				n += len(res.Resources)
				if res.NextCursor == "" {
					break
				}
				req.Params.Cursor = res.NextCursor
			}
			if n != 10000 {
				b.Fatal("listed", n)
			}
		}
	})
	b.Run("mcpsync-two-pass", func(b *testing.B) {
		c, err := mcpsync.Connect(b.Context(), dial, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			cat, err := c.Scan(b.Context(), mcpsync.KindResources)
			if err != nil || len(cat.Descriptors) != 10000 {
				b.Fatal("scan", err, len(cat.Descriptors))
			}
		}
	})
}
