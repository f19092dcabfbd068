package mcpsync_test

import (
	"cmp"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// newScanRig is a rig of an mcpsynctest server holding five resources
// (faultURI not among them), so that a walk spans three pages of two.
func newScanRig(t *testing.T, w wiring, srvOpts *mcpsynctest.ServerOptions, policy ...mcpsync.DeletionPolicy) *rig {
	t.Helper()
	srv := mcpsynctest.NewServer(srvOpts)
	for i := range 5 {
		srv.Set(fmt.Sprintf("file:///docs/%d.md", i), "text/markdown", "body")
	}
	return buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Deletion: cmp.Or(policy...),
		Scanner: &mcpsync.ScannerOptions{MaxAttempts: 3, BackoffBase: 1, BackoffMax: 1}}})
}

func uriSet(c mcpsync.Catalog) []string {
	var out []string
	for d := range c.Items() {
		out = append(out, d.URI)
	}
	return out
}

// Multi-page change with a lost notification: resources are deleted and
// recreated between pages and no list_changed is ever sent. One scan never
// yields a complete catalog; two passes that differ are scanned again, and a
// catalog without snapshot proof is at best UNPROVEN, which completeness
// tasks refuse.
func TestFaultMultiPageChangeWithLostNotification(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			r := newScanRig(t, w, &mcpsynctest.ServerOptions{SuppressListChanged: true})
			// During the first pass only: 4.md is deleted before the walk
			// reaches it and recreated after the walk has ended, so that
			// pass misses it, and nothing says so.
			walks := 0
			r.srv.OnPage(func(kind string, page int) {
				if kind != mcpsynctest.KindResources {
					return
				}
				switch {
				case page == 1:
					walks++
					if walks == 1 {
						r.srv.Delete("file:///docs/4.md")
					}
				case page == 2 && walks == 1:
					r.srv.Set("file:///docs/4.md", "text/markdown", "back")
				}
			})
			cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status)
			require.GreaterOrEqual(t, len(cat.Scans), 4, "the attempt whose passes differed was scanned again")
			assert.Equal(t, 4, cat.Scans[0].ItemCount, "the first pass missed an item")
			assert.NotEqual(t, cat.Scans[0].SetDigest, cat.Scans[1].SetDigest, "so the passes differed")
			assert.ElementsMatch(t, []string{
				"file:///docs/0.md", "file:///docs/1.md", "file:///docs/2.md", "file:///docs/3.md", "file:///docs/4.md",
			}, uriSet(cat))
			_, err = cat.Proven(cat.MeasuredAt, r.c.Engine().SessionGeneration())
			require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven, "UNPROVEN is not a snapshot")
		})
	}
}

// Cyclic cursor: a page points back at an earlier one. The scan reports the
// cycle and never returns a catalog that looks complete.
func TestFaultCyclicCursor(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			r := newScanRig(t, w, nil)
			r.faults().CycleCursor(mcpsynctest.KindResources, 2, 2)
			cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
			require.ErrorIs(t, err, mcpsync.ErrScanUnreconciled)
			assert.Empty(t, uriSet(cat))
			require.NotEmpty(t, cat.Scans)
			assert.NotEmpty(t, cat.Scans[0].Faults, "the receipt records the cycle")
			_, err = cat.Proven(time.Now(), r.c.Engine().SessionGeneration())
			require.Error(t, err)
		})
	}
}

// Forged snapshot id: ids on pages of a server that never negotiated the
// extension, or ids that differ across pages, never make a catalog PROVEN.
func TestFaultForgedSnapshotID(t *testing.T) {
	for _, w := range eras {
		for _, tc := range []struct {
			name     string
			snapshot bool
			mode     mcpsynctest.ForgeMode
		}{
			{"id without the capability", false, mcpsynctest.ForgeMissing},
			{"ids differ across pages", true, mcpsynctest.ForgeVary},
		} {
			t.Run(w.name+"/"+tc.name, func(t *testing.T) {
				r := newScanRig(t, w, &mcpsynctest.ServerOptions{Snapshot: tc.snapshot})
				r.faults().ForgeSnapshotIDs(tc.mode)
				cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
				require.NoError(t, err)
				assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status, "forged ids are recorded, never trusted")
				forged := 0
				for _, s := range cat.Scans {
					forged += len(s.SnapshotFaults)
				}
				assert.NotZero(t, forged)
				_, err = cat.Proven(cat.MeasuredAt, r.c.Engine().SessionGeneration())
				require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
			})
		}
	}
}

// The snapshot extension end to end: a server that negotiated it and binds
// every page to one id yields SNAPSHOT_PROVEN in one pass, even with
// resources deleted and recreated between its pages.
func TestSnapshotProvenEndToEnd(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			// No list_changed: one during the proving pass would (rightly)
			// force another attempt, over a newer snapshot.
			r := newScanRig(t, w, &mcpsynctest.ServerOptions{Snapshot: true, SuppressListChanged: true})
			require.True(t, r.c.Capabilities().SnapshotList)
			r.srv.OnPage(func(kind string, page int) {
				if page == 1 {
					r.srv.Delete("file:///docs/4.md")
				}
			})
			cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotProven, cat.Status)
			assert.Len(t, uriSet(cat), 5, "the set as of the snapshot")
			items, err := cat.Proven(cat.MeasuredAt, r.c.Engine().SessionGeneration())
			require.NoError(t, err)
			assert.Len(t, items, 5)
		})
	}
}

// A deleted resource: its read says not found (TOMBSTONE_PENDING, nothing
// written downstream). A proven catalog confirms the deletion, with one
// outbox entry naming the proof. Without proof, an unproven catalog can
// only corroborate it, where the policy allows: the second read it sends
// says not found again, and that confirms it, naming both passes and both
// reads; under DeletionProvenOnly the URI is deferred and stays pending.
func TestTombstoneConfirmedByProofOrCorroboration(t *testing.T) {
	type catalog struct {
		name   string
		proven bool
		policy mcpsync.DeletionPolicy
	}
	cases := []catalog{
		{"proven", true, mcpsync.DeletionDefault},
		{"unproven/proven only", false, mcpsync.DeletionProvenOnly},
		{"unproven/corroborated", false, mcpsync.DeletionDefault},
	}
	eachEraAnd(t, cases, func(tc catalog) string { return tc.name }, func(t *testing.T, w wiring, tc catalog) {
		tombstoneThroughCatalog(t, w, tc.proven, tc.policy)
	})
}

func tombstoneThroughCatalog(t *testing.T, w wiring, proven bool, policy mcpsync.DeletionPolicy) {
	r := newScanRig(t, w, &mcpsynctest.ServerOptions{Snapshot: proven, SuppressListChanged: true}, policy)
	const gone = "file:///docs/4.md"
	r.watch(gone)
	quiesce()
	r.srv.Delete(gone) // its notification's read answers not found
	quiesce()
	sub, err := r.c.Engine().Subscription(gone)
	require.NoError(t, err)
	require.Equal(t, ledger.StateTombstonePending, sub.State)
	first := sub.Watermark
	before, err := r.c.Engine().PullOutbox(0, 0)
	require.NoError(t, err)

	cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
	require.NoError(t, err)
	rec, err := r.c.Reconcile(cat)
	require.NoError(t, err)
	quiesce() // the reads Reconcile sent
	sub, err = r.c.Engine().Subscription(gone)
	require.NoError(t, err)
	after, err := r.c.Engine().PullOutbox(0, 0)
	require.NoError(t, err)
	switch {
	case proven:
		assert.Equal(t, []string{gone}, rec.Tombstoned)
		require.Len(t, rec.Receipts, 1)
		assert.Equal(t, ledger.EvidenceProven, rec.Receipts[0].Evidence.Kind)
		assert.Equal(t, cat.SnapshotID, rec.Receipts[0].Evidence.SnapshotID)
	case policy == mcpsync.DeletionProvenOnly:
		assert.Equal(t, []string{gone}, rec.Deferred)
		assert.Equal(t, ledger.StateTombstonePending, sub.State)
		assert.Equal(t, before, after, "no tombstone from an unproven catalog")
		return
	default:
		assert.Equal(t, []string{gone}, rec.Corroborating)
		assert.Empty(t, rec.Tombstoned)
	}
	assert.Equal(t, ledger.StateTombstoned, sub.State)
	require.Len(t, after, len(before)+1)
	last := after[len(after)-1]
	assert.Equal(t, ledger.InvalidateTombstoned, last.Reason)
	require.NotNil(t, last.Evidence)
	if proven {
		assert.Equal(t, rec.Receipts[0].Evidence, *last.Evidence)
		return
	}
	n := len(cat.Scans)
	assert.Equal(t, ledger.DeletionEvidence{
		Kind: ledger.EvidenceCorroborated, Scans: []string{cat.Scans[n-2].ID, cat.Scans[n-1].ID},
		Reads: []uint64{first, sub.Watermark},
	}, *last.Evidence)
	assert.Greater(t, sub.Watermark, first)
}

// A server that declares no resources capability is told apart from a
// listing that failed: Scan says the server lists no resources
// (ErrNoResources) instead of an unreconciled scan of a method it does not
// have (-32601).
func TestScanOfAServerWithoutResources(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			bare := server.NewMCPServer("bare", "1.0.0", server.WithToolCapabilities(false))
			c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
				return transport.NewInProcessTransport(bare), nil
			}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: w.version})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			require.False(t, c.Capabilities().Resources)
			for _, kind := range []mcpsync.ListKind{mcpsync.KindResources, mcpsync.KindResourceTemplates} {
				_, err := c.Scan(t.Context(), kind)
				require.ErrorIs(t, err, mcpsync.ErrNoResources)
				assert.NotErrorIs(t, err, mcpsync.ErrScanUnreconciled)
			}
		})
	}
}

// unlistingServer is an mcp-go server that lists a.md and b.md and answers
// the read of any file:///docs/ URI, listed or not, as a server does that
// never says not found.
func unlistingServer() *server.MCPServer {
	srv := server.NewMCPServer("unlisting", "1.0.0", server.WithResourceCapabilities(false, false))
	read := func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: "[]"}}, nil
	}
	for _, name := range []string{"a", "b"} {
		srv.AddResource(mcp.NewResource("file:///docs/"+name+".md", name), read)
	}
	srv.AddResourceTemplate(mcp.NewResourceTemplate("file:///docs/{name}.md", "docs"), read)
	return srv
}

// A scan of the Client that fails ends the absence DeletionUnlisted was
// counting, as a failed catalog handed to Reconcile does: the server's
// listing failed, so what it did not list before proves nothing.
func TestFailedClientScanEndsTheAbsence(t *testing.T) {
	const b = "file:///docs/b.md"
	srv := unlistingServer()
	var kit *mcpsynctest.Transport
	c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
		kit = mcpsynctest.NewTransport(transport.NewInProcessTransport(srv), 1)
		return kit, nil
	}, &mcpsync.ClientOptions{Subject: alice, Deletion: mcpsync.DeletionUnlisted,
		Scanner: &mcpsync.ScannerOptions{MaxAttempts: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	_, err = c.Subscribe(t.Context(), b)
	require.NoError(t, err)
	srv.DeleteResources(b)

	cat, err := c.Scan(t.Context(), mcpsync.KindResources)
	require.NoError(t, err)
	rec, err := c.Reconcile(cat)
	require.NoError(t, err)
	assert.Equal(t, []string{b}, rec.Unlisted)
	sub, err := c.Engine().Subscription(b)
	require.NoError(t, err)
	require.NotNil(t, sub.Unlisted, "one clean scan without it")

	kit.FailNext(string(mcp.MethodResourcesList), "", mcp.INTERNAL_ERROR, "listing failed")
	_, err = c.Scan(t.Context(), mcpsync.KindResources)
	require.ErrorIs(t, err, mcpsync.ErrScanUnreconciled)
	sub, err = c.Engine().Subscription(b)
	require.NoError(t, err)
	assert.Nil(t, sub.Unlisted, "the failed scan ended it")
	assert.NotEqual(t, ledger.StateTombstoned, sub.State)
}
