package mcpsync_test

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// b42Wire wraps a transport: it counts every request by method, and fails
// (with a JSON-RPC error, the server never seeing it) each request for
// which fail, read under mu at the moment the request goes out, says so.
type b42Wire struct {
	transport.Interface
	mu    sync.Mutex
	n     map[string]int
	fail  func(method, uri string, n int) bool
	fails map[string]int
}

func newB42Wire(inner transport.Interface, fail func(method, uri string, n int) bool) *b42Wire {
	return &b42Wire{Interface: inner, n: map[string]int{}, fails: map[string]int{}, fail: fail}
}

func (w *b42Wire) setFail(f func(method, uri string, n int) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = f
}

func (w *b42Wire) count(method string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[method]
}

func (w *b42Wire) failed(method string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fails[method]
}

func b42URI(params any) string {
	raw, _ := json.Marshal(params)
	var p struct {
		URI string `json:"uri"`
	}
	_ = json.Unmarshal(raw, &p)
	return p.URI
}

func (w *b42Wire) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	uri := b42URI(req.Params)
	w.mu.Lock()
	w.n[req.Method]++
	n := w.n[req.Method]
	fail := w.fail != nil && w.fail(req.Method, uri, n)
	if fail {
		w.fails[req.Method]++
	}
	w.mu.Unlock()
	if fail {
		return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID,
			Error: &mcp.JSONRPCErrorDetails{Code: mcp.INTERNAL_ERROR, Message: "b42: failed"}}, nil
	}
	return w.Interface.SendRequest(ctx, req)
}
