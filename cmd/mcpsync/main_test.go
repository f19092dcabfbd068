package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// stdioServerEnv makes the test binary act as an MCP stdio server, so the
// stdio path runs against a real subprocess without building anything.
const stdioServerEnv = "MCPSYNC_TEST_STDIO_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(stdioServerEnv) == "1" {
		dieOnce()
		srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "stdio-fixture"})
		text := "hello over stdio"
		if os.Getenv(stdioBigEnv) == "1" {
			text = strings.Repeat("big ", 16<<10)
		}
		srv.Set("file:///docs/a.md", "text/markdown", text)
		srv.Set("file:///docs/b.md", "text/markdown", "b")
		// ServeStdio returns when the client closes stdin.
		if err := server.ServeStdio(srv.MCPServer()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func runCmd(ctx context.Context, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// events parses JSON lines, requiring every line to be an object with an
// event field.
func events(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for line := range strings.Lines(out) {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "line %q", line)
		require.IsType(t, "", ev["event"], "line %q has no event field", line)
		evs = append(evs, ev)
	}
	return evs
}

func ofKind(evs []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["event"] == kind {
			out = append(out, ev)
		}
	}
	return out
}

// fixture is an mcpsynctest server on loopback over streamable HTTP.
type fixture struct {
	srv *mcpsynctest.Server
	url string
}

func newFixture(t *testing.T, opts *mcpsynctest.ServerOptions) fixture {
	t.Helper()
	srv := mcpsynctest.NewServer(opts)
	srv.Set("file:///docs/a.md", "text/markdown", "alpha")
	srv.Set("file:///docs/b.md", "text/markdown", "bravo")
	srv.Set("file:///docs/c.md", "text/plain", "charlie")
	srv.SetTemplate("file:///docs/{name}.md", "docs")
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	t.Cleanup(hs.Close)
	return fixture{srv: srv, url: hs.URL}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr + "/mcp"
}

// lineWriter lets a test follow the output of a command while it runs.
type lineWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // buffered 1: new output
}

func newLineWriter() *lineWriter { return &lineWriter{changed: make(chan struct{}, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor returns once a complete line satisfies match; it fails the test
// if none does within the bound.
func (w *lineWriter) waitFor(t *testing.T, what string, match func(ev map[string]any) bool) {
	t.Helper()
	bound := time.NewTimer(15 * time.Second)
	defer bound.Stop()
	for {
		for line := range strings.Lines(w.String()) {
			var ev map[string]any
			if strings.HasSuffix(line, "\n") && json.Unmarshal([]byte(line), &ev) == nil && match(ev) {
				return
			}
		}
		select {
		case <-w.changed:
		case <-bound.C:
			require.FailNow(t, "no "+what+" in the output", w.String())
		}
	}
}

func TestUsageErrorsExitTwoWithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"--url", "http://127.0.0.1:1"},
		{"scan"},
		{"scan", "--bogus", "--url", "http://127.0.0.1:1"},
		{"scan", "--url", "http://127.0.0.1:1", "--", "node", "server.js"},
		{"scan", "--url", "http://127.0.0.1:1", "--"},
		{"scan", "--url", "http://127.0.0.1:1", "extra"},
		{"scan", "--url", "http://127.0.0.1:1", "--protocol", "2024-11-05"},
		{"scan", "--url", "http://127.0.0.1:1", "--timeout", "0s"},
		{"scan", "--url", "http://127.0.0.1:1", "--timeout", "soon"},
		{"scan", "--url", "http://127.0.0.1:1", "--subject", ""},
		// --principal, the former name of --subject, is gone.
		{"scan", "--url", "http://127.0.0.1:1", "--principal", "user:alice"},
		// A --url that is no http(s) URL is a mistake in the command line.
		{"scan", "--url", "::not a url::"},
		{"scan", "--url", "localhost:8080/mcp"},
		{"scan", "--url", "http://"},
		{"read", "--url", "ftp://127.0.0.1/mcp", "file:///a"},
		{"watch", "--url", "127.0.0.1:8080", "--all"},
		{"scan", "--url", "http://127.0.0.1:1", "--json=maybe"},
		{"read", "--url", "http://127.0.0.1:1"},
		{"read", "--url", "http://127.0.0.1:1", "file:///a", "file:///b"},
		{"read", "file:///a"},
		{"watch", "--url", "http://127.0.0.1:1"},
		{"watch", "--url", "http://127.0.0.1:1", "file:///a", ""},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--duration", "-1s"},
		{"watch", "--url", "http://127.0.0.1:1", "--uri", ""},
		{"watch", "--all"},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--events", "change,bogus"},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--events", ""},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--events", "change,,error"},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--deletion", "maybe"},
		{"demo", "--url", "http://127.0.0.1:1"},
		{"demo", "--", "node", "server.js"},
		{"demo", "extra"},
		{"demo", "--resources", "2"},
		{"demo", "--protocol", "latest"},
		{"demo", "--ledger", "x.ledger"},
		{"read", "--url", "http://127.0.0.1:1", "file:///a", "--ledger"},
		{"scan", "--url", "http://127.0.0.1:1", "--ledger="},
		{"watch", "--url", "http://127.0.0.1:1", "--all", "--ledger", ""},
		{"outbox"},
		{"outbox", "--ledger"},
		{"outbox", "--ledger", "x.ledger", "extra"},
		{"outbox", "--ledger", "x.ledger", "--ack"},
		{"outbox", "--ledger", "x.ledger", "--consumer", "", "--ack"},
		{"outbox", "--ledger", "x.ledger", "--through", "-1"},
		{"outbox", "--ledger", "x.ledger", "--url", "http://127.0.0.1:1"},
		{"outbox", "--ledger", "x.ledger", "--", "node", "server.js"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCmd(t.Context(), args...)
			assert.Equal(t, exitUsage, r.code, r)
			assert.Empty(t, r.stdout, r)
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "mcpsync: "), r.stderr)
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"scan", "-h"}, {"read", "--help"}, {"watch", "-h"}, {"outbox", "-h"}, {"demo", "-h"}} {
		r := runCmd(t.Context(), args...)
		assert.Equal(t, exitOK, r.code, r)
		assert.Contains(t, r.stdout, "usage: mcpsync", r)
		assert.Empty(t, r.stderr)
	}
}

func TestRuntimeFailuresExitOneWithOneLine(t *testing.T) {
	f := newFixture(t, nil)
	for name, args := range map[string][]string{
		"closed port":       {"scan", "--url", closedPort(t), "--timeout", "5s"},
		"read unknown URI":  {"read", "--url", f.url, "file:///docs/missing.md"},
		"read invalid URI":  {"read", "--url", f.url, "::not a uri::"},
		"no such command":   {"scan", "--", "/nonexistent/mcp-server"},
		"watch closed port": {"watch", "--url", closedPort(t), "--all", "--duration", "1s"},
		"ledger in no dir":  {"read", "--url", f.url, "--ledger", filepath.Join(t.TempDir(), "missing", "x.ledger"), "file:///docs/a.md"},
		"outbox no ledger":  {"outbox", "--ledger", filepath.Join(t.TempDir(), "x.ledger")},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t.Context(), args...)
			assert.Equal(t, exitFailure, r.code, r)
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "mcpsync: "), r.stderr)
			assert.Equal(t, 1, strings.Count(r.stderr, "mcpsync:"), "said once: %q", r.stderr)
		})
	}
}

// A URI argument that is no URI is a usage error (exit 2, before anything
// is dialed), as a flag that cannot be parsed is, not a runtime failure
// after connecting.
func TestWatchWithAMalformedURIArgumentIsAUsageError(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--json", "--duration", "100ms", "::not a uri")
	assert.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
}
