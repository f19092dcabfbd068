package pagedserver

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/paging"
)

var (
	testKey = paging.CursorKey{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	testT0  = time.Date(2026, 8, 25, 4, 0, 0, 0, time.UTC)
)

type fakeClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func keyring(t testing.TB) *paging.Keyring {
	k, err := paging.NewKeyring(testKey)
	require.NoError(t, err)
	return k
}

func readText(uri string) server.ResourceHandlerFunc {
	return func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: "content of " + uri}}, nil
	}
}

// addDocs registers resources doc-00..doc-(n-1); runs of three share a name,
// so equal names straddle page boundaries.
func addDocs(s *server.MCPServer, from, n int) []string {
	var uris []string
	for i := from; i < from+n; i++ {
		uri := fmt.Sprintf("file:///docs/%02d.txt", i)
		s.AddResource(mcp.NewResource(uri, fmt.Sprintf("doc-%02d", i/3)), readText(uri))
		uris = append(uris, uri)
	}
	return uris
}

type harness struct {
	srv    *server.MCPServer
	lists  *SnapshotLists
	clock  *fakeClock
	client *client.Client
	errs   []error
	mu     sync.Mutex // protects errs
}

func newHarness(t *testing.T, o SnapshotListOptions) *harness {
	t.Helper()
	h := &harness{clock: &fakeClock{t: testT0}}
	o.Keyring = keyring(t)
	o.Clock = h.clock.Now
	o.OnError = func(_ context.Context, _ mcp.MCPMethod, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.errs = append(h.errs, err)
	}
	var err error
	h.lists, err = NewSnapshotLists(&o)
	require.NoError(t, err)
	h.srv = server.NewMCPServer("docs", "1.0.0", append(h.lists.ServerOptions(), server.WithResourceCapabilities(false, true))...)
	h.client = startClient(t, h.srv)
	return h
}

// cleanupT is what startClient needs of a *testing.T or a *rapid.T.
type cleanupT interface {
	require.TestingT
	Helper()
	Cleanup(func())
}

func startClient(t cleanupT, s *server.MCPServer) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(s)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	_, err = c.Initialize(ctx, init)
	require.NoError(t, err)
	return c
}

func snapshotIDOf(t *testing.T, meta *mcp.Meta) string {
	t.Helper()
	require.NotNil(t, meta, "every page carries _meta")
	id, ok := meta.AdditionalFields[mcpsync.SnapshotIDMetaKey].(string)
	require.True(t, ok, "every page carries the snapshot id")
	require.NotEmpty(t, id)
	return id
}

func uris(rs []mcp.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.URI
	}
	return out
}

// A plain mcp-go client reaches one snapshot id on every page while
// resources are inserted and deleted between pages, sees every resource of
// the snapshot exactly once (equal names across page boundaries included),
// gets no empty last page, and can still read the resources.
func TestResourcesListOneSnapshotEndToEnd(t *testing.T) {
	for _, total := range []int{23, 25, 5, 1} {
		t.Run(fmt.Sprintf("%d resources", total), func(t *testing.T) {
			h := newHarness(t, SnapshotListOptions{PageSize: 5})
			want := addDocs(h.srv, 0, total)
			ctx := context.Background()

			caps := h.client.GetServerCapabilities()
			assert.Contains(t, caps.Experimental, mcpsync.SnapshotCapability, "the extension is advertised")

			var got []string
			var snapshot string
			req := mcp.ListResourcesRequest{}
			for page := 0; ; page++ {
				res, err := h.client.ListResourcesByPage(ctx, req)
				require.NoError(t, err)
				id := snapshotIDOf(t, res.Meta)
				if page == 0 {
					snapshot = id
				}
				require.Equal(t, snapshot, id, "page %d", page)
				require.NotEmpty(t, res.Resources, "no empty page")
				got = append(got, uris(res.Resources)...)
				// Between pages: a resource sorting first, one in the middle,
				// and deletes of read and unread ones.
				h.srv.AddResource(mcp.NewResource(fmt.Sprintf("file:///new/%d", page), "aaa"), readText("x"))
				h.srv.AddResource(mcp.NewResource(fmt.Sprintf("file:///docs/%02d.txt.new", page), "doc-03"), readText("x"))
				h.srv.DeleteResources(fmt.Sprintf("file:///docs/%02d.txt", total-1-page), fmt.Sprintf("file:///docs/%02d.txt", page))
				if res.NextCursor == "" {
					break
				}
				req.Params.Cursor = res.NextCursor
			}
			slices.Sort(want)
			slices.Sort(got)
			assert.Equal(t, want, got, "exactly the snapshot's resources, each once")
			assert.Empty(t, h.errs)

			read := mcp.ReadResourceRequest{}
			read.Params.URI = "file:///new/0"
			rr, err := h.client.ReadResource(ctx, read)
			require.NoError(t, err, "resources/read is untouched")
			require.Len(t, rr.Contents, 1)
		})
	}
}

func TestResourcesListNewWalkSeesNewSnapshot(t *testing.T) {
	h := newHarness(t, SnapshotListOptions{PageSize: 4})
	addDocs(h.srv, 0, 10)
	ctx := context.Background()
	first, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	again, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	assert.Equal(t, snapshotIDOf(t, first.Meta), snapshotIDOf(t, again.Meta), "an unchanged catalog is the same snapshot")
	h.srv.DeleteResources("file:///docs/09.txt")
	changed, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	assert.NotEqual(t, snapshotIDOf(t, first.Meta), snapshotIDOf(t, changed.Meta))

	all, err := h.client.ListResources(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err, "mcp-go's own page loop follows our cursors")
	assert.Len(t, all.Resources, 9)
}

func TestResourcesListRefusedCursors(t *testing.T) {
	h := newHarness(t, SnapshotListOptions{PageSize: 4, CursorTTL: time.Minute, MaxSnapshots: 2})
	addDocs(h.srv, 0, 10)
	ctx := context.Background()
	first, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	next := first.NextCursor
	require.NotEmpty(t, next)

	list := func(c mcp.Cursor) error {
		req := mcp.ListResourcesRequest{}
		req.Params.Cursor = c
		_, err := h.client.ListResourcesByPage(ctx, req)
		return err
	}
	cases := []struct {
		name   string
		cursor func() mcp.Cursor
		code   paging.CursorErrorCode
	}{
		{"tampered", func() mcp.Cursor {
			if next[len(next)-1] == 'A' {
				return next[:len(next)-1] + "B"
			}
			return next[:len(next)-1] + "A"
		}, paging.CursorInvalid},
		{"mcp-go style cursor", func() mcp.Cursor { return "ZG9jLTAx" }, paging.CursorInvalid},
		{"templates cursor on resources", func() mcp.Cursor {
			h.srv.AddResourceTemplate(mcp.NewResourceTemplate("file:///t/{id}", "t"), nil)
			res, err := h.client.ListResourceTemplatesByPage(ctx, mcp.ListResourceTemplatesRequest{})
			require.NoError(t, err)
			return mcp.Cursor(signedFor(t, h, mcp.MethodResourcesTemplatesList, res))
		}, paging.CursorQueryMismatch},
		{"snapshot evicted", func() mcp.Cursor {
			for i := range 2 { // two newer catalogs push the walk's snapshot out
				h.srv.DeleteResources(fmt.Sprintf("file:///docs/%02d.txt", i))
				_, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
				require.NoError(t, err)
			}
			return next
		}, paging.CursorExpired},
		{"expired", func() mcp.Cursor {
			res, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
			require.NoError(t, err)
			h.clock.Advance(time.Minute)
			return res.NextCursor
		}, paging.CursorExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.mu.Lock()
			h.errs = nil
			h.mu.Unlock()
			err := list(tc.cursor())
			require.ErrorIs(t, err, mcp.ErrInvalidParams, "-32602, never an empty page")
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Len(t, h.errs, 1)
			require.ErrorIs(t, h.errs[0], &paging.CursorError{Code: tc.code})
		})
	}
	assert.Equal(t, 0, syncMapLen(&h.lists.resources.pending), "no request state left behind")
}

// signedFor returns a templates cursor of the walk res belongs to, or makes
// one by adding templates until the list has a second page.
func signedFor(t *testing.T, h *harness, _ mcp.MCPMethod, res *mcp.ListResourceTemplatesResult) string {
	for i := 0; res.NextCursor == ""; i++ {
		h.srv.AddResourceTemplate(mcp.NewResourceTemplate(fmt.Sprintf("file:///t%d/{id}", i), "t"), nil)
		var err error
		res, err = h.client.ListResourceTemplatesByPage(context.Background(), mcp.ListResourceTemplatesRequest{})
		require.NoError(t, err)
	}
	return string(res.NextCursor)
}

func syncMapLen(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

func TestResourceTemplatesListOneSnapshot(t *testing.T) {
	h := newHarness(t, SnapshotListOptions{PageSize: 3})
	var want []string
	for i := range 11 {
		tpl := fmt.Sprintf("file:///t%02d/{id}", i)
		h.srv.AddResourceTemplate(mcp.NewResourceTemplate(tpl, fmt.Sprintf("tpl-%d", i/4)), nil)
		want = append(want, tpl)
	}
	ctx := context.Background()
	var got []string
	var snapshot string
	req := mcp.ListResourceTemplatesRequest{}
	for page := 0; ; page++ {
		res, err := h.client.ListResourceTemplatesByPage(ctx, req)
		require.NoError(t, err)
		id := snapshotIDOf(t, res.Meta)
		if page == 0 {
			snapshot = id
		}
		require.Equal(t, snapshot, id)
		require.NotEmpty(t, res.ResourceTemplates)
		for _, tpl := range res.ResourceTemplates {
			got = append(got, tpl.URITemplate.Raw())
		}
		h.srv.AddResourceTemplate(mcp.NewResourceTemplate(fmt.Sprintf("file:///new%d/{id}", page), "a"), nil)
		if res.NextCursor == "" {
			break
		}
		req.Params.Cursor = res.NextCursor
	}
	slices.Sort(got)
	assert.Equal(t, want, got)
}

// mcp-go v1.2.1's own pagination, for contrast: with a page limit, equal
// names across a page boundary are skipped and a catalog that fills its
// last page exactly ends with an empty page.
func TestMCPGoOwnListFaults(t *testing.T) {
	s := server.NewMCPServer("plain", "1", server.WithResourceCapabilities(false, false), server.WithPaginationLimit(5))
	addDocs(s, 0, 10) // names doc-00 x3, doc-01 x3, doc-02 x3, doc-03 x1
	c := startClient(t, s)
	ctx := context.Background()
	var pages [][]string
	req := mcp.ListResourcesRequest{}
	for {
		res, err := c.ListResourcesByPage(ctx, req)
		require.NoError(t, err)
		pages = append(pages, uris(res.Resources))
		if res.NextCursor == "" {
			break
		}
		req.Params.Cursor = res.NextCursor
	}
	n := 0
	for _, p := range pages {
		n += len(p)
	}
	assert.Less(t, n, 10, "mcp-go skips resources whose name equals the last name of a page")

	s2 := server.NewMCPServer("plain", "1", server.WithResourceCapabilities(false, false), server.WithPaginationLimit(5))
	for i := range 10 {
		uri := fmt.Sprintf("file:///u/%02d", i)
		s2.AddResource(mcp.NewResource(uri, uri), readText(uri))
	}
	c2 := startClient(t, s2)
	res, err := c2.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	req = mcp.ListResourcesRequest{}
	req.Params.Cursor = res.NextCursor
	res, err = c2.ListResourcesByPage(ctx, req)
	require.NoError(t, err)
	require.NotEmpty(t, res.NextCursor, "a full last page still points further")
	req.Params.Cursor = res.NextCursor
	res, err = c2.ListResourcesByPage(ctx, req)
	require.NoError(t, err)
	assert.Empty(t, res.Resources, "mcp-go ends with an empty page")
}

// A server with its own pagination limit is listed as mcp-go lists it: the
// snapshot lists step aside, and mcp-go's cursors pass through untouched on
// every page, so a client following them reaches every resource. Names are
// distinct because mcp-go skips equal names across its page boundaries.
func TestSnapshotListsStepAsideForMCPGoPaginationLimit(t *testing.T) {
	walkByPage := func(t *testing.T, c *client.Client) []string {
		var got []string
		req := mcp.ListResourcesRequest{}
		for range 10 {
			res, err := c.ListResourcesByPage(context.Background(), req)
			require.NoError(t, err)
			if res.Meta != nil {
				assert.NotContains(t, res.Meta.AdditionalFields, mcpsync.SnapshotIDMetaKey, "no snapshot claimed that cannot be proven")
			}
			got = append(got, uris(res.Resources)...)
			if res.NextCursor == "" {
				return got
			}
			req.Params.Cursor = res.NextCursor
		}
		t.Fatal("more pages than resources")
		return nil
	}
	cases := []struct {
		name string
		list func(t *testing.T, c *client.Client) []string
	}{
		{"following cursors page by page", walkByPage},
		{"mcp-go ListResources", func(t *testing.T, c *client.Client) []string {
			all, err := c.ListResources(context.Background(), mcp.ListResourcesRequest{})
			require.NoError(t, err)
			return uris(all.Resources)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lists, err := NewSnapshotLists(&SnapshotListOptions{Keyring: keyring(t), PageSize: 3})
			require.NoError(t, err)
			var got []error
			var mu sync.Mutex // protects got
			lists.resources.onError = func(_ context.Context, _ mcp.MCPMethod, err error) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, err)
			}
			s := server.NewMCPServer("x", "1", append(lists.ServerOptions(), server.WithResourceCapabilities(false, false), server.WithPaginationLimit(2))...)
			var want []string
			for i := range 5 {
				uri := fmt.Sprintf("file:///u/%02d", i)
				s.AddResource(mcp.NewResource(uri, fmt.Sprintf("name-%02d", i)), readText(uri))
				want = append(want, uri)
			}
			c := startClient(t, s)
			assert.ElementsMatch(t, want, tc.list(t, c), "every resource, once")
			assert.ElementsMatch(t, want, tc.list(t, c), "and again on a second walk")
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 1, "told once, and no cursor of mcp-go refused as ours")
			require.ErrorIs(t, got[0], ErrServerPaginates)
		})
	}
	t.Run("templates", func(t *testing.T) {
		lists, err := NewSnapshotLists(&SnapshotListOptions{Keyring: keyring(t), PageSize: 3})
		require.NoError(t, err)
		s := server.NewMCPServer("x", "1", append(lists.ServerOptions(), server.WithResourceCapabilities(false, false), server.WithPaginationLimit(2))...)
		var want []string
		for i := range 5 {
			tpl := fmt.Sprintf("file:///t%02d/{id}", i)
			s.AddResourceTemplate(mcp.NewResourceTemplate(tpl, fmt.Sprintf("tpl-%02d", i)), nil)
			want = append(want, tpl)
		}
		all, err := startClient(t, s).ListResourceTemplates(context.Background(), mcp.ListResourceTemplatesRequest{})
		require.NoError(t, err)
		var got []string
		for _, tpl := range all.ResourceTemplates {
			got = append(got, tpl.URITemplate.Raw())
		}
		assert.ElementsMatch(t, want, got)
	})
}

func TestSnapshotListOptions(t *testing.T) {
	_, err := NewSnapshotLists(nil)
	require.Error(t, err)
	_, err = NewSnapshotLists(&SnapshotListOptions{})
	require.Error(t, err)
	_, err = NewSnapshotLists(&SnapshotListOptions{Keyring: keyring(t), PageSize: -1})
	require.Error(t, err)
}

func TestWithSnapshotCapabilityKeepsEntries(t *testing.T) {
	s := server.NewMCPServer("x", "1", WithSnapshotCapability(map[string]any{"other": true}))
	c := startClient(t, s)
	caps := c.GetServerCapabilities()
	assert.Contains(t, caps.Experimental, "other")
	assert.Contains(t, caps.Experimental, mcpsync.SnapshotCapability)
}

// A list cursor is bound to its session: another client cannot continue a
// walk with it (its catalog may include the first session's own resources).
func TestResourcesListCursorBoundToSession(t *testing.T) {
	h := newHarness(t, SnapshotListOptions{PageSize: 3})
	addDocs(h.srv, 0, 7)
	ctx := context.Background()
	first, err := h.client.ListResourcesByPage(ctx, mcp.ListResourcesRequest{})
	require.NoError(t, err)
	other := startClient(t, h.srv)
	req := mcp.ListResourcesRequest{}
	req.Params.Cursor = first.NextCursor
	_, err = other.ListResourcesByPage(ctx, req)
	require.ErrorIs(t, err, mcp.ErrInvalidParams)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Len(t, h.errs, 1)
	require.ErrorIs(t, h.errs[0], paging.ErrCursorQueryMismatch)
}

// Sizes at the int limit: a list page size of math.MaxInt, and the store
// asked for math.MaxInt items after a boundary, slice without overflow.
func TestSnapshotListsPageSizeAtIntLimit(t *testing.T) {
	h := newHarness(t, SnapshotListOptions{PageSize: math.MaxInt})
	want := addDocs(h.srv, 0, 7)
	all, err := h.client.ListResources(context.Background(), mcp.ListResourcesRequest{})
	require.NoError(t, err)
	assert.ElementsMatch(t, want, uris(all.Resources))

	store := h.lists.resources.store
	res, err := h.client.ListResourcesByPage(context.Background(), mcp.ListResourcesRequest{})
	require.NoError(t, err)
	snap := snapshotIDOf(t, res.Meta)
	q := h.lists.resources.query(context.Background())
	after := store.pos(res.Resources[2])
	got, err := store.Page(context.Background(), snap, q, &after, math.MaxInt)
	require.NoError(t, err)
	assert.Equal(t, uris(res.Resources[3:]), uris(got))
}

// A resource with a long URI (an ordinary long query string) or a long name
// at the end of a page does not stop the listing: its cursor carries a
// digest that the walk's snapshot resolves.
func TestResourcesListLongKeysAtPageBoundary(t *testing.T) {
	cases := []struct {
		name          string
		uriN, nameN   int
		resources     int
		pageSize      int
		longEveryItem bool
	}{
		{"1,100-byte URI last on page 2", 1100, 0, 6, 2, false},
		{"100 KiB URIs everywhere", 100 << 10, 0, 7, 2, true},
		{"64 KiB names and URIs", 64 << 10, 64 << 10, 5, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, SnapshotListOptions{PageSize: tc.pageSize})
			var want []string
			for i := range tc.resources {
				uri := fmt.Sprintf("https://example.com/search/%02d?q=x", i)
				name := fmt.Sprintf("doc-%02d", i)
				if tc.longEveryItem || i == 3 { // 4th of 6 by name: the end of page 2
					uri += strings.Repeat("a", tc.uriN-len(uri))
					name += strings.Repeat("n", tc.nameN)
				}
				h.srv.AddResource(mcp.NewResource(uri, name), readText(uri))
				want = append(want, uri)
			}
			all, err := h.client.ListResources(context.Background(), mcp.ListResourcesRequest{})
			require.NoError(t, err)
			assert.ElementsMatch(t, want, uris(all.Resources))
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Empty(t, h.errs)
		})
	}
}

// TestResourcesListEveryItemOnceModel lists random catalogs with URIs and
// names of random length up to 64 KiB, from servers with and without their
// own pagination limit, by page and with mcp-go's ListResources: every
// resource is reached exactly once. With a limit, names are distinct,
// because mcp-go's own pagination skips equal names across its pages.
func TestResourcesListEveryItemOnceModel(t *testing.T) {
	keyLen := rapid.OneOf(rapid.IntRange(0, 16), rapid.IntRange(1000, 1200), rapid.IntRange(0, 64<<10))
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.SampledFrom([]int{0, 1, 2, 3, 5}).Draw(rt, "mcp-go pagination limit (0: none)")
		lists, err := NewSnapshotLists(&SnapshotListOptions{Keyring: keyring(t), PageSize: rapid.IntRange(1, 5).Draw(rt, "page size")})
		require.NoError(rt, err)
		opts := append(lists.ServerOptions(), server.WithResourceCapabilities(false, false))
		if limit > 0 {
			opts = append(opts, server.WithPaginationLimit(limit))
		}
		s := server.NewMCPServer("x", "1", opts...)
		want := []string{}
		for i := range rapid.IntRange(0, 12).Draw(rt, "resources") {
			uri := fmt.Sprintf("https://example.com/%02d?q=", i) + strings.Repeat("u", keyLen.Draw(rt, "uri length"))
			name := fmt.Sprintf("doc-%d", rapid.IntRange(0, 3).Draw(rt, "name group"))
			if limit > 0 {
				name = fmt.Sprintf("doc-%02d", i)
			}
			name += strings.Repeat("n", keyLen.Draw(rt, "name length"))
			s.AddResource(mcp.NewResource(uri, name), readText(uri))
			want = append(want, uri)
		}
		c := startClient(rt, s)
		got := []string{}
		if rapid.Bool().Draw(rt, "mcp-go ListResources") {
			all, err := c.ListResources(context.Background(), mcp.ListResourcesRequest{})
			require.NoError(rt, err)
			got = uris(all.Resources)
		} else {
			req := mcp.ListResourcesRequest{}
			for page := 0; ; page++ {
				require.LessOrEqual(rt, page, len(want)+1, "the walk ends")
				res, err := c.ListResourcesByPage(context.Background(), req)
				require.NoError(rt, err)
				got = append(got, uris(res.Resources)...)
				if res.NextCursor == "" {
					break
				}
				req.Params.Cursor = res.NextCursor
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		require.Equal(rt, want, got, "every resource exactly once")
	})
}
