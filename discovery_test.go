package mcpsync_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// fakeListing is a scripted server list method with keyset cursors
// ("after:" and the last key of the page), the pagination the cursor toolkit
// uses. Tests change the list between calls to script the faults of the seed.
type fakeListing struct {
	mu       sync.Mutex // protects every field below
	kind     mcpsync.ListKind
	items    []mcpsync.Descriptor // sorted by key
	size     int
	calls    int
	firsts   int       // calls without a cursor: the passes started
	received []*string // the cursors sent, in order
	// onCall, if set, runs before call n (0-based over all passes) is
	// answered; it may change l.items or return an error to answer with.
	onCall func(n int, l *fakeListing) error
	// snapshot, if set, gives the snapshot id of call n.
	snapshot func(n int) string
}

func newFakeListing(kind mcpsync.ListKind, size int, keys ...string) *fakeListing {
	l := &fakeListing{kind: kind, size: size}
	for _, k := range keys {
		l.items = append(l.items, itemOf(kind, k))
	}
	return l
}

func itemOf(kind mcpsync.ListKind, key string) mcpsync.Descriptor {
	switch kind {
	case mcpsync.KindResources:
		return mcpsync.Descriptor{URI: key, Name: filepath.Base(key), MIMEType: "text/markdown"}
	case mcpsync.KindResourceTemplates:
		return mcpsync.Descriptor{URITemplate: key, Name: "template", MIMEType: "text/plain"}
	}
	return mcpsync.Descriptor{Name: key}
}

func itemKey(d mcpsync.Descriptor) string {
	if d.URI != "" || d.URITemplate != "" {
		return d.URI + d.URITemplate
	}
	return d.Name
}

func (l *fakeListing) remove(key string) {
	l.items = slices.DeleteFunc(l.items, func(d mcpsync.Descriptor) bool { return itemKey(d) == key })
}

func (l *fakeListing) add(key string) {
	l.items = append(l.items, itemOf(l.kind, key))
	slices.SortFunc(l.items, func(a, b mcpsync.Descriptor) int { return strings.Compare(itemKey(a), itemKey(b)) })
}

func (l *fakeListing) page(_ context.Context, cursor *string) (mcpsync.Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.calls
	l.calls++
	l.received = append(l.received, cursor)
	if cursor == nil {
		l.firsts++
	}
	if l.onCall != nil {
		if err := l.onCall(n, l); err != nil {
			return mcpsync.Page{}, err
		}
	}
	start := 0
	if cursor != nil {
		after := strings.TrimPrefix(*cursor, "after:")
		for start < len(l.items) && itemKey(l.items[start]) <= after {
			start++
		}
	}
	end := min(start+l.size, len(l.items))
	p := mcpsync.Page{Items: slices.Clone(l.items[start:end])}
	if end < len(l.items) {
		next := "after:" + itemKey(l.items[end-1])
		p.NextCursor = &next
	}
	if l.snapshot != nil {
		p.SnapshotID = l.snapshot(n)
	}
	return p, nil
}

// scriptedList is a list method answering from a table of pages by cursor
// ("" is the first page; a cursor "" of the modern era is keyed "<empty>").
type scriptedList struct {
	pages    map[string]mcpsync.Page
	errs     map[string]error
	received []*string
}

func (s *scriptedList) page(_ context.Context, cursor *string) (mcpsync.Page, error) {
	s.received = append(s.received, cursor)
	key := ""
	if cursor != nil {
		key = *cursor
		if key == "" {
			key = "<empty>"
		}
	}
	if err := s.errs[key]; err != nil {
		return mcpsync.Page{}, err
	}
	p, ok := s.pages[key]
	if !ok {
		return mcpsync.Page{}, &mcpsync.RPCError{Method: "resources/list", Code: mcp.INVALID_PARAMS, Message: "unknown cursor"}
	}
	return p, nil
}

func cursorOf(s string) *string { return &s }

func resourceItems(uris ...string) []mcpsync.Descriptor {
	out := make([]mcpsync.Descriptor, len(uris))
	for i, u := range uris {
		out[i] = itemOf(mcpsync.KindResources, u)
	}
	return out
}

// listChangedCounter is a list_changed counter a fake server bumps.
type listChangedCounter struct {
	mu sync.Mutex
	n  uint64
}

func (c *listChangedCounter) bump() { c.mu.Lock(); c.n++; c.mu.Unlock() }

func (c *listChangedCounter) load() uint64 { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// fixedJitter is a rand.Source that always returns itself, so jitter is known.
type fixedJitter uint64

func (s fixedJitter) Uint64() uint64 { return uint64(s) }

func newTestScanner(t testing.TB, opts *mcpsync.ScannerOptions) *mcpsync.Scanner {
	t.Helper()
	if opts == nil {
		opts = &mcpsync.ScannerOptions{}
	}
	if opts.Rand == nil {
		opts.Rand = fixedJitter(0)
	}
	s, err := mcpsync.NewScanner(opts)
	require.NoError(t, err)
	return s
}

var (
	capsPlain    = ledger.CapabilityReceipt{ProtocolVersion: "2025-11-25", Resources: true, ListChanged: true, SessionGeneration: 1}
	capsSnapshot = ledger.CapabilityReceipt{ProtocolVersion: "2025-11-25", Resources: true, ListChanged: true, SnapshotList: true, SessionGeneration: 1}
)

// runScan runs one scan in a synctest bubble, so every backoff wait is virtual.
func runScan(t *testing.T, s *mcpsync.Scanner, kind mcpsync.ListKind, era mcpsync.Era, caps ledger.CapabilityReceipt, pages mcpsync.PageFunc, changed func() uint64) (mcpsync.Catalog, error) {
	t.Helper()
	var c mcpsync.Catalog
	var err error
	synctest.Test(t, func(t *testing.T) {
		c, err = s.Scan(t.Context(), kind, era, caps, pages, changed)
	})
	return c, err
}

func catalogKeys(c mcpsync.Catalog) []string {
	var out []string
	for d := range c.Items() {
		out = append(out, d.Key())
	}
	return out
}

func requireUnreconciled(t *testing.T, c mcpsync.Catalog, err error, cause error) {
	t.Helper()
	require.ErrorIs(t, err, mcpsync.ErrScanUnreconciled)
	require.ErrorIs(t, err, cause)
	assert.Equal(t, mcpsync.CatalogUnreconciled, c.Status)
	assert.Empty(t, c.Descriptors, "an unreconciled catalog must not look complete")
	assert.Empty(t, catalogKeys(c))
	assert.Empty(t, c.SetDigest)
	assert.Equal(t, c.MeasuredAt, c.StaleAfter, "an unreconciled catalog is stale at once")
	_, cerr := c.Proven(c.MeasuredAt.Add(-time.Hour), c.SessionGeneration)
	require.ErrorIs(t, cerr, mcpsync.ErrSnapshotUnproven)
}

// The seed's first discovery fault: while pass A walks three pages, an item
// is deleted (and recreated right after the pass) and the list_changed
// notification is lost. Pass A looks clean but misses the item; only the
// comparison with pass B shows it, so the scan starts over. A single pass
// never yields a catalog.
func TestMultiPageChangeWithLostNotification(t *testing.T) {
	script := func(l *fakeListing) {
		l.onCall = func(n int, l *fakeListing) error {
			switch n {
			case 1: // between pages 0 and 1 of pass A
				l.remove("file:///c")
			case 3: // first page of pass B
				l.add("file:///c")
			}
			return nil
		}
	}
	all := []string{"file:///a", "file:///b", "file:///c", "file:///d", "file:///e", "file:///f"}

	t.Run("rescan", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindResources, 2, all...)
		script(l)
		var notifications listChangedCounter // the notification is lost: it never moves
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, notifications.load)
		require.NoError(t, err)
		require.Len(t, c.Scans, 4)
		a, b := c.Scans[0], c.Scans[1]
		assert.Equal(t, mcpsync.PassClean, a.Outcome, "pass A looks clean on its own")
		assert.Equal(t, 5, a.ItemCount)
		assert.NotEqual(t, a.SetDigest, b.SetDigest)
		assert.Equal(t, 2, c.Scans[2].Attempt)
		assert.Equal(t, c.Scans[2].SetDigest, c.Scans[3].SetDigest)
		assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
		assert.Equal(t, all, catalogKeys(c))
		assert.Equal(t, 4, l.firsts, "each pass starts from the first page")
	})

	t.Run("one attempt never yields a catalog", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindResources, 2, all...)
		script(l)
		c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 1}), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
		requireUnreconciled(t, c, err, mcpsync.ErrListUnstable)
		require.Len(t, c.Scans, 2)
	})
}

// eachPassFault checks that every pass of c ended as outcome with one
// fault, of kind fault, and returns those faults, one a pass.
func eachPassFault(t *testing.T, c mcpsync.Catalog, outcome mcpsync.PassOutcome, fault mcpsync.FaultKind) []mcpsync.ScanFault {
	t.Helper()
	var faults []mcpsync.ScanFault
	for _, r := range c.Scans {
		assert.Equal(t, outcome, r.Outcome)
		require.Len(t, r.Faults, 1)
		assert.Equal(t, fault, r.Faults[0].Fault)
		faults = append(faults, r.Faults[0])
	}
	return faults
}

func TestCyclicCursor(t *testing.T) {
	first := mcpsync.Page{Items: resourceItems("file:///a"), NextCursor: cursorOf("secret-cursor-x")}
	for _, tc := range []struct {
		name  string
		pages map[string]mcpsync.Page
		page  int // where the cycle is detected
	}{
		{"a page names its own cursor", map[string]mcpsync.Page{
			"":                first,
			"secret-cursor-x": {Items: resourceItems("file:///b"), NextCursor: cursorOf("secret-cursor-x")},
		}, 2},
		{"two cursors alternate", map[string]mcpsync.Page{
			"":                first,
			"secret-cursor-x": {Items: resourceItems("file:///b"), NextCursor: cursorOf("secret-cursor-y")},
			"secret-cursor-y": {Items: resourceItems("file:///c"), NextCursor: cursorOf("secret-cursor-x")},
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &scriptedList{pages: tc.pages}
			c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 2}), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, srv.page, nil)
			requireUnreconciled(t, c, err, mcpsync.ErrCursorCycle)
			require.Len(t, c.Scans, 2, "a cycle ends the attempt after pass A")
			for _, f := range eachPassFault(t, c, mcpsync.PassAborted, mcpsync.FaultCursorCycle) {
				assert.Equal(t, tc.page, f.Page)
				assert.Equal(t, mcpsync.CursorDigest("secret-cursor-x"), f.CursorDigest)
			}
			raw, err := json.Marshal(c)
			require.NoError(t, err)
			assert.NotContains(t, string(raw), "secret-cursor", "receipts keep digests, never cursors")

			var walked []string
			for d, err := range newTestScanner(t, nil).Walk(t.Context(), mcpsync.KindResources, mcpsync.EraLegacy, srv.page) {
				if err != nil {
					require.ErrorIs(t, err, mcpsync.ErrCursorCycle)
					break
				}
				walked = append(walked, d.URI)
			}
			assert.Len(t, walked, tc.page)
		})
	}

	t.Run("a cycle in one attempt only is scanned again", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindResources, 1, "file:///a", "file:///b", "file:///c")
		l.onCall = func(n int, l *fakeListing) error { return nil }
		cycling := func(ctx context.Context, cursor *string) (mcpsync.Page, error) {
			p, err := l.page(ctx, cursor)
			if l.calls == 2 { // the first pass's second page points back to itself
				p.NextCursor = cursor
			}
			return p, err
		}
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, cycling, nil)
		require.NoError(t, err)
		require.Len(t, c.Scans, 3)
		assert.Equal(t, mcpsync.PassAborted, c.Scans[0].Outcome)
		assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
		assert.Equal(t, []string{"file:///a", "file:///b", "file:///c"}, catalogKeys(c))
	})
}

func TestForgedSnapshotID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		caps     ledger.CapabilityReceipt
		snapshot func(n int) string // n counts calls over all passes, 3 pages a pass
		fault    mcpsync.FaultKind
		pages    []int // pages of each pass with a fault
	}{
		{"id without the capability", capsPlain, func(int) string { return "snap-1" },
			mcpsync.FaultSnapshotNotNegotiated, []int{0, 1, 2}},
		{"ids differ across pages", capsSnapshot, func(n int) string {
			if n%3 == 2 {
				return "snap-2"
			}
			return "snap-1"
		}, mcpsync.FaultSnapshotIDDiffers, []int{2}},
		{"id missing on one page", capsSnapshot, func(n int) string {
			if n%3 == 1 {
				return ""
			}
			return "snap-1"
		}, mcpsync.FaultSnapshotIDMissing, []int{1}},
		{"capability but no ids", capsSnapshot, func(int) string { return "" },
			mcpsync.FaultSnapshotIDMissing, []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeListing(mcpsync.KindResources, 1, "file:///a", "file:///b", "file:///c")
			l.snapshot = tc.snapshot
			c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, tc.caps, l.page, nil)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status, "a forged snapshot falls back to the two-pass rule")
			assert.Empty(t, c.SnapshotID)
			require.Len(t, c.Scans, 2, "one pass is not enough without a proof")
			for _, r := range c.Scans {
				assert.Empty(t, r.SnapshotID)
				var pages []int
				for _, f := range r.SnapshotFaults {
					assert.Equal(t, tc.fault, f.Fault)
					pages = append(pages, f.Page)
				}
				assert.Equal(t, tc.pages, pages)
			}
			_, err = c.Proven(c.MeasuredAt, c.SessionGeneration)
			require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
		})
	}
}

func TestSnapshotProvenOnlyWithCapabilityAndOneID(t *testing.T) {
	clock := &tickingClock{t: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	l := newFakeListing(mcpsync.KindResources, 2, "file:///a", "file:///b", "file:///c")
	l.snapshot = func(int) string { return "snap-7" }
	s := newTestScanner(t, &mcpsync.ScannerOptions{Now: clock.now, StaleAfter: time.Minute, ReviewAfter: 20 * time.Second})
	c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsSnapshot, l.page, nil)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.CatalogSnapshotProven, c.Status)
	assert.Equal(t, "snap-7", c.SnapshotID)
	require.Len(t, c.Scans, 1, "one pass suffices with a proof")
	assert.Equal(t, 1, l.firsts)
	assert.Equal(t, "snap-7", c.Scans[0].SnapshotID)
	assert.Empty(t, c.Scans[0].SnapshotFaults)
	// The snapshot answered the first page, so it is no newer than the
	// start of the pass.
	assert.Equal(t, c.Scans[0].StartedAt, c.MeasuredAt)
	assert.True(t, c.Scans[0].EndedAt.After(c.MeasuredAt))
	assert.Equal(t, c.MeasuredAt.Add(time.Minute), c.StaleAfter)
	assert.Equal(t, c.MeasuredAt.Add(20*time.Second), c.NextReviewAt)

	items, err := c.Proven(c.MeasuredAt, capsSnapshot.SessionGeneration)
	require.NoError(t, err)
	assert.Equal(t, c.Descriptors, items)

	t.Run("without the capability the same pages prove nothing", func(t *testing.T) {
		c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
		require.NoError(t, err)
		assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
	})

	t.Run("a proven pass with list_changed proves nothing", func(t *testing.T) {
		var changed listChangedCounter
		first := l.calls
		l.onCall = func(n int, _ *fakeListing) error {
			if n == first { // during the first pass of this scan only
				changed.bump()
			}
			return nil
		}
		c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsSnapshot, l.page, changed.load)
		require.NoError(t, err)
		require.Len(t, c.Scans, 2)
		assert.Equal(t, mcpsync.PassUnclean, c.Scans[0].Outcome)
		assert.Empty(t, c.Scans[0].SnapshotID)
		assert.Equal(t, mcpsync.CatalogSnapshotProven, c.Status, "the next attempt proves it")
	})
}

func TestTwoIdenticalPassesAreOnlyUnproven(t *testing.T) {
	clock := newClock()
	l := newFakeListing(mcpsync.KindResources, 2, "file:///b", "file:///a", "file:///c")
	slices.SortFunc(l.items, func(a, b mcpsync.Descriptor) int { return strings.Compare(a.URI, b.URI) })
	s := newTestScanner(t, &mcpsync.ScannerOptions{Now: clock.now, StaleAfter: 10 * time.Minute})
	c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
	assert.Equal(t, mcpsync.SchemaCatalog, c.Schema)
	require.Len(t, c.Scans, 2)
	assert.Equal(t, "A", c.Scans[0].Pass)
	assert.Equal(t, "B", c.Scans[1].Pass)
	assert.Equal(t, c.Scans[0].SetDigest, c.Scans[1].SetDigest)
	assert.Equal(t, c.Scans[1].SetDigest, c.SetDigest)
	assert.Equal(t, c.Scans[1].EndedAt, c.MeasuredAt)
	assert.Equal(t, c.MeasuredAt.Add(10*time.Minute), c.StaleAfter)
	assert.Equal(t, c.MeasuredAt.Add(5*time.Minute), c.NextReviewAt)
	assert.Equal(t, []string{"file:///a", "file:///b", "file:///c"}, catalogKeys(c))

	items, err := c.Proven(clock.t, capsPlain.SessionGeneration)
	require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
	assert.Nil(t, items)
	ce, ok := errors.AsType[*mcpsync.CatalogError](err)
	require.True(t, ok)
	assert.Equal(t, mcpsync.CatalogReasonNotProven, ce.Reason)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, ce.Status)
}

func TestInvalidCursorRestartsScan(t *testing.T) {
	invalid := &mcpsync.RPCError{Method: "resources/list", Code: mcp.INVALID_PARAMS, Message: "invalid cursor"}
	all := []string{"file:///a", "file:///b", "file:///c"}

	t.Run("restart from the first page, nothing truncated", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindResources, 1, all...)
		l.onCall = func(n int, _ *fakeListing) error {
			if n == 2 { // the third page of pass A
				return invalid
			}
			return nil
		}
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
		require.NoError(t, err)
		require.Len(t, c.Scans, 3)
		a := c.Scans[0]
		assert.Equal(t, mcpsync.PassAborted, a.Outcome)
		require.Len(t, a.Faults, 1)
		assert.Equal(t, mcpsync.FaultInvalidCursor, a.Faults[0].Fault)
		assert.Equal(t, 2, a.Faults[0].Page)
		assert.Equal(t, mcpsync.CursorDigest("after:file:///b"), a.Faults[0].CursorDigest)
		assert.Empty(t, a.SetDigest, "an aborted pass has no set")
		assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
		assert.Equal(t, all, catalogKeys(c), "the scan is never truncated at the invalid cursor")
		assert.Equal(t, 3, l.firsts)
	})

	t.Run("every attempt refused", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindResources, 1, all...)
		l.onCall = func(n int, l *fakeListing) error {
			if l.received[n] != nil {
				return invalid
			}
			return nil
		}
		c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 3}), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
		requireUnreconciled(t, c, err, invalid)
		rpc, ok := errors.AsType[*mcpsync.RPCError](err)
		require.True(t, ok)
		assert.Equal(t, mcp.INVALID_PARAMS, rpc.Code)
		assert.Len(t, c.Scans, 3)
		assert.Equal(t, 3, l.firsts)
	})

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"-32602 on the first page blames no cursor", invalid},
		{"other errors end the scan", &mcpsync.RPCError{Method: "resources/list", Code: -32603, Message: "internal"}},
		{"transport errors end the scan", errors.New("connection reset")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeListing(mcpsync.KindResources, 1, all...)
			l.onCall = func(int, *fakeListing) error { return tc.err }
			c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
			requireUnreconciled(t, c, err, tc.err)
			assert.Equal(t, 1, l.calls, "not retried")
			require.Len(t, c.Scans, 1)
			assert.Equal(t, mcpsync.PassFailed, c.Scans[0].Outcome)
			assert.Equal(t, mcpsync.FaultPageError, c.Scans[0].Faults[0].Fault)
		})
	}
}

func TestListChangedDuringScanForcesRescan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bumpAt   func(n int) bool // calls (3 pages a pass) during which list_changed arrives
		attempts int
		outcomes []mcpsync.PassOutcome
	}{
		{"during pass A", func(n int) bool { return n == 1 }, 2,
			[]mcpsync.PassOutcome{mcpsync.PassUnclean, mcpsync.PassClean, mcpsync.PassClean}},
		{"during pass B", func(n int) bool { return n == 4 }, 2,
			[]mcpsync.PassOutcome{mcpsync.PassClean, mcpsync.PassUnclean, mcpsync.PassClean, mcpsync.PassClean}},
		{"during every pass", func(int) bool { return true }, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var changed listChangedCounter
			l := newFakeListing(mcpsync.KindResources, 1, "file:///a", "file:///b", "file:///c")
			l.onCall = func(n int, _ *fakeListing) error {
				if tc.bumpAt(n) {
					changed.bump()
				}
				return nil
			}
			c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 3}), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, changed.load)
			if tc.attempts == 0 {
				requireUnreconciled(t, c, err, mcpsync.ErrListUnstable)
				assert.Len(t, c.Scans, 3, "pass B is skipped after an unclean pass A")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
			var outcomes []mcpsync.PassOutcome
			for _, r := range c.Scans {
				outcomes = append(outcomes, r.Outcome)
				if r.Outcome == mcpsync.PassUnclean {
					assert.Equal(t, uint64(1), r.ListChangedSeen)
				}
			}
			assert.Equal(t, tc.outcomes, outcomes)
			assert.Equal(t, tc.attempts, c.Scans[len(c.Scans)-1].Attempt)
		})
	}
}

func TestScanCursorEras(t *testing.T) {
	srv := func() *scriptedList {
		return &scriptedList{pages: map[string]mcpsync.Page{
			"":        {Items: resourceItems("file:///a"), NextCursor: cursorOf("")},
			"<empty>": {Items: resourceItems("file:///b")},
		}}
	}
	t.Run("legacy: an empty nextCursor ends the listing", func(t *testing.T) {
		s := srv()
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, s.page, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"file:///a"}, catalogKeys(c))
		assert.Equal(t, []*string{nil, nil}, s.received, "two passes of one page each")
	})
	t.Run("modern: an empty nextCursor is a cursor", func(t *testing.T) {
		s := srv()
		caps := capsPlain
		caps.ProtocolVersion = "2026-07-28"
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraOf(caps.ProtocolVersion), caps, s.page, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"file:///a", "file:///b"}, catalogKeys(c))
		assert.Equal(t, []*string{nil, cursorOf(""), nil, cursorOf("")}, s.received)
		require.Len(t, c.Scans[0].Pages, 2)
		assert.Empty(t, c.Scans[0].Pages[0].CursorDigest, "the first page is fetched without a cursor")
		assert.Equal(t, mcpsync.CursorDigest(""), c.Scans[0].Pages[1].CursorDigest)
		assert.Equal(t, mcpsync.EraModern, c.Scans[0].Era)
	})
	t.Run("modern: an empty cursor seen twice is a cycle", func(t *testing.T) {
		s := srv()
		s.pages["<empty>"] = mcpsync.Page{Items: resourceItems("file:///b"), NextCursor: cursorOf("")}
		c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 1}), mcpsync.KindResources, mcpsync.EraModern, capsPlain, s.page, nil)
		requireUnreconciled(t, c, err, mcpsync.ErrCursorCycle)
	})
}

// Cursors reach the server byte for byte as the server gave them.
func TestScanCursorsAreOpaque(t *testing.T) {
	odd := " a%2Fb?c=1&d=\x00ü==  "
	s := &scriptedList{pages: map[string]mcpsync.Page{
		"":  {Items: resourceItems("file:///a"), NextCursor: cursorOf(odd)},
		odd: {Items: resourceItems("file:///b")},
	}}
	c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, s.page, nil)
	require.NoError(t, err)
	assert.Equal(t, []*string{nil, cursorOf(odd), nil, cursorOf(odd)}, s.received)
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "a%2Fb")
}

func TestScanPageCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items int
		ok    bool
	}{
		{"exactly the cap", 3, true},
		{"one page over", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := []string{"file:///1", "file:///2", "file:///3", "file:///4"}[:tc.items]
			l := newFakeListing(mcpsync.KindResources, 1, all...)
			c, err := runScan(t, newTestScanner(t, nil).WithMaxPages(3), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, all, catalogKeys(c))
				return
			}
			requireUnreconciled(t, c, err, mcpsync.ErrPageCap)
			require.Len(t, c.Scans, 1, "the cap is not retried")
			assert.Equal(t, 3, l.calls, "no page beyond the cap is fetched")
			assert.Equal(t, mcpsync.PassAborted, c.Scans[0].Outcome)
			assert.Equal(t, mcpsync.FaultPageCap, c.Scans[0].Faults[0].Fault)
		})
	}
}

// A listing with a repeated or aliased URI is a fact about the server, not a
// change: each pass records it as its own fault, with both spellings, and the
// catalog is produced, UNPROVEN even where a snapshot id would prove it.
func TestScanRepeatedItem(t *testing.T) {
	snap := func(p mcpsync.Page) mcpsync.Page { p.SnapshotID = "s1"; return p }
	for _, tc := range []struct {
		name      string
		caps      ledger.CapabilityReceipt
		pages     map[string]mcpsync.Page
		fault     mcpsync.FaultKind
		key       string
		spellings []string
		keys      []string
	}{
		{"same URI on two pages", capsPlain, map[string]mcpsync.Page{
			"":  {Items: resourceItems("file:///a", "file:///b"), NextCursor: cursorOf("2")},
			"2": {Items: resourceItems("file:///b", "file:///c")},
		}, mcpsync.FaultRepeatedItem, "file:///b", []string{"file:///b", "file:///b"}, []string{"file:///a", "file:///b", "file:///c"}},
		{"two spellings of one URI", capsPlain, map[string]mcpsync.Page{
			"": {Items: resourceItems("file:///docs/a.md", "FILE:///docs/%61.md")},
		}, mcpsync.FaultAliasedItem, "file:///docs/a.md", []string{"file:///docs/a.md", "FILE:///docs/%61.md"}, []string{"file:///docs/a.md"}},
		{"percent-encoded letter beside the letter", capsPlain, map[string]mcpsync.Page{
			"": {Items: resourceItems("test://x/%41bc", "test://x/Abc")},
		}, mcpsync.FaultAliasedItem, "test://x/Abc", []string{"test://x/%41bc", "test://x/Abc"}, []string{"test://x/Abc"}},
		{"repeat under a snapshot id", capsSnapshot, map[string]mcpsync.Page{
			"": snap(mcpsync.Page{Items: resourceItems("file:///a", "file:///a")}),
		}, mcpsync.FaultRepeatedItem, "file:///a", []string{"file:///a", "file:///a"}, []string{"file:///a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scriptedList{pages: tc.pages}
			c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 2}), mcpsync.KindResources, mcpsync.EraLegacy, tc.caps, s.page, nil)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, c.Status)
			assert.Equal(t, tc.keys, catalogKeys(c))
			require.Len(t, c.Scans, 2, "one attempt of two passes")
			for _, f := range eachPassFault(t, c, mcpsync.PassClean, tc.fault) {
				assert.Equal(t, tc.key, f.Key)
				assert.Equal(t, tc.spellings, f.Spellings)
			}
		})
	}
}

func TestScanAttemptsExhausted(t *testing.T) {
	// Every pass sees a different list: the server never holds still.
	l := newFakeListing(mcpsync.KindResources, 2, "file:///a", "file:///b")
	l.onCall = func(n int, l *fakeListing) error {
		if l.received[n] == nil {
			l.add("file:///new-" + string(rune('a'+n)))
		}
		return nil
	}
	c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 3}), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
	requireUnreconciled(t, c, err, mcpsync.ErrListUnstable)
	se, ok := errors.AsType[*mcpsync.ScanError](err)
	require.True(t, ok)
	assert.Equal(t, 3, se.Attempts)
	assert.Equal(t, mcpsync.KindResources, se.Kind)
	assert.Len(t, c.Scans, 6)
	for _, r := range c.Scans {
		assert.Equal(t, mcpsync.PassClean, r.Outcome)
	}
	assert.Equal(t, c.Scans[5].EndedAt, c.MeasuredAt)
}

// Backoff waits run on timers; in a synctest bubble they take no real time,
// and the virtual clock shows exactly the waits the scanner chose.
func TestScanBackoffInVirtualTime(t *testing.T) {
	invalid := &mcpsync.RPCError{Method: "resources/list", Code: mcp.INVALID_PARAMS, Message: "invalid cursor"}
	refuse := func(l *fakeListing) {
		l.onCall = func(n int, l *fakeListing) error {
			if l.received[n] != nil {
				return invalid
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name  string
		rand  fixedJitter
		waits []time.Duration
	}{
		// BackoffBase 1s, BackoffMax 4s: ceilings 1s, 2s, 4s, 4s; the
		// jitter adds up to half of each ceiling to its other half.
		{"least jitter", 0, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second}},
		{"most jitter", math.MaxUint64, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newFakeListing(mcpsync.KindResources, 1, "file:///a", "file:///b")
				refuse(l)
				s := newTestScanner(t, &mcpsync.ScannerOptions{Rand: tc.rand, BackoffBase: time.Second, BackoffMax: 4 * time.Second, MaxAttempts: 5})
				start := time.Now()
				c, err := s.Scan(t.Context(), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
				require.ErrorIs(t, err, mcpsync.ErrScanUnreconciled)
				var waits []time.Duration
				var total time.Duration
				for i, r := range c.Scans {
					if i == 0 {
						assert.Zero(t, r.Backoff)
						continue
					}
					waits = append(waits, r.Backoff)
					total += r.Backoff
					assert.Equal(t, r.Backoff, r.StartedAt.Sub(c.Scans[i-1].EndedAt), "the receipt's wait happened")
				}
				// Within 1ns: Float64 of the largest source value is just below 1.
				require.Len(t, waits, len(tc.waits))
				for i := range waits {
					assert.InDelta(t, tc.waits[i], waits[i], 1)
				}
				assert.Equal(t, total, time.Since(start))
			})
		})
	}

	t.Run("cancelling stops the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := newFakeListing(mcpsync.KindResources, 1, "file:///a", "file:///b")
			refuse(l)
			s := newTestScanner(t, &mcpsync.ScannerOptions{BackoffBase: time.Minute, BackoffMax: time.Minute})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			c, err := s.Scan(ctx, mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
			requireUnreconciled(t, c, err, context.DeadlineExceeded)
			assert.Equal(t, 10*time.Second, time.Since(start))
			assert.Len(t, c.Scans, 1)
		})
	})
}

func TestScanOlderSessionCatalogRefused(t *testing.T) {
	clock := newClock()
	l := newFakeListing(mcpsync.KindResources, 2, "file:///a", "file:///b", "file:///c")
	l.snapshot = func(int) string { return "snap-1" }
	s := newTestScanner(t, &mcpsync.ScannerOptions{Now: clock.now, StaleAfter: time.Minute})
	c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsSnapshot, l.page, nil)
	require.NoError(t, err)
	require.Equal(t, mcpsync.CatalogSnapshotProven, c.Status)
	assert.Equal(t, uint64(1), c.SessionGeneration)
	assert.Equal(t, uint64(1), c.Scans[0].SessionGeneration)

	for _, tc := range []struct {
		name   string
		now    time.Time
		gen    uint64
		reason mcpsync.CatalogRefusalReason
	}{
		{"current session, fresh", clock.t, 1, ""},
		{"older session", clock.t, 2, mcpsync.CatalogReasonOtherSession},
		{"stale", clock.t.Add(time.Minute), 1, mcpsync.CatalogReasonStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, err := c.Proven(tc.now, tc.gen)
			if tc.reason == "" {
				require.NoError(t, err)
				assert.Len(t, items, 3)
				return
			}
			require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
			ce, ok := errors.AsType[*mcpsync.CatalogError](err)
			require.True(t, ok)
			assert.Equal(t, tc.reason, ce.Reason)
			assert.Equal(t, mcpsync.CatalogSnapshotProven, ce.Status)
			assert.Nil(t, items)
		})
	}
}

func TestScanKinds(t *testing.T) {
	for _, tc := range []struct {
		kind        mcpsync.ListKind
		method      string
		catalogKeys []string
	}{
		{mcpsync.KindResourceTemplates, "resources/templates/list", []string{"file:///logs/{day}", "file:///users/{id}"}},
		{mcpsync.KindTools, "tools/list", []string{"delete", "get", "search"}},
		{mcpsync.KindPrompts, "prompts/list", []string{"review", "summarize"}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			assert.Equal(t, tc.method, tc.kind.Method())
			l := newFakeListing(tc.kind, 1, tc.catalogKeys...)
			snap := capsSnapshot
			snap.SessionGeneration = 3
			l.snapshot = func(int) string { return "snap-k" }
			c, err := runScan(t, newTestScanner(t, nil), tc.kind, mcpsync.EraLegacy, snap, l.page, nil)
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotProven, c.Status)
			assert.Equal(t, tc.kind, c.Kind)
			assert.Equal(t, uint64(3), c.SessionGeneration)
			assert.Equal(t, tc.catalogKeys, catalogKeys(c))
			for d := range c.Items() {
				assert.Equal(t, tc.kind, d.Kind)
			}
			_, err = c.Proven(c.MeasuredAt, 2)
			require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven, "generation isolation holds for every kind")

			// The same generation rules, the same two-pass rule.
			l.snapshot = nil
			passB := l.calls + len(tc.catalogKeys) // one item a page
			l.onCall = func(n int, l *fakeListing) error {
				if n == passB {
					l.add(tc.catalogKeys[0] + "-new")
				}
				return nil
			}
			c, err = runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{MaxAttempts: 1}), tc.kind, mcpsync.EraLegacy, capsPlain, l.page, nil)
			requireUnreconciled(t, c, err, mcpsync.ErrListUnstable)
		})
	}

	t.Run("the set digest covers the kind", func(t *testing.T) {
		tools := newFakeListing(mcpsync.KindTools, 5, "x")
		prompts := newFakeListing(mcpsync.KindPrompts, 5, "x")
		a, err := runScan(t, newTestScanner(t, nil), mcpsync.KindTools, mcpsync.EraLegacy, capsPlain, tools.page, nil)
		require.NoError(t, err)
		b, err := runScan(t, newTestScanner(t, nil), mcpsync.KindPrompts, mcpsync.EraLegacy, capsPlain, prompts.page, nil)
		require.NoError(t, err)
		assert.NotEqual(t, a.SetDigest, b.SetDigest)
	})
}

func TestScanSetDigest(t *testing.T) {
	digest := func(pages map[string]mcpsync.Page) string {
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, (&scriptedList{pages: pages}).page, nil)
		require.NoError(t, err)
		return c.SetDigest
	}
	one := digest(map[string]mcpsync.Page{"": {Items: resourceItems("file:///a", "file:///b")}})
	assert.Equal(t, one, digest(map[string]mcpsync.Page{
		"":  {Items: resourceItems("file:///b"), NextCursor: cursorOf("x")},
		"x": {Items: resourceItems("file:///a")},
	}), "paging and order do not change the set")
	changed := resourceItems("file:///a", "file:///b")
	changed[1].MIMEType = "text/plain"
	assert.NotEqual(t, one, digest(map[string]mcpsync.Page{"": {Items: changed}}), "a descriptor change is a set change")
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, one)
}

func TestScanWalk(t *testing.T) {
	t.Run("lazy", func(t *testing.T) {
		l := newFakeListing(mcpsync.KindTools, 2, "a", "b", "c", "d")
		var got []string
		for d, err := range newTestScanner(t, nil).Walk(t.Context(), mcpsync.KindTools, mcpsync.EraLegacy, l.page) {
			require.NoError(t, err)
			assert.Equal(t, mcpsync.KindTools, d.Kind)
			got = append(got, d.Name)
			if len(got) == 2 {
				break
			}
		}
		assert.Equal(t, []string{"a", "b"}, got)
		assert.Equal(t, 1, l.calls, "no page is fetched before it is needed")
	})
	t.Run("stops at the first error", func(t *testing.T) {
		boom := errors.New("boom")
		l := newFakeListing(mcpsync.KindTools, 1, "a", "b", "c")
		l.onCall = func(n int, _ *fakeListing) error {
			if n == 1 {
				return boom
			}
			return nil
		}
		var got []string
		var errs []error
		for d, err := range newTestScanner(t, nil).Walk(t.Context(), mcpsync.KindTools, mcpsync.EraLegacy, l.page) {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			got = append(got, d.Name)
		}
		assert.Equal(t, []string{"a"}, got)
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], boom)
		assert.Equal(t, 2, l.calls)
	})
}

func TestScannerOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *mcpsync.ScannerOptions
		ok   bool
	}{
		{"nil", nil, true},
		{"review before stale", &mcpsync.ScannerOptions{StaleAfter: time.Minute, ReviewAfter: time.Minute}, true},
		{"review after stale", &mcpsync.ScannerOptions{StaleAfter: time.Minute, ReviewAfter: 2 * time.Minute}, false},
		{"backoff max below base", &mcpsync.ScannerOptions{BackoffBase: time.Minute, BackoffMax: time.Second}, false},
		{"negative attempts", &mcpsync.ScannerOptions{MaxAttempts: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcpsync.NewScanner(tc.opts)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
	s := newTestScanner(t, nil)
	_, err := s.Scan(t.Context(), "files", mcpsync.EraLegacy, capsPlain, (&scriptedList{}).page, nil)
	require.Error(t, err)
	_, err = s.Scan(t.Context(), mcpsync.KindTools, "2025", capsPlain, (&scriptedList{}).page, nil)
	require.Error(t, err)
}

// tombstonePending subscribes uri for alice, accepts one version and then a
// not-found read, leaving it TOMBSTONE_PENDING.
func tombstonePending(t *testing.T, e *mcpsync.Engine, uri string) {
	t.Helper()
	_, err := e.Subscribe(uri, alice)
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, text(uri, "v1"))
	require.NoError(t, err)
	gone, err := e.IssueTicket(uri, ledger.TriggerNotification)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(gone, mcpsync.NotFoundResult())
	require.NoError(t, err)
	sub, err := e.Subscription(uri)
	require.NoError(t, err)
	require.Equal(t, ledger.StateTombstonePending, sub.State)
}

func TestCatalogReconcile(t *testing.T) {
	const (
		gone   = "file:///docs/gone.md"
		back   = "file:///docs/back.md"
		active = "file:///docs/active.md"
	)
	type verdicts struct {
		gone, back, active ledger.SubscriptionState
	}
	for _, tc := range []struct {
		name     string
		caps     ledger.CapabilityReceipt // SnapshotList: PROVEN, else UNPROVEN
		maxTries int                      // 0: a scan that succeeds; -1: one that cannot
		noIDs    bool                     // the pages carry no snapshot id
		age      time.Duration            // how long after the scan the engine reconciles
		otherGen bool
		policy   mcpsync.DeletionPolicy
		err      error
		want     verdicts
		deferred []string
		// corroborating: absent URIs sent the second read of a
		// corroboration, as well as the present one its reconcile read.
		corroborating []string
	}{
		{name: "proven and fresh: present and absent verdicts", caps: capsSnapshot,
			want: verdicts{ledger.StateTombstoned, ledger.StateReadPending, ledger.StateActive}},
		{name: "unproven, proven only: only present verdicts", caps: capsPlain, policy: mcpsync.DeletionProvenOnly,
			want:     verdicts{ledger.StateTombstonePending, ledger.StateReadPending, ledger.StateActive},
			deferred: []string{gone}},
		{name: "unproven, no snapshot extension: absent URIs corroborated", caps: capsPlain,
			want:          verdicts{ledger.StateReadPending, ledger.StateReadPending, ledger.StateActive},
			corroborating: []string{gone}},
		{name: "unproven, snapshot extension negotiated: no corroboration by default", caps: capsSnapshot, noIDs: true,
			want:     verdicts{ledger.StateTombstonePending, ledger.StateReadPending, ledger.StateActive},
			deferred: []string{gone}},
		{name: "unproven, snapshot extension negotiated, corroborated policy", caps: capsSnapshot, noIDs: true,
			policy:        mcpsync.DeletionCorroborated,
			want:          verdicts{ledger.StateReadPending, ledger.StateReadPending, ledger.StateActive},
			corroborating: []string{gone}},
		{name: "proven but stale: only present verdicts", caps: capsSnapshot, age: 2 * time.Minute,
			want:     verdicts{ledger.StateTombstonePending, ledger.StateReadPending, ledger.StateActive},
			deferred: []string{gone}},
		{name: "unreconciled: no verdicts", caps: capsPlain, maxTries: -1, err: mcpsync.ErrSnapshotUnproven,
			want: verdicts{ledger.StateTombstonePending, ledger.StateTombstonePending, ledger.StateActive}},
		{name: "older session: no verdicts", caps: capsSnapshot, otherGen: true, err: mcpsync.ErrSnapshotUnproven,
			want: verdicts{ledger.StateTombstonePending, ledger.StateTombstonePending, ledger.StateActive}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			e := newEngine(t, &mcpsync.EngineOptions{Now: clock.now})
			tombstonePending(t, e, gone)
			tombstonePending(t, e, back)
			_, err := e.Subscribe(active, alice)
			require.NoError(t, err)
			_, err = e.Activate(active, ledger.ModePush)
			require.NoError(t, err)

			caps := tc.caps
			caps.SessionGeneration = e.SessionGeneration()
			l := newFakeListing(mcpsync.KindResources, 1, active, back) // sorted by key
			l.snapshot = func(int) string { return "snap-1" }
			if tc.noIDs {
				// Negotiated, but the pages carry no id: the proof fails,
				// two identical passes make the catalog UNPROVEN.
				l.snapshot = func(int) string { return "" }
			}
			opts := &mcpsync.ScannerOptions{Now: clock.now, StaleAfter: time.Minute}
			if tc.maxTries < 0 {
				opts.MaxAttempts = 1
				l.onCall = func(n int, l *fakeListing) error {
					if n == 2 { // the first page of pass B
						l.add("file:///docs/new.md")
					}
					return nil
				}
			}
			c, scanErr := runScan(t, newTestScanner(t, opts), mcpsync.KindResources, mcpsync.EraLegacy, caps, l.page, nil)
			if tc.maxTries < 0 {
				require.ErrorIs(t, scanErr, mcpsync.ErrScanUnreconciled)
			} else {
				require.NoError(t, scanErr)
			}
			if tc.otherGen {
				_, err := e.BeginSession(mcpsync.SessionInfo{Capabilities: capsSnapshot})
				require.NoError(t, err)
			}
			clock.t = clock.t.Add(tc.age)

			rec, err := c.Reconcile(e, &mcpsync.ReconcileOptions{Deletion: tc.policy})
			state := func(uri string) ledger.SubscriptionState {
				sub, err := e.Subscription(uri)
				require.NoError(t, err)
				return sub.State
			}
			assert.Equal(t, tc.want, verdicts{state(gone), state(back), state(active)})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				assert.Empty(t, rec.Tickets)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{back}, rec.Present)
			require.Len(t, rec.Tickets, 1+len(tc.corroborating))
			assert.Equal(t, back, rec.Tickets[0].URI)
			for _, tk := range rec.Tickets {
				assert.Equal(t, ledger.TriggerReconcile, tk.Trigger)
			}
			assert.Equal(t, tc.deferred, rec.Deferred)
			assert.Equal(t, tc.corroborating, rec.Corroborating)
			if tc.want.gone == ledger.StateTombstoned {
				assert.Equal(t, []string{gone}, rec.Tombstoned)
				require.Len(t, rec.Receipts, 1)
				assert.Equal(t, ledger.DeletionEvidence{Kind: ledger.EvidenceProven, SnapshotID: "snap-1", Scans: []string{c.Scans[len(c.Scans)-1].ID}},
					rec.Receipts[0].Evidence)
			} else {
				assert.Empty(t, rec.Tombstoned)
				_, err := e.Lookup(alice, gone)
				require.ErrorIs(t, err, mcpsync.ErrTombstonePending, "a deferred URI is still not served")
			}
		})
	}

	t.Run("only resource catalogs reconcile", func(t *testing.T) {
		e := newEngine(t, nil)
		l := newFakeListing(mcpsync.KindTools, 1, "a")
		caps := capsPlain
		caps.SessionGeneration = e.SessionGeneration()
		c, err := runScan(t, newTestScanner(t, nil), mcpsync.KindTools, mcpsync.EraLegacy, caps, l.page, nil)
		require.NoError(t, err)
		_, err = c.Reconcile(e, nil)
		require.Error(t, err)
	})
}

// tickingClock advances one second at every reading, so receipts have
// distinct, deterministic times.
type tickingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func TestScanReceiptGolden(t *testing.T) {
	clock := &tickingClock{t: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	l := newFakeListing(mcpsync.KindResources, 2, "file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md")
	l.snapshot = func(int) string { return "snap-forged" }
	l.onCall = func(n int, l *fakeListing) error {
		if n == 1 {
			return &mcpsync.RPCError{Method: "resources/list", Code: mcp.INVALID_PARAMS, Message: "invalid cursor"}
		}
		return nil
	}
	s := newTestScanner(t, &mcpsync.ScannerOptions{Now: clock.now, BackoffBase: time.Second, StaleAfter: 10 * time.Minute})
	c, err := runScan(t, s, mcpsync.KindResources, mcpsync.EraLegacy, capsPlain, l.page, nil)
	require.NoError(t, err)
	require.Len(t, c.Scans, 3)
	// Pass ids are random; the golden file pins where they go.
	for i := range c.Scans {
		require.NotEmpty(t, c.Scans[i].ID)
		c.Scans[i].ID = "00000000-0000-4000-8000-00000000000" + strconv.Itoa(i)
	}
	requireGolden(t, map[string]any{
		"scan_receipt.json": c.Scans[0],
		"scan_catalog.json": c,
	})
}

// Two engines on two fresh ledgers both open session generation 1: only
// the engine's identity on the receipt tells their catalogs apart.
func TestCatalogOfAnotherEngineIsRefused(t *testing.T) {
	caps := ledger.CapabilityReceipt{ProtocolVersion: "2025-11-25", Resources: true, SnapshotList: true}
	clock := newClock()
	var engines [2]*mcpsync.Engine
	var receipts [2]ledger.CapabilityReceipt
	for i := range engines {
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Now: clock.now})
		require.NoError(t, err)
		receipts[i], err = e.BeginSession(mcpsync.SessionInfo{Capabilities: caps})
		require.NoError(t, err)
		require.Equal(t, e.ID(), receipts[i].Engine)
		engines[i] = e
	}
	require.Equal(t, receipts[0].SessionGeneration, receipts[1].SessionGeneration)

	l := newFakeListing(mcpsync.KindResources, 1, "file:///docs/a.md")
	l.snapshot = func(int) string { return "snap-1" }
	c, err := runScan(t, newTestScanner(t, &mcpsync.ScannerOptions{Now: clock.now, StaleAfter: time.Hour}),
		mcpsync.KindResources, mcpsync.EraLegacy, receipts[0], l.page, nil)
	require.NoError(t, err)
	require.Equal(t, mcpsync.CatalogSnapshotProven, c.Status)
	assert.Equal(t, engines[0].ID(), c.Engine)

	_, err = c.ProvenIn(engines[0])
	require.NoError(t, err, "its own engine")
	var ce *mcpsync.CatalogError
	_, err = c.ProvenIn(engines[1])
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, mcpsync.CatalogReasonOtherEngine, ce.Reason)
	assert.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven)
	_, err = c.Reconcile(engines[1], nil)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, mcpsync.CatalogReasonOtherEngine, ce.Reason)
}
