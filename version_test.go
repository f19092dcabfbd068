package mcpsync_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// requireGolden checks the JSON of each value against its golden file in
// testdata/golden, named by its key, each in a subtest of that name; with
// -update it rewrites the files first.
func requireGolden(t *testing.T, files map[string]any) {
	t.Helper()
	test := t.Name()
	for name, v := range files {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			require.NoError(t, err)
			path := filepath.Join("testdata", "golden", name)
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, append(got, '\n'), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run %s -update", test)
			assert.JSONEq(t, string(want), string(got))
		})
	}
}

// The digest is the documented canonical form, computed here independently.
func TestDigestCanonicalForm(t *testing.T) {
	h := sha256.New()
	u64 := func(n int) {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	field := func(s string) { u64(len(s)); h.Write([]byte(s)) }
	h.Write([]byte("mcpsync.content.v1\x00"))
	u64(2)
	h.Write([]byte{'T'})
	field("file:///a.md")
	field("text/markdown")
	field("hello")
	h.Write([]byte{'B'})
	field("file:///a.md#raw")
	field("application/octet-stream")
	u64(3)
	h.Write([]byte{0, 1, 2})
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))

	r := mcpsync.NewReadResult([]mcpsync.Content{
		{URI: "file:///a.md", MIMEType: "text/markdown", Text: "hello"},
		{URI: "file:///a.md#raw", MIMEType: "application/octet-stream", Data: []byte{0, 1, 2}, Binary: true},
	})
	require.NoError(t, r.Err())
	assert.Equal(t, want, r.Digest())
}

func TestDigestCoversAllContentsAndNothingElse(t *testing.T) {
	base := func() *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{
			mcp.TextResourceContents{URI: "file:///a.md", MIMEType: "text/markdown", Text: "hello"},
			mcp.BlobResourceContents{URI: "file:///a.png", MIMEType: "image/png", Blob: "AAEC"},
		}}
	}
	digest := func(res *mcp.ReadResourceResult) string {
		r := mcpsync.ReadResultFromMCP(res)
		require.NoError(t, r.Err())
		return r.Digest()
	}
	same := digest(base())

	withMeta := base()
	withMeta.Contents[0] = mcp.TextResourceContents{URI: "file:///a.md", MIMEType: "text/markdown", Text: "hello", Meta: map[string]any{"etag": "x"}}
	withMeta.Meta = &mcp.Meta{AdditionalFields: map[string]any{"k": "v"}}
	assert.Equal(t, same, digest(withMeta), "_meta never changes the digest")
	assert.Equal(t, same, mcpsync.ReadResultFromMCP(base()).WithLastModified("2026-01-01T00:00:00Z").Digest(), "lastModified is a hint")

	respelled := base()
	respelled.Contents[0] = mcp.TextResourceContents{URI: "FILE:///a%2emd", MIMEType: "text/markdown", Text: "hello"}
	assert.Equal(t, same, digest(respelled), "two spellings of one URI are one resource")

	for name, change := range map[string]func(r *mcp.ReadResourceResult){
		"text": func(r *mcp.ReadResourceResult) {
			r.Contents[0] = mcp.TextResourceContents{URI: "file:///a.md", MIMEType: "text/markdown", Text: "hellO"}
		},
		"mime": func(r *mcp.ReadResourceResult) {
			r.Contents[0] = mcp.TextResourceContents{URI: "file:///a.md", MIMEType: "text/plain", Text: "hello"}
		},
		"blob": func(r *mcp.ReadResourceResult) {
			r.Contents[1] = mcp.BlobResourceContents{URI: "file:///a.png", MIMEType: "image/png", Blob: "AAED"}
		},
		"item uri": func(r *mcp.ReadResourceResult) {
			r.Contents[1] = mcp.BlobResourceContents{URI: "file:///b.png", MIMEType: "image/png", Blob: "AAEC"}
		},
		"order":   func(r *mcp.ReadResourceResult) { r.Contents[0], r.Contents[1] = r.Contents[1], r.Contents[0] },
		"dropped": func(r *mcp.ReadResourceResult) { r.Contents = r.Contents[:1] },
		"text→blob": func(r *mcp.ReadResourceResult) {
			r.Contents[0] = mcp.BlobResourceContents{URI: "file:///a.md", MIMEType: "text/markdown", Blob: "aGVsbG8="}
		},
	} {
		t.Run(name, func(t *testing.T) {
			changed := base()
			change(changed)
			assert.NotEqual(t, same, digest(changed))
		})
	}
}

func TestReadResultFromMCPRejectsBadInput(t *testing.T) {
	for name, res := range map[string]*mcp.ReadResourceResult{
		"bad base64":   {Contents: []mcp.ResourceContents{mcp.BlobResourceContents{URI: "file:///a", Blob: "not base64!"}}},
		"unknown item": {Contents: []mcp.ResourceContents{nil}},
	} {
		t.Run(name, func(t *testing.T) {
			r := mcpsync.ReadResultFromMCP(res)
			require.ErrorIs(t, r.Err(), mcpsync.ErrInvalidContent)
			assert.Empty(t, r.Digest())
		})
	}
	require.ErrorIs(t, mcpsync.ReadResultFromMCP(&mcp.ReadResourceResult{}).Err(), mcpsync.ErrEmptyContents)
	require.ErrorIs(t, mcpsync.ReadResultFromMCP(nil).Err(), mcpsync.ErrEmptyContents)

	// Through the fence: a typed error and a receipt.
	e := activeEngine(t, nil)
	tk := issue(t, e, ledger.TriggerInitial)
	out, err := e.AcceptResourceVersion(tk, mcpsync.ReadResultFromMCP(&mcp.ReadResourceResult{Contents: []mcp.ResourceContents{
		mcp.BlobResourceContents{URI: docURI, Blob: "%%%"},
	}}))
	require.ErrorIs(t, err, mcpsync.ErrInvalidContent)
	assert.Equal(t, mcpsync.ReasonInvalidContent, out.Stale.Reason)
	assert.Contains(t, out.Stale.Detail, "content 0")
}

// URI encoding confusion: a read of one spelling answered with another
// spelling of the same resource passes the fence as that resource, and both
// spellings reach the same subscription.
func TestURIEncodingConfusion(t *testing.T) {
	e := newEngine(t, nil)
	_, err := e.Subscribe("file:///docs/R%c3%a9sum%c3%a9.md", alice)
	require.NoError(t, err)
	_, err = e.Activate("file:///docs/Résumé.md", ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket("FILE:///docs/R%C3%A9sum%C3%A9.md", ledger.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, text("file:///docs/Résumé.md", "cv"))
	require.NoError(t, err)
	entry, err := e.Lookup(alice, "file:///docs/R%C3%A9sum%C3%A9.md")
	require.NoError(t, err)
	assert.Equal(t, "cv", entry.Contents[0].Text)

	// Different resources never share a key: %2F is not a path separator.
	_, err = e.Lookup(alice, "file:///docs%2FRésumé.md")
	require.ErrorIs(t, err, mcpsync.ErrUnknownURI)
}

// Golden files pin the JSON of every receipt.
func TestReceiptsGolden(t *testing.T) {
	clock := newClock()
	e := newEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	sub, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
	a := issue(t, e, ledger.TriggerInitial)
	b := issue(t, e, ledger.TriggerNotification)
	accepted, err := e.AcceptResourceVersion(b, text(docURI, "hello"))
	require.NoError(t, err)
	stale, err := e.AcceptResourceVersion(a, text(docURI, "older"))
	require.ErrorIs(t, err, mcpsync.ErrStaleOrdinal)
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "embeddings", ArtifactID: "chunk-1", Version: accepted.Version.Version}))
	revocation, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	closing, err := e.BeginClose(docURI)
	require.NoError(t, err)
	sub, err = e.Subscription(docURI)
	require.NoError(t, err)
	entries := outbox(t, e)
	// The engine's identity is random; the golden file pins where it goes.
	for i := range entries {
		require.Equal(t, e.ID(), entries[i].Engine)
		entries[i].Engine = "00000000-0000-4000-8000-000000000000"
	}
	require.Equal(t, e.ID(), sub.Capabilities.Engine)
	sub.Capabilities.Engine = "00000000-0000-4000-8000-000000000000"

	requireGolden(t, map[string]any{
		"version_receipt.json":    accepted.Version,
		"stale_receipt.json":      stale.Stale,
		"subscription.json":       sub,
		"outbox.json":             entries,
		"close_receipt.json":      closing,
		"revocation_receipt.json": revocation,
	})
}

// Preparing a read allocates what the result keeps, the normalized keys
// and the digest, and nothing on the way: every read prepares one.
func TestPreparingAReadAllocatesOnlyWhatItKeeps(t *testing.T) {
	if raceDetector {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	contents := []mcpsync.Content{{URI: docURI, MIMEType: "text/plain", Text: strings.Repeat("x", 1<<10)}}
	var r mcpsync.ReadResult
	n := testing.AllocsPerRun(1000, func() { r = mcpsync.NewReadResult(contents) })
	require.NoError(t, r.Err())
	assert.LessOrEqual(t, n, 2.0, "the keys and the digest")
}
