package interop

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Two releases of the TypeScript SDK's reference server, pinned in
// testdata/npm/package.json, both on @modelcontextprotocol/sdk 1.32.2:
//
//   - 2026.8.31, the current rewrite: seven static documents on one list
//     page (list_changed declared), a subscribe handler that answers, and
//     resources/updated only after its toggle-subscriber-updates tool is
//     called (then at once and every 5 s); not found is -32602.
//   - 2025.9.25, the last release of the old single-file server: 100
//     resources on pages of 10, list_changed neither declared nor sent, a
//     subscribe handler that records the URI and then sends
//     sampling/createMessage, so subscribe fails for a client without
//     sampling; resources/updated for every recorded URI every 10 s; a read
//     of an unknown URI is a plain thrown Error, which the SDK answers with
//     -32603 (internal error), not with a not-found code.
var (
	everythingNow  = everythingServer{"@modelcontextprotocol/server-everything", "mcp-servers/everything"}
	everything2025 = everythingServer{"server-everything-2025.9.25", "example-servers/everything"}
)

type everythingServer struct {
	pkg  string // folder under node_modules
	name string // serverInfo.name
}

// server returns the server as a stdio process, after the install; the
// entry point and its argument are the package's bin and its start:stdio
// script.
func (e everythingServer) server(t testing.TB) *stdioServer {
	t.Helper()
	node := needNode(t)
	entry := filepath.Join(npmDir, "node_modules", e.pkg, "dist", "index.js")
	return &stdioServer{command: node, args: []string{entry, "stdio"}}
}

// TypeScript-SDK servers answer the legacy era only. Without a pin, mcp-go
// probes server/discover, the server answers method-not-found at once, and
// the client falls back to initialize at 2025-11-25. A pin of 2026-07-28
// fails the same probe and falls back the same way, silently: the era is
// what the server negotiated, not what was pinned.
func TestEverythingEras(t *testing.T) {
	cases := []struct{ pin, want string }{
		{"", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
		{"2025-11-25", "2025-11-25"},
		{"2026-07-28", "2025-11-25"},
	}
	for _, srv := range []everythingServer{everythingNow, everything2025} {
		for _, tc := range cases {
			t.Run(srv.pkg+"/pin="+tc.pin, func(t *testing.T) {
				t.Parallel()
				s := srv.server(t)
				c, _ := connect(t, s.dial, mcpsync.ClientOptions{ProtocolVersion: tc.pin})
				caps := c.Capabilities()
				assert.Equal(t, tc.want, caps.ProtocolVersion)
				assert.Equal(t, srv.name, caps.Server.Name)
				assert.True(t, caps.Resources && caps.Subscribe)
				assert.False(t, caps.SnapshotList)
				assert.Equal(t, srv == everythingNow, caps.ListChanged)

				// The era drives the scan's cursor rule: legacy.
				cat, err := c.Scan(t.Context(), mcpsync.KindResourceTemplates)
				require.NoError(t, err)
				assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status)
				assert.Equal(t, mcpsync.EraLegacy, cat.Scans[0].Era)
			})
		}
	}
}

// 100 resources on 10 pages, from a server that never sends list_changed:
// two identical passes make the catalog SNAPSHOT_UNPROVEN — never PROVEN,
// since the server has no snapshot extension — and a task that needs a
// complete enumeration is refused.
func TestEverythingPaginatedScan(t *testing.T) {
	t.Parallel()
	s := everything2025.server(t)
	c, _ := connect(t, s.dial, mcpsync.ClientOptions{})
	require.False(t, c.Capabilities().ListChanged, "2025.9.25 declares no list_changed")

	cat, err := c.Scan(t.Context(), mcpsync.KindResources)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status)
	assert.Empty(t, cat.SnapshotID)
	require.Len(t, cat.Descriptors, 100)
	require.Len(t, cat.Scans, 2, "two clean passes, no retry")
	for _, pass := range cat.Scans {
		assert.Equal(t, mcpsync.PassClean, pass.Outcome)
		assert.Equal(t, cat.SetDigest, pass.SetDigest)
		assert.Zero(t, pass.ListChangedSeen)
		assert.False(t, pass.SnapshotNegotiated)
		assert.Equal(t, 100, pass.ItemCount)
		require.Len(t, pass.Pages, 10)
		for i, page := range pass.Pages {
			assert.Equal(t, 10, page.ItemCount)
			// Cursors are kept as digests only; the first page has none.
			assert.Equal(t, i == 0, page.CursorDigest == "", "page %d", i)
			assert.Empty(t, page.SnapshotID)
		}
	}
	assert.Equal(t, cat.Scans[0].Pages, cat.Scans[1].Pages, "same cursors, same pages")
	assert.True(t, cat.MeasuredAt.Before(cat.NextReviewAt))

	_, err = cat.Proven(cat.MeasuredAt, c.Engine().SessionGeneration())
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)

	// One page, no nextCursor: the same verdict from the current release.
	now := everythingNow.server(t)
	c2, _ := connect(t, now.dial, mcpsync.ClientOptions{})
	cat2, err := c2.Scan(t.Context(), mcpsync.KindResources)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat2.Status)
	assert.Len(t, cat2.Descriptors, 7)
	assert.Len(t, cat2.Scans[0].Pages, 1)
	_, err = cat2.Proven(cat2.MeasuredAt, c2.Engine().SessionGeneration())
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
}

// The misbehaving subscribe: server-everything 2025.9.25 records the URI and
// then asks the client for sampling; mcpsync declares no sampling, the
// request fails, and so does the subscribe. The subscription therefore
// polls (ledger.ModePoll) — but the server does notify the URI it recorded, and
// those notifications still trigger fenced reads.
func TestEverythingSubscribeFailsAfterRecording(t *testing.T) {
	t.Parallel()
	s := everything2025.server(t)
	c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{})
	const uri = "test://static/resource/1"

	sub, err := c.Subscribe(t.Context(), uri)
	require.NoError(t, err)
	assert.Equal(t, ledger.ModePoll, sub.Mode, "subscribe failed, so the subscription polls")
	first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))

	// The server's 10 s interval notifies the URI it recorded anyway. Its
	// content is static, so the read it triggers changes nothing.
	pushed := await(t, outcomes, "triggered by a notification", decided(mcpsync.DecisionUnchanged, ledger.TriggerNotification))
	assert.Equal(t, first.Version.Version.Digest, pushed.Version.Version.Digest)
	assert.Greater(t, pushed.Version.Version.ReadOrdinal, first.Version.Version.ReadOrdinal)

	entry, err := c.Lookup(uri)
	require.NoError(t, err)
	assert.Equal(t, "Resource 1: This is a plaintext resource", entry.Contents[0].Text)
	got, err := c.Engine().Subscription(uri)
	require.NoError(t, err)
	assert.Equal(t, ledger.ModePoll, got.Mode)
}

// Reads through the fence: text and blob versions are accepted, a re-read of
// unchanged content is UNCHANGED with the same digest, and a missing
// resource is recognised by its code where the server sends one.
func TestEverythingReads(t *testing.T) {
	cases := []struct {
		srv           everythingServer
		text, blob    string
		missing       string
		missingCode   int
		tombstoneable bool
	}{
		// -32602 is not-found: TOMBSTONE_PENDING, for list reconciliation
		// to confirm.
		{everythingNow, "demo://resource/static/document/features.md", "", "demo://resource/static/document/missing.md", -32602, true},
		// -32603 says nothing about the resource: the read fails, no
		// version, no tombstone, the subscription stays open.
		{everything2025, "test://static/resource/1", "test://static/resource/2", "test://static/resource/1000", -32603, false},
	}
	for _, tc := range cases {
		t.Run(tc.srv.pkg, func(t *testing.T) {
			t.Parallel()
			s := tc.srv.server(t)
			c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{})

			for _, uri := range []string{tc.text, tc.blob} {
				if uri == "" {
					continue
				}
				_, err := c.Subscribe(t.Context(), uri)
				require.NoError(t, err)
				first := await(t, outcomes, "initial "+uri, decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))
				assert.Equal(t, uri, first.Version.Version.URI)
				for range 2 {
					again, err := c.Read(t.Context(), uri)
					if !again.Accepted && again.Stale.Reason == mcpsync.ReasonStaleOrdinal {
						continue // a read the server's notification triggered passed first
					}
					require.NoError(t, err)
					require.True(t, again.Accepted)
					assert.Equal(t, mcpsync.DecisionUnchanged, again.Version.Decision)
					assert.Equal(t, first.Version.Version.Digest, again.Version.Version.Digest)
					assert.Greater(t, again.Version.Version.ReadOrdinal, first.Version.Version.ReadOrdinal)
				}
				entry, err := c.Lookup(uri)
				require.NoError(t, err)
				assert.Equal(t, tc.srv.name, entry.Version.Server.Name)
				assert.NotEmpty(t, entry.Contents)
			}

			_, err := c.Subscribe(t.Context(), tc.missing)
			if tc.tombstoneable {
				// Subscribe's first read says the server has no such resource.
				require.ErrorIs(t, err, mcpsync.ErrNotFound)
			} else {
				require.NoError(t, err)
			}
			if tc.tombstoneable {
				out := await(t, outcomes, "of the missing URI", decided(mcpsync.DecisionTombstonePending, ledger.TriggerInitial))
				assert.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
				sub, err := c.Engine().Subscription(tc.missing)
				require.NoError(t, err)
				assert.Equal(t, ledger.StateTombstonePending, sub.State)
				return
			}
			// The initial read failed the same way and reported no outcome.
			out, err := c.Read(t.Context(), tc.missing)
			require.Error(t, err)
			assert.Equal(t, tc.missingCode, rpcCode(err))
			assert.False(t, out.Accepted)
			sub, err := c.Engine().Subscription(tc.missing)
			require.NoError(t, err)
			assert.NotEqual(t, ledger.StateTombstonePending, sub.State)
			_, err = c.Lookup(tc.missing)
			assert.ErrorIs(t, err, mcpsync.ErrNoVersion)
		})
	}
}

// The current release subscribes cleanly (ledger.ModePush) and notifies once its
// toggle-subscriber-updates tool is called: at once, then every 5 s.
func TestEverythingPushNotifications(t *testing.T) {
	t.Parallel()
	s := everythingNow.server(t)
	c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{})
	const uri = "demo://resource/static/document/features.md"

	sub, err := c.Subscribe(t.Context(), uri)
	require.NoError(t, err)
	assert.Equal(t, ledger.ModePush, sub.Mode)
	first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))

	s.callTool(t, "toggle-subscriber-updates", map[string]any{})
	pushed := await(t, outcomes, "triggered by a notification", decided(mcpsync.DecisionUnchanged, ledger.TriggerNotification))
	assert.Equal(t, first.Version.Version.Digest, pushed.Version.Version.Digest)

	closed, err := c.Unsubscribe(t.Context(), uri)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateClosed, closed.State, "resources/unsubscribe acknowledged")
}
