package wire

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// nopTransport answers every request at once, on the caller's goroutine.
type nopTransport struct{ resp transport.JSONRPCResponse }

func (n *nopTransport) Start(context.Context) error { return nil }
func (n *nopTransport) SendRequest(context.Context, transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	return &n.resp, nil
}
func (n *nopTransport) SendNotification(context.Context, mcp.JSONRPCNotification) error { return nil }
func (n *nopTransport) SetNotificationHandler(func(mcp.JSONRPCNotification))            {}
func (n *nopTransport) Close() error                                                    { return nil }
func (n *nopTransport) GetSessionId() string                                            { return "" }

// BenchmarkSendInner measures what a request pays for the guarantee that it
// returns at its context's end, on a transport that answers at once: called
// on the caller's goroutine (a transport that returns at its context's end
// on its own), handed to a waiting worker, and, the baseline, a goroutine
// of its own with a channel back.
func BenchmarkSendInner(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("inline", func(b *testing.B) {
		t := &Transport{inner: &nopTransport{}, inline: true, workers: &workers{}}
		b.ReportAllocs()
		for b.Loop() {
			t.sendInner(ctx, transport.JSONRPCRequest{})
		}
	})
	b.Run("worker", func(b *testing.B) {
		t := &Transport{inner: &nopTransport{}, workers: &workers{}}
		defer t.workers.stop()
		b.ReportAllocs()
		for b.Loop() {
			t.sendInner(ctx, transport.JSONRPCRequest{})
		}
	})
	b.Run("baseline=goroutine-per-request", func(b *testing.B) {
		inner := &nopTransport{}
		b.ReportAllocs()
		for b.Loop() {
			done := make(chan *transport.JSONRPCResponse, 1)
			go func() {
				r, _ := inner.SendRequest(ctx, transport.JSONRPCRequest{})
				done <- r
			}()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
	})
}
