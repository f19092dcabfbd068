package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

const counterURI = "file:///mcpgo/counter.txt"

// newMCPGoServer is an mcp-go server on loopback over streamable HTTP whose
// one resource changes on every read, as a clock, a log tail or a random
// sample does. wrap, if set, wraps its HTTP handler.
func newMCPGoServer(t *testing.T, wrap func(http.Handler) http.Handler) *httptest.Server {
	srv := server.NewMCPServer("mcp-go-http", "1.0.0", server.WithResourceCapabilities(true, false))
	var reads atomic.Int64
	srv.AddResource(mcp.NewResource(counterURI, "counter", mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{
				URI: counterURI, MIMEType: "text/plain", Text: fmt.Sprintf("read %d", reads.Add(1)),
			}}, nil
		})
	var h http.Handler = server.NewStreamableHTTPServer(srv)
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// httpDial connects over streamable HTTP; the legacy era receives
// notifications only on the standalone GET stream (continuous listening),
// which in turn rules out 2026-07-28.
func httpDial(url string, legacy bool) mcpsync.Dialer {
	return func(context.Context) (transport.Interface, error) {
		if legacy {
			return transport.NewStreamableHTTP(url, transport.WithContinuousListening())
		}
		return transport.NewStreamableHTTP(url)
	}
}

// Content that changes on every read: every read that passes is ACCEPTED
// with a new digest (never UNCHANGED), and concurrent reads are still put in
// order by the fence: in the order they were accepted (outbox order) read
// ordinals only rise, each version names the one before it, and a read
// overtaken by a newer one is refused STALE_ORDINAL instead of overwriting
// it. The served version is the newest accepted.
func TestMCPGoHTTPContentChangesEveryRead(t *testing.T) {
	for _, tc := range []struct {
		name, pin, want string
		legacy          bool
	}{
		{"modern", "", "2026-07-28", false},
		{"legacy", "2025-11-25", "2025-11-25", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newMCPGoServer(t, nil)
			c, outcomes := connect(t, httpDial(hs.URL, tc.legacy), mcpsync.ClientOptions{ProtocolVersion: tc.pin})
			assert.Equal(t, tc.want, c.Capabilities().ProtocolVersion)

			sub, err := c.Subscribe(t.Context(), counterURI)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode)
			first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))

			// Sequential reads: each one a new version after the last.
			prev := first.Version
			for range 3 {
				out, err := c.Read(t.Context(), counterURI)
				require.NoError(t, err)
				require.True(t, out.Accepted)
				assert.Equal(t, mcpsync.DecisionAccepted, out.Version.Decision)
				assert.NotEqual(t, prev.Version.Digest, out.Version.Version.Digest)
				assert.Equal(t, prev.Version.Digest, out.Version.PreviousDigest)
				assert.True(t, out.Version.Version.After(prev.Version))
				prev = out.Version
			}

			// Concurrent reads: whatever order the answers come in.
			const n = 16
			results := make([]mcpsync.Outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					out, err := c.Read(t.Context(), counterURI)
					if err != nil {
						assert.ErrorIs(t, err, mcpsync.ErrRefused)
					}
					results[i] = out
				})
			}
			wg.Wait()
			var accepted []mcpsync.VersionReceipt
			for _, out := range results {
				if out.Accepted {
					assert.Equal(t, mcpsync.DecisionAccepted, out.Version.Decision)
					accepted = append(accepted, out.Version)
				} else {
					assert.Equal(t, mcpsync.ReasonStaleOrdinal, out.Stale.Reason)
				}
			}
			require.NotEmpty(t, accepted)
			t.Logf("%d concurrent reads: %d accepted, %d refused as stale", n, len(accepted), n-len(accepted))
			slices.SortFunc(accepted, func(a, b mcpsync.VersionReceipt) int { return int(a.OutboxSeq) - int(b.OutboxSeq) })
			for _, v := range accepted {
				assert.True(t, v.Version.After(prev.Version), "versions only move forward")
				assert.Equal(t, prev.Version.Digest, v.PreviousDigest)
				prev = v
			}
			entry, err := c.Lookup(counterURI)
			require.NoError(t, err)
			assert.Equal(t, prev.Version, entry.Version, "the newest accepted version is served")
		})
	}
}

// legacyOnly makes the server look like one that predates 2026-07-28: it
// answers server/discover with method-not-found, as the TypeScript SDK does.
func legacyOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(body, &req) == nil && req.Method == string(mcp.MethodServerDiscover) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{
					"jsonrpc": "2.0", "id": req.ID,
					"error": map[string]any{"code": mcp.METHOD_NOT_FOUND, "message": "Method not found"},
				})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

// A server that answers only the legacy era: without a pin, and with a pin
// of 2026-07-28, mcp-go's probe is refused and the session falls back to
// 2025-11-25 (the pin does not make Connect fail); legacy pins are kept.
// The sync works the same in each.
func TestMCPGoHTTPLegacyOnlyServer(t *testing.T) {
	for _, tc := range []struct{ pin, want string }{
		{"", "2025-11-25"},
		{"2026-07-28", "2025-11-25"},
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
	} {
		t.Run("pin="+tc.pin, func(t *testing.T) {
			t.Parallel()
			hs := newMCPGoServer(t, legacyOnly)
			// HTTPDialer opens the notification stream a legacy session
			// needs; without it the subscription would poll, saying why.
			c, outcomes := connect(t, mcpsync.HTTPDialer(hs.URL, nil), mcpsync.ClientOptions{ProtocolVersion: tc.pin})
			assert.Equal(t, tc.want, c.Capabilities().ProtocolVersion)

			sub, err := c.Subscribe(t.Context(), counterURI)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode, "resources/subscribe")
			first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))
			out, err := c.Read(t.Context(), counterURI)
			require.NoError(t, err)
			assert.True(t, out.Version.Version.After(first.Version.Version))

			cat, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status)
			assert.Equal(t, mcpsync.EraLegacy, cat.Scans[0].Era)
			assert.Len(t, cat.Descriptors, 1)
		})
	}
}
