package main

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func TestScanOverHTTPPrintsCatalogs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     *mcpsynctest.ServerOptions
		protocol string
		status   string
	}{
		{"plain auto", nil, "auto", "SNAPSHOT_UNPROVEN"},
		{"plain legacy", nil, "2025-11-25", "SNAPSHOT_UNPROVEN"},
		{"snapshot", &mcpsynctest.ServerOptions{Snapshot: true}, "auto", "SNAPSHOT_PROVEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			r := runCmd(t.Context(), "scan", "--url", f.url, "--json", "--protocol", tc.protocol)
			require.Equal(t, exitOK, r.code, r)
			scans := ofKind(events(t, r.stdout), "scan")
			require.Len(t, scans, 2, r)

			res := scans[0]
			assert.Equal(t, "resources", res["kind"])
			assert.Equal(t, tc.status, res["status"])
			var uris []string
			for _, it := range res["items"].([]any) {
				item := it.(map[string]any)
				uris = append(uris, item["uri"].(string))
				assert.NotEmpty(t, item["name"])
				assert.NotEmpty(t, item["mimeType"])
			}
			assert.Equal(t, []string{"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md"}, uris)
			assert.NotEmpty(t, res["scans"], "the scan receipts")
			for _, k := range []string{"measuredAt", "staleAfter", "nextReviewAt"} {
				assert.NotEmpty(t, res[k], k)
			}

			tmpl := scans[1]
			assert.Equal(t, "resourceTemplates", tmpl["kind"])
			require.Len(t, tmpl["items"], 1)
			assert.Equal(t, "file:///docs/{name}.md", tmpl["items"].([]any)[0].(map[string]any)["uriTemplate"])
		})
	}
}

func TestScanTextIsReadable(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "scan", "--url", f.url)
	require.Equal(t, exitOK, r.code, r)
	for _, want := range []string{"resources: SNAPSHOT_UNPROVEN", "file:///docs/b.md", "resourceTemplates:", "attempt 1 pass B", "nextReviewAt"} {
		assert.Contains(t, r.stdout, want)
	}
}

func TestReadOverHTTPPrintsReceiptAndContent(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "read", "--url", f.url, "--json", "--subject", "user:alice", "file:///docs/b.md")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	require.Len(t, evs, 1, r)
	ev := evs[0]
	assert.Equal(t, "version", ev["event"])
	assert.Equal(t, "file:///docs/b.md", ev["uri"])
	assert.Equal(t, "ACCEPTED", ev["decision"])
	assert.EqualValues(t, 1, ev["ordinal"])
	assert.True(t, strings.HasPrefix(ev["digest"].(string), "sha256:"))
	receipt := ev["receipt"].(map[string]any)
	assert.Equal(t, "versionReceipt.v1", receipt["schema"])
	assert.Equal(t, "user:alice", receipt["version"].(map[string]any)["subject"])
	contents := ev["contents"].([]any)
	require.Len(t, contents, 1)
	assert.Equal(t, "bravo", contents[0].(map[string]any)["text"])

	// Flags after the URI work too, and text shows the content.
	r = runCmd(t.Context(), "read", "file:///docs/a.md", "--url", f.url)
	require.Equal(t, exitOK, r.code, r)
	assert.Contains(t, r.stdout, "versionReceipt.v1 ACCEPTED  file:///docs/a.md")
	assert.True(t, strings.HasSuffix(r.stdout, "\nalpha\n"), r.stdout)
}

func TestReadOfDeletedResourceIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Delete("file:///docs/c.md")
	r := runCmd(t.Context(), "read", "--url", f.url, "--json", "file:///docs/c.md")
	require.Equal(t, exitFailure, r.code, r)
	evs := events(t, r.stdout)
	require.Len(t, evs, 1)
	assert.Equal(t, "TOMBSTONE_PENDING", evs[0]["decision"], "the receipt of the not-found read is printed")
	assert.Contains(t, r.stderr, "not found")
}

func TestWatchForADurationEndsWithSummary(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--all", "--json", "--duration", "300ms", "--revalidate", "50ms")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	require.NotEmpty(t, evs)
	assert.Equal(t, "session", evs[0]["event"])
	assert.Len(t, ofKind(evs, "scan"), 1)
	assert.Len(t, ofKind(evs, "subscribed"), 3)
	versions := ofKind(evs, "version")
	require.GreaterOrEqual(t, len(versions), 3, "an initial read of every URI")
	for _, k := range []string{"uri", "ordinal", "digest", "sessionGeneration", "subscriptionGeneration"} {
		assert.Contains(t, versions[0], k)
	}
	closed := 0
	for _, st := range ofKind(evs, "state") {
		for _, k := range []string{"uri", "from", "to"} {
			assert.Contains(t, st, k)
		}
		if st["to"] == "CLOSED" {
			closed++
		}
	}
	assert.Equal(t, 3, closed, "every subscription is closed on the way out")
	assert.Len(t, ofKind(evs, "change"), 3, "one per first version")

	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.Equal(t, false, sum["interrupted"])
	assert.EqualValues(t, 3, sum["subscriptions"])
	assert.EqualValues(t, 3, sum["versionsAccepted"])
	assert.Contains(t, sum, "staleByReason")
	assert.Contains(t, sum, "readsPerNotification")
}

// watch takes the URIs to subscribe as arguments, as read does, and as
// --uri too.
func TestWatchTakesURIsAsArguments(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--json", "file:///docs/a.md", "--uri", "file:///docs/b.md", "--duration", "300ms")
	require.Equal(t, exitOK, r.code, r)
	var subscribed []any
	for _, ev := range ofKind(events(t, r.stdout), "subscribed") {
		subscribed = append(subscribed, ev["uri"])
	}
	assert.ElementsMatch(t, []any{"file:///docs/a.md", "file:///docs/b.md"}, subscribed)
}

// TestWatchFollowsChangesUntilInterrupted edits and deletes resources while
// watch runs, over both eras, and stops it as Ctrl-C would.
func TestWatchFollowsChangesUntilInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		opts           *mcpsynctest.ServerOptions
	}{
		{"auto", "auto", nil},
		{"legacy", "2025-11-25", nil},
		// auto first negotiates without the GET stream, then re-dials with it.
		{"auto on a legacy-only server", "auto", &mcpsynctest.ServerOptions{LegacyOnly: true}},
	} {
		protocol := tc.protocol
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			ctx, interrupt := context.WithCancel(t.Context())
			defer interrupt()
			out := newLineWriter()
			done := make(chan int, 1)
			go func() {
				var stderr strings.Builder
				done <- run(ctx, []string{"watch", "--url", f.url, "--protocol", protocol, "--json",
					"--uri", "file:///docs/a.md", "--uri", "file:///docs/b.md"}, strings.NewReader(""), out, &stderr)
			}()
			version := func(uri, decision, trigger string) func(map[string]any) bool {
				return func(ev map[string]any) bool {
					return ev["event"] == "version" && ev["uri"] == uri && ev["decision"] == decision && ev["trigger"] == trigger
				}
			}
			out.waitFor(t, "initial version of a", version("file:///docs/a.md", "ACCEPTED", "initial"))
			out.waitFor(t, "initial version of b", version("file:///docs/b.md", "ACCEPTED", "initial"))
			f.srv.Set("file:///docs/a.md", "text/markdown", "alpha 2")
			// In 2026-07-28, b's Subscribe replaced the listen stream and a,
			// carried over, is read again: a notification that arrives before
			// that read goes out is covered by it.
			out.waitFor(t, "the notified version", func(ev map[string]any) bool {
				return version("file:///docs/a.md", "ACCEPTED", "notification")(ev) || version("file:///docs/a.md", "ACCEPTED", "revalidate")(ev)
			})
			out.waitFor(t, "its invalidation", func(ev map[string]any) bool {
				return ev["event"] == "change" && ev["uri"] == "file:///docs/a.md" && ev["reason"] == "updated" && ev["previousDigest"] != nil
			})
			f.srv.Delete("file:///docs/b.md")
			out.waitFor(t, "the not-found read", version("file:///docs/b.md", "TOMBSTONE_PENDING", "notification"))
			interrupt()
			var code int
			select {
			case code = <-done:
			case <-t.Context().Done():
				require.FailNow(t, "watch did not stop")
			}
			require.Equal(t, exitOK, code, out.String())

			evs := events(t, out.String())
			if tc.opts != nil {
				assert.Equal(t, "2025-11-25", evs[0]["protocolVersion"])
				assert.NotEmpty(t, evs[0]["note"], "the re-dial is reported")
			}
			sum := evs[len(evs)-1]
			require.Equal(t, "summary", sum["event"])
			assert.Equal(t, true, sum["interrupted"])
			assert.EqualValues(t, 3, sum["versionsAccepted"])
			assert.EqualValues(t, 1, sum["tombstonesPending"])
			assert.GreaterOrEqual(t, sum["notifications"], 2.0)
			var states []string
			for _, st := range ofKind(evs, "state") {
				if st["uri"] == "file:///docs/a.md" {
					states = append(states, st["to"].(string))
				}
			}
			assert.Equal(t, []string{"UNSUBSCRIBING", "CLOSED"}, states[len(states)-2:], "a is unsubscribed on interrupt")
		})
	}
}

// TestStdioServer runs the test binary itself as the stdio server.
func TestStdioServer(t *testing.T) {
	t.Setenv(stdioServerEnv, "1")
	// A race-enabled child otherwise waits a second before it exits.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	self, err := os.Executable()
	require.NoError(t, err)

	r := runCmd(t.Context(), "read", "--json", "file:///docs/a.md", "--", self, "-test.run=^$")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	require.Len(t, evs, 1)
	assert.Equal(t, "hello over stdio", evs[0]["contents"].([]any)[0].(map[string]any)["text"])
	assert.Equal(t, "stdio-fixture", evs[0]["receipt"].(map[string]any)["version"].(map[string]any)["server"].(map[string]any)["name"])

	r = runCmd(t.Context(), "scan", "--json", "--", self)
	require.Equal(t, exitOK, r.code, r)
	assert.Len(t, ofKind(events(t, r.stdout), "scan")[0]["items"], 2)
}

// stdioBigEnv makes the stdio fixture's file:///docs/a.md 64 KiB long.
const stdioBigEnv = "MCPSYNC_TEST_STDIO_BIG"

// A stdio server whose line passes --max-message-bytes ends the session with
// an error naming the limit. Reconnecting cannot heal it (every new session
// breaks the same way), so watch exits non-zero instead of watching a dead
// session to its end.
func TestWatchExitsNonZeroOnFramingViolation(t *testing.T) {
	t.Setenv(stdioServerEnv, "1")
	t.Setenv(stdioBigEnv, "1")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	self, err := os.Executable()
	require.NoError(t, err)

	r := runCmd(t.Context(), "watch", "--json", "--uri", "file:///docs/a.md", "--duration", "3s",
		"--max-message-bytes", "4096", "--", self, "-test.run=^$")
	require.Equal(t, exitFailure, r.code, r)
	assert.Contains(t, r.stderr, "MaxMessageBytes")
	evs := events(t, r.stdout)
	assert.NotEmpty(t, ofKind(evs, "error"), "every failure is an error event")
	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.EqualValues(t, framingLossesToGiveUp-1, sum["reconnects"])
	// One failed read per session at least; a retry may fail too before
	// the loss of its session is seen.
	assert.GreaterOrEqual(t, sum["failedReads"], float64(framingLossesToGiveUp))
}

func TestDemoConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for about a second")
	}
	for _, protocol := range []string{"auto", "2025-11-25"} {
		t.Run(protocol, func(t *testing.T) {
			r := runCmd(t.Context(), "demo", "--protocol", protocol)
			require.Equal(t, exitOK, r.code, r)
			for _, want := range []string{
				"SNAPSHOT_UNPROVEN", "SNAPSHOT_PROVEN", "STALE_ORDINAL", "STALE_AFTER_CLOSE",
				"TOMBSTONE_PENDING -> TOMBSTONED", "URI", "LOCAL = SERVER", "0 mismatches",
			} {
				assert.Contains(t, r.stdout, want)
			}
			assert.NotContains(t, r.stdout, "NOT converged")
			assert.Empty(t, r.stderr)
		})
	}
}

func TestDemoJSONLines(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for about a second")
	}
	r := runCmd(t.Context(), "demo", "--json", "--seed", "7")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	for _, kind := range []string{"phase", "scan", "state", "version", "stale", "change", "delete", "check"} {
		assert.NotEmpty(t, ofKind(evs, kind), kind)
	}
	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.Equal(t, true, sum["ok"])
	assert.EqualValues(t, 0, sum["mismatches"])
	assert.EqualValues(t, 7, sum["seed"])
	stale := sum["staleByReason"].(map[string]any)
	assert.Contains(t, stale, "STALE_ORDINAL")
	assert.Contains(t, stale, "STALE_AFTER_CLOSE")
	for _, c := range ofKind(evs, "check") {
		assert.Equal(t, true, c["ok"], c)
	}
}

// Ctrl-C while the demo subscribes: run returns with nothing of the
// demo's client left running, so none of its callbacks prints after run
// returns (to output the caller may be reading or closing by then).
func TestDemoInterruptedWhileSubscribingLeavesNothingRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo's catalogs take most of a second")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	stdout := &interruptingWriter{at: `"name":"subscribe"`, interrupt: interrupt}
	var stderr strings.Builder
	code := run(ctx, []string{"demo", "--json"}, strings.NewReader(""), stdout, &stderr)
	assert.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", stdout, &stderr)
}

// interruptingWriter is output that interrupts the command, as Ctrl-C
// would, the moment a write contains at: before the command goes on.
type interruptingWriter struct {
	at        string
	interrupt context.CancelFunc

	mu  sync.Mutex // protects buf
	buf strings.Builder
}

func (w *interruptingWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.at) {
		w.interrupt()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *interruptingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// watch --all keeps scanning every --rescan: against a server without the
// snapshot extension that sends no list_changed, a deleted resource is
// tombstoned with corroborated evidence, and one created later is
// subscribed.
func TestWatchAllKeepsScanning(t *testing.T) {
	f := newFixture(t, &mcpsynctest.ServerOptions{SuppressListChanged: true})
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	out := newLineWriter()
	done := make(chan int, 1)
	go func() {
		var stderr strings.Builder
		done <- run(ctx, []string{"watch", "--url", f.url, "--json", "--all", "--rescan", "200ms"}, strings.NewReader(""), out, &stderr)
	}()
	subscribed := func(uri string) func(map[string]any) bool {
		return func(ev map[string]any) bool { return ev["event"] == "subscribed" && ev["uri"] == uri }
	}
	out.waitFor(t, "b subscribed", subscribed("file:///docs/b.md"))
	f.srv.Delete("file:///docs/b.md")
	out.waitFor(t, "b's corroborated tombstone", func(ev map[string]any) bool {
		evidence, _ := ev["evidence"].(map[string]any)
		return ev["event"] == "delete" && ev["uri"] == "file:///docs/b.md" && evidence["kind"] == "corroborated"
	})
	f.srv.Set("file:///docs/d.md", "text/plain", "delta")
	out.waitFor(t, "d subscribed by a later scan", subscribed("file:///docs/d.md"))
	interrupt()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, out.String())
	case <-t.Context().Done():
		require.FailNow(t, "watch did not stop")
	}
}

// Two spellings of one resource are one key (docs/guarantees.md: "Two spellings of one
// resource share one fence"): watch given both subscribes once, reports one
// subscription and counts the URI once in its summary.
func TestWatchCountsTwoSpellingsOfOneURIOnce(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--json", "--duration", "200ms",
		"file:///docs/a.md", "FILE:///docs/%61.md")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.Len(t, ofKind(evs, "subscribed"), 1, "one resource, one subscription")
	assert.EqualValues(t, 1, sum["subscriptions"], "one resource, one subscription")
}

// With --deletion unlisted, a resource the server stops listing is
// confirmed deleted by the kept scans alone, although its read still
// answers (here through a template, as a server that never says not found
// does): the tombstone names the evidence unlisted.
func TestWatchDeletionUnlistedConfirmsFromTheListing(t *testing.T) {
	srv := server.NewMCPServer("unlisting", "1.0.0", server.WithResourceCapabilities(false, false))
	read := func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: "[]"}}, nil
	}
	for _, name := range []string{"a", "b"} {
		srv.AddResource(mcp.NewResource("file:///docs/"+name+".md", name), read)
	}
	srv.AddResourceTemplate(mcp.NewResourceTemplate("file:///docs/{name}.md", "docs"), read)
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(hs.Close)

	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	out := newLineWriter()
	done := make(chan int, 1)
	go func() {
		var stderr strings.Builder
		done <- run(ctx, []string{"watch", "--url", hs.URL, "--json", "--all", "--rescan", "200ms", "--deletion", "unlisted"}, strings.NewReader(""), out, &stderr)
	}()
	out.waitFor(t, "b subscribed", func(ev map[string]any) bool { return ev["event"] == "subscribed" && ev["uri"] == "file:///docs/b.md" })
	srv.DeleteResources("file:///docs/b.md")
	out.waitFor(t, "b's unlisted tombstone", func(ev map[string]any) bool {
		evidence, _ := ev["evidence"].(map[string]any)
		return ev["event"] == "delete" && ev["uri"] == "file:///docs/b.md" && evidence["kind"] == "unlisted"
	})
	interrupt()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, out.String())
	case <-t.Context().Done():
		require.FailNow(t, "watch did not stop")
	}
}
