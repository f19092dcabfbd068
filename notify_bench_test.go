package mcpsync

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// BenchmarkNotificationDecode is what the client spends on a
// resources/updated notification, as the transport decoded it, before it
// reaches the engine: the URI and the listen stream it names. Its baseline
// is the bare type assertion of the URI.
func BenchmarkNotificationDecode(b *testing.B) {
	var n mcp.JSONRPCNotification
	wire := `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///docs/a.md","_meta":{"` +
		mcp.MetaKeySubscriptionID + `":"7"}}}`
	if err := json.Unmarshal([]byte(wire), &n); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline", func(b *testing.B) { benchURIAssertion(b, n) })
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if notifiedURI(n.Params.AdditionalFields) == "" || streamIDOf(n) != "7" {
				b.Fatal("decoded wrong")
			}
		}
	})
}

// benchURIAssertion is the baseline of the notification benchmarks: the
// bare type assertion of the URI of n.
func benchURIAssertion(b *testing.B, n mcp.JSONRPCNotification) {
	b.ReportAllocs()
	for b.Loop() {
		if uri, _ := n.Params.AdditionalFields["uri"].(string); uri == "" {
			b.Fatal("no uri")
		}
	}
}

// BenchmarkNotificationPath is the whole client side of one
// notifications/resources/updated: the notification as the transport
// decoded it, counted for list_changed, queued and taken off the queue as
// the client's handler and pump do, then Client.handle up to and including
// the engine call it makes (Notify). The URI is subscribed on a live
// session and a read of it is on the wire, so every notification is
// coalesced into that read (marked dirty), as in a burst: the path every
// duplicate takes. Its baseline is the bare type assertion of the URI.
func BenchmarkNotificationPath(b *testing.B) {
	const uri = "file:///docs/a.md"
	srv := server.NewMCPServer("doc-server", "1.0.0", server.WithResourceCapabilities(true, true))
	srv.AddResource(mcp.NewResource(uri, "a", mcp.WithMIMEType("text/markdown")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/markdown", Text: "v1"}}, nil
		})
	c, err := Connect(b.Context(), func(context.Context) (transport.Interface, error) {
		return transport.NewInProcessTransport(srv), nil
	}, &ClientOptions{Subject: "user:alice", ProtocolVersion: "2025-11-25", NoResume: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Subscribe(b.Context(), uri); err != nil {
		b.Fatal(err)
	}
	// A read of the URI on the wire, which the benchmark never answers.
	t, ok, err := c.engine.Notify(uri)
	if err != nil || !ok {
		b.Fatal("no read issued", err)
	}
	c.engine.Sending(t)
	defer func() { _, _ = c.engine.Fail(t) }()

	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	before, err := c.engine.Subscription(uri)
	if err != nil {
		b.Fatal(err)
	}
	// The URI as the key (what servers send back for a URI subscribed by
	// its key), and spelled otherwise (scheme in capitals), which
	// normalizing rewrites; then that spelling again with a refresh
	// fraction below 1 that keeps the URI in (SetRefreshFraction), which
	// looks the key up before the engine does.
	inside := (position(uri) + 1) / 2
	for _, spelling := range []struct {
		name, uri string
		fraction  float64
	}{
		{"uri=key", uri, 1},
		{"uri=other-spelling", "FILE:///docs/a.md", 1},
		{"uri=other-spelling,rollout", "FILE:///docs/a.md", inside},
	} {
		var n mcp.JSONRPCNotification
		wire := `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"` + spelling.uri + `"}}`
		if err := json.Unmarshal([]byte(wire), &n); err != nil {
			b.Fatal(err)
		}
		if err := c.SetRefreshFraction(spelling.fraction); err != nil {
			b.Fatal(err)
		}
		b.Run(spelling.name, func(b *testing.B) {
			b.Run("baseline", func(b *testing.B) { benchURIAssertion(b, n) })
			b.Run("client", func(b *testing.B) {
				var q noteQueue
				q.init()
				var batch []note
				b.ReportAllocs()
				for b.Loop() {
					// The handler mcp-go calls (Connect), then the pump.
					c.countListChanged(n.Method)
					q.push(note{gen: conn.gen, conn: conn, n: n})
					<-q.ready
					batch = q.drain(batch)
					for _, x := range batch {
						c.handle(x)
					}
				}
			})
		})
	}
	after, err := c.engine.Subscription(uri)
	if err != nil {
		b.Fatal(err)
	}
	if after.LastNotificationSeq <= before.LastNotificationSeq || after.LastIssuedOrdinal != before.LastIssuedOrdinal {
		b.Fatalf("notifications not coalesced into the read in flight: %+v", after)
	}
}
