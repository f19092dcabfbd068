package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// answering serves srv over streamable HTTP and answers every request of
// method with the JSON-RPC error code instead, as a server that lists
// resources but implements no resources/templates/list answers -32601.
func answering(t *testing.T, srv *server.MCPServer, method string, code int) string {
	t.Helper()
	inner := server.NewStreamableHTTPServer(srv)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(body, &req) == nil && req.Method == method {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{
					"jsonrpc": "2.0", "id": req.ID,
					"error": map[string]any{"code": code, "message": "no " + method},
				})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// A list the server does not implement is reported with the status
// UNSUPPORTED and scan exits 0: resources/templates/list answered -32601
// (method not found), or no resources capability declared at all. What
// the server does list is still listed.
func TestScanReportsAListTheServerDoesNotImplementAsUnsupported(t *testing.T) {
	withResources := mcpsynctest.NewServer(nil)
	withResources.Set("file:///docs/a.md", "text/markdown", "alpha")
	withResources.Set("file:///docs/b.md", "text/markdown", "bravo")
	noTemplates := answering(t, withResources.MCPServer(), string(mcp.MethodResourcesTemplatesList), mcp.METHOD_NOT_FOUND)

	toolsOnly := server.NewMCPServer("tools-only", "1.0.0", server.WithToolCapabilities(false))
	toolsOnly.AddTool(mcp.NewTool("echo"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("echo"), nil
	})
	noResources := httptest.NewServer(server.NewStreamableHTTPServer(toolsOnly))
	t.Cleanup(noResources.Close)

	for _, tc := range []struct {
		name   string
		url    string
		status []string // of resources, then of resourceTemplates
		items  int      // resources listed
	}{
		{"templates/list method not found", noTemplates, []string{"SNAPSHOT_UNPROVEN", "UNSUPPORTED"}, 2},
		{"no resources capability", noResources.URL, []string{"UNSUPPORTED", "UNSUPPORTED"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, protocol := range []string{"auto", "2025-11-25"} {
				r := runCmd(t.Context(), "scan", "--url", tc.url, "--json", "--protocol", protocol)
				require.Equal(t, exitOK, r.code, r)
				scans := ofKind(events(t, r.stdout), "scan")
				require.Len(t, scans, 2, r)
				for i, kind := range []string{"resources", "resourceTemplates"} {
					assert.Equal(t, kind, scans[i]["kind"])
					assert.Equal(t, tc.status[i], scans[i]["status"], "%s over %s", kind, protocol)
					if tc.status[i] == "UNSUPPORTED" {
						assert.NotEmpty(t, scans[i]["reason"], "an unsupported list says why")
						assert.Empty(t, scans[i]["items"])
					}
				}
				assert.Len(t, scans[0]["items"], tc.items)
			}

			r := runCmd(t.Context(), "scan", "--url", tc.url)
			require.Equal(t, exitOK, r.code, r)
			assert.Contains(t, r.stdout, "resourceTemplates: UNSUPPORTED")
		})
	}
}

// Any other error of a list is a fault, not a status: scan prints what it
// saw and exits 1.
func TestScanFailsWhenAListAnswersAnotherError(t *testing.T) {
	srv := mcpsynctest.NewServer(nil)
	srv.Set("file:///docs/a.md", "text/markdown", "alpha")
	url := answering(t, srv.MCPServer(), string(mcp.MethodResourcesTemplatesList), mcp.INTERNAL_ERROR)
	r := runCmd(t.Context(), "scan", "--url", url, "--json")
	require.Equal(t, exitFailure, r.code, r)
	scans := ofKind(events(t, r.stdout), "scan")
	require.Len(t, scans, 2, r)
	assert.Equal(t, "SNAPSHOT_UNPROVEN", scans[0]["status"])
	assert.Equal(t, "UNRECONCILED", scans[1]["status"])
}
