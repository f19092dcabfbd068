package pagedserver

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/paging"
)

// How the lists are replaced. mcp-go v1.2.1 has no way to register a handler
// for resources/list, and its in-process, stdio and HTTP transports all call
// (*server.MCPServer).HandleMessage, so the only supported seam that works on
// every transport is the per-method hooks, which receive the request and the
// result by pointer:
//
//   - the before hook verifies our cursor and computes the page from the
//     frozen snapshot, then clears the cursor so that mcp-go's own handler
//     (which would base64-decode it as a name) lists the whole catalog;
//   - the after hook replaces mcp-go's result with our page. On a first page
//     it first freezes mcp-go's full list, which is exactly what mcp-go
//     would serve (global resources merged with the session's own), as the
//     snapshot of the walk.
//
// A refused cursor cannot be returned from a hook. The before hook instead
// replaces it with one that mcp-go's handler cannot decode, so the client
// gets the JSON-RPC error -32602 (invalid params) that the MCP specification
// asks for, though without our code; OnError sees the typed error.
//
// A server built with server.WithPaginationLimit has no whole catalog to
// freeze (ErrServerPaginates); once its first page shows that, both hooks
// leave its requests, and mcp-go's cursors in them, alone.
//
// mcp-go runs the generic OnSuccess hooks before the per-method after hooks,
// so an OnSuccess observer sees mcp-go's full list, not the page sent.

// ErrServerPaginates: the mcp-go server was built with
// server.WithPaginationLimit, so its handler no longer returns the whole
// catalog and no snapshot can be taken. The list is then served as mcp-go
// serves it, without a snapshot id, and mcp-go's own cursors pass through
// untouched (with mcp-go's own faults: it skips equal names across its page
// boundaries). The lists learn this from the first page on which mcp-go
// returns a next cursor, and report it once per server.
var ErrServerPaginates = errors.New("pagedserver: mcp-go pagination limit set; snapshot lists disabled")

// unreadableCursor is not base64, so mcp-go's listing handler refuses it with
// -32602.
const unreadableCursor = "!"

// Orders of the lists: name, then the unique URI (or URI template), so that
// equal names are ordered and never skipped across a page boundary.
var (
	resourceOrder = []paging.SortField{{Name: "name"}, {Name: "uri"}}
	templateOrder = []paging.SortField{{Name: "name"}, {Name: "uriTemplate"}}
)

// SnapshotListOptions configures SnapshotLists. Zero fields take the defaults.
type SnapshotListOptions struct {
	// Keyring signs and verifies list cursors. Required.
	Keyring *paging.Keyring
	// PageSize is the number of items per list page. Default 50.
	PageSize int
	// CursorTTL is how long a list cursor stays valid. Default 10 minutes.
	CursorTTL time.Duration
	// SnapshotTTL is how long a snapshot is kept after its last page was
	// served. Default CursorTTL: a walk that keeps going never loses it.
	SnapshotTTL time.Duration
	// MaxSnapshots bounds the snapshots kept per list; the least recently
	// used goes first and its cursors become CURSOR_EXPIRED. Default 64.
	MaxSnapshots int
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
	// OnError is told of every refused list cursor (a *paging.CursorError,
	// which the client only sees as -32602) and of ErrServerPaginates. It runs
	// on the request goroutine and must not block.
	OnError func(ctx context.Context, method mcp.MCPMethod, err error)
}

// SnapshotLists serves resources/list and resources/templates/list of an
// mcp-go server with signed keyset cursors bound to one snapshot per walk.
// Every page carries the snapshot id in _meta[mcpsync.SnapshotIDMetaKey];
// WithSnapshotCapability advertises the extension. resources/read is not
// touched. Safe for concurrent use.
type SnapshotLists struct {
	opts      SnapshotListOptions
	resources *snapshotList[mcp.Resource]
	templates *snapshotList[mcp.ResourceTemplate]
}

// NewSnapshotLists returns snapshot lists; install them with AddHooks.
func NewSnapshotLists(opts *SnapshotListOptions) (*SnapshotLists, error) {
	if opts == nil || opts.Keyring == nil {
		return nil, errors.New("pagedserver: snapshot lists without keyring")
	}
	o := *opts
	if o.PageSize < 0 || o.CursorTTL < 0 || o.SnapshotTTL < 0 || o.MaxSnapshots < 0 {
		return nil, errors.New("pagedserver: snapshot list options must not be negative")
	}
	if o.PageSize == 0 {
		o.PageSize = 50
	}
	if o.CursorTTL == 0 {
		o.CursorTTL = 10 * time.Minute
	}
	if o.SnapshotTTL == 0 {
		o.SnapshotTTL = o.CursorTTL
	}
	if o.MaxSnapshots == 0 {
		o.MaxSnapshots = 64
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	l := &SnapshotLists{opts: o}
	var err error
	l.resources, err = newSnapshotList(o, mcp.MethodResourcesList, resourceOrder, func(r mcp.Resource) paging.Position {
		return paging.Position{Sort: []string{r.Name}, ID: r.URI}
	})
	if err != nil {
		return nil, err
	}
	l.templates, err = newSnapshotList(o, mcp.MethodResourcesTemplatesList, templateOrder, func(t mcp.ResourceTemplate) paging.Position {
		raw := ""
		if t.URITemplate != nil && t.URITemplate.Template != nil {
			raw = t.URITemplate.Raw()
		}
		return paging.Position{Sort: []string{t.Name}, ID: raw}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// WithSnapshotCapability advertises the snapshot extension under
// capabilities.experimental, keeping the entries of experimental (which may be
// nil). It replaces any earlier server.WithExperimental.
func WithSnapshotCapability(experimental map[string]any) server.ServerOption {
	m := make(map[string]any, len(experimental)+1)
	for k, v := range experimental {
		m[k] = v
	}
	m[mcpsync.SnapshotCapability] = map[string]any{}
	return server.WithExperimental(m)
}

// AddHooks installs the lists into hooks, which must be the hooks the server
// is built with (server.WithHooks) or returns from GetHooks. Call it before
// the server handles requests: mcp-go reads hook slices without a lock.
func (l *SnapshotLists) AddHooks(h *server.Hooks) {
	h.AddBeforeListResources(func(ctx context.Context, _ any, req *mcp.ListResourcesRequest) {
		l.resources.before(ctx, req, &req.Params.Cursor)
	})
	h.AddAfterListResources(func(ctx context.Context, _ any, req *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		l.resources.after(ctx, req, &res.Resources, &res.PaginatedResult, &res.Meta)
	})
	h.AddBeforeListResourceTemplates(func(ctx context.Context, _ any, req *mcp.ListResourceTemplatesRequest) {
		l.templates.before(ctx, req, &req.Params.Cursor)
	})
	h.AddAfterListResourceTemplates(func(ctx context.Context, _ any, req *mcp.ListResourceTemplatesRequest, res *mcp.ListResourceTemplatesResult) {
		l.templates.after(ctx, req, &res.ResourceTemplates, &res.PaginatedResult, &res.Meta)
	})
	h.AddOnError(func(_ context.Context, _ any, method mcp.MCPMethod, message any, _ error) {
		switch method {
		case mcp.MethodResourcesList:
			l.resources.pending.Delete(message)
		case mcp.MethodResourcesTemplatesList:
			l.templates.pending.Delete(message)
		}
	})
}

// ServerOptions returns the options that install the lists into a new
// server: fresh hooks with AddHooks applied and the snapshot capability. Use
// AddHooks and WithSnapshotCapability instead when the server has its own
// hooks or experimental capabilities, since both options replace them.
func (l *SnapshotLists) ServerOptions() []server.ServerOption {
	h := &server.Hooks{}
	l.AddHooks(h)
	return []server.ServerOption{server.WithHooks(h), WithSnapshotCapability(nil)}
}

// snapshotList serves one list method.
type snapshotList[T any] struct {
	method    mcp.MCPMethod
	pageSize  int
	onError   func(context.Context, mcp.MCPMethod, error)
	store     *snapshotStore[T]
	paginator *paging.Paginator[T]
	// pending carries a request's page (or its first-page mark) from the
	// before hook to the after hook; keyed by the request pointer, which
	// both hooks receive. Entries are removed by the after or error hook.
	pending sync.Map
	// paginating holds the servers seen paginating on their own
	// (*server.MCPServer -> struct{}); mcp-go fixes the limit when the
	// server is built, so an entry is never removed.
	paginating sync.Map
}

type pendingPage[T any] struct {
	first bool
	env   *paging.PageEnvelope[T]
}

func newSnapshotList[T any](o SnapshotListOptions, method mcp.MCPMethod, order []paging.SortField, pos func(T) paging.Position) (*snapshotList[T], error) {
	store := &snapshotStore[T]{
		max: o.MaxSnapshots, ttl: o.SnapshotTTL, clock: o.Clock, pos: pos, order: order,
		byID: make(map[string]*list.Element), lru: list.New(),
	}
	p, err := paging.NewPaginator[T](store, &paging.PaginatorOptions{
		Keyring:     o.Keyring,
		CursorTTL:   o.CursorTTL,
		MaxPageSize: max(o.PageSize, 1000),
		Clock:       o.Clock,
	})
	if err != nil {
		return nil, err
	}
	return &snapshotList[T]{method: method, pageSize: o.PageSize, onError: o.OnError, store: store, paginator: p}, nil
}

// query binds list cursors to the method and the session, so that a cursor
// cannot carry one session's catalog (which may hold session resources) into
// another.
func (s *snapshotList[T]) query(ctx context.Context) paging.Query {
	session := ""
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		session = cs.SessionID()
	}
	return paging.Query{
		Tool:        string(s.method),
		Filter:      map[string]string{"session": session},
		Sort:        s.store.order,
		PageSize:    s.pageSize,
		Consistency: paging.ConsistencySnapshot,
	}
}

// serverPaginates reports whether the server of ctx was seen paginating on
// its own.
func (s *snapshotList[T]) serverPaginates(ctx context.Context) bool {
	_, ok := s.paginating.Load(server.ServerFromContext(ctx))
	return ok
}

// ownCursor tells our cursors from mcp-go's: ours are dot-separated, and
// mcp-go's are standard base64, which has no dot.
func ownCursor(c mcp.Cursor) bool { return strings.IndexByte(string(c), '.') >= 0 }

func (s *snapshotList[T]) before(ctx context.Context, req any, cursor *mcp.Cursor) {
	if s.serverPaginates(ctx) && !ownCursor(*cursor) {
		// mcp-go's own walk (or its first page): served as mcp-go serves
		// it. Our cursors of walks begun earlier still read their snapshot.
		return
	}
	if *cursor == "" {
		s.pending.Store(req, &pendingPage[T]{first: true})
		return
	}
	env, err := s.paginator.Page(ctx, paging.PageRequest{Query: s.query(ctx), Cursor: string(*cursor)})
	if err != nil {
		s.report(ctx, err)
		*cursor = unreadableCursor
		return
	}
	s.pending.Store(req, &pendingPage[T]{env: env})
	*cursor = ""
}

func (s *snapshotList[T]) after(ctx context.Context, req any, items *[]T, pr *mcp.PaginatedResult, meta **mcp.Meta) {
	v, ok := s.pending.LoadAndDelete(req)
	if !ok {
		return
	}
	p := v.(*pendingPage[T])
	env := p.env
	if p.first {
		if pr.NextCursor != "" {
			// mcp-go paginated on its own: its page is not the catalog.
			if _, seen := s.paginating.LoadOrStore(server.ServerFromContext(ctx), struct{}{}); !seen {
				s.report(ctx, ErrServerPaginates)
			}
			return
		}
		var err error
		env, err = s.paginator.Page(withLive(ctx, *items), paging.PageRequest{Query: s.query(ctx)})
		if err != nil {
			s.report(ctx, err)
			return
		}
	}
	*items = slices.Clone(env.Items)
	pr.NextCursor = mcp.Cursor(env.Page.NextCursor)
	if *meta == nil {
		*meta = &mcp.Meta{}
	}
	if (*meta).AdditionalFields == nil {
		(*meta).AdditionalFields = map[string]any{}
	}
	(*meta).AdditionalFields[mcpsync.SnapshotIDMetaKey] = env.Page.SnapshotID
}

func (s *snapshotList[T]) report(ctx context.Context, err error) {
	if s.onError != nil {
		s.onError(ctx, s.method, err)
	}
}

type liveKey struct{}

// withLive hands the list mcp-go just built to snapshotStore.Snapshot.
func withLive[T any](ctx context.Context, items []T) context.Context {
	return context.WithValue(ctx, liveKey{}, items)
}

// snapshotStore is the KeysetSource of a list: frozen, sorted copies of the
// catalog, named by the digest of their content, so that a snapshot id names
// one catalog for ever (also across restarts) and two walks of an unchanged
// catalog share a snapshot.
type snapshotStore[T any] struct {
	max   int
	ttl   time.Duration
	clock func() time.Time
	pos   func(T) paging.Position
	order []paging.SortField

	mu   sync.Mutex // protects byID and lru
	byID map[string]*list.Element
	lru  *list.List // of *frozenList[T], most recently used at the front
}

type frozenList[T any] struct {
	id      string
	items   []T // sorted by order; read-only
	pos     []paging.Position
	expires time.Time // protected by snapshotStore.mu

	digestsOnce sync.Once
	digests     map[paging.PositionDigest]int // -> index into pos; built by digestsOnce
}

// Snapshot freezes the live list in ctx.
func (s *snapshotStore[T]) Snapshot(ctx context.Context) (string, error) {
	live, ok := ctx.Value(liveKey{}).([]T)
	if !ok {
		return "", errors.New("pagedserver: no live list to snapshot")
	}
	f := &frozenList[T]{items: slices.Clone(live)}
	slices.SortFunc(f.items, func(a, b T) int { return paging.ComparePositions(s.order, s.pos(a), s.pos(b)) })
	// Two entries at one position (mcp-go keys resources by URI, so this
	// only happens with templates of equal name and template) keep one.
	f.items = slices.CompactFunc(f.items, func(a, b T) bool {
		return paging.ComparePositions(s.order, s.pos(a), s.pos(b)) == 0
	})
	f.pos = make([]paging.Position, len(f.items))
	for i, it := range f.items {
		f.pos[i] = s.pos(it)
	}
	d, err := paging.ContentDigest(f.items)
	if err != nil {
		return "", err
	}
	f.id = "cat-" + d[len("sha256:"):][:32]
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	if el, ok := s.byID[f.id]; ok {
		el.Value.(*frozenList[T]).expires = now.Add(s.ttl)
		s.lru.MoveToFront(el)
		return f.id, nil
	}
	f.expires = now.Add(s.ttl)
	s.byID[f.id] = s.lru.PushFront(f)
	for s.lru.Len() > s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.byID, old.Value.(*frozenList[T]).id)
	}
	return f.id, nil
}

// use returns the frozen list named snapshot and keeps it for another TTL.
func (s *snapshotStore[T]) use(snapshot string) (*frozenList[T], error) {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	el, ok := s.byID[snapshot]
	if !ok {
		return nil, &paging.CursorError{Code: paging.CursorExpired, Detail: fmt.Sprintf("catalog snapshot %q no longer kept", snapshot)}
	}
	f := el.Value.(*frozenList[T])
	f.expires = now.Add(s.ttl)
	s.lru.MoveToFront(el)
	return f, nil
}

// ResolvePosition implements paging.PositionResolver, so that a cursor
// after a long URI or name carries only its digest.
func (s *snapshotStore[T]) ResolvePosition(_ context.Context, snapshot string, _ paging.Query, d paging.PositionDigest) (paging.Position, error) {
	f, err := s.use(snapshot)
	if err != nil {
		return paging.Position{}, err
	}
	f.digestsOnce.Do(func() {
		f.digests = make(map[paging.PositionDigest]int, len(f.pos))
		for i, p := range f.pos {
			f.digests[paging.DigestPosition(p)] = i
		}
	})
	i, ok := f.digests[d]
	if !ok {
		return paging.Position{}, &paging.CursorError{Code: paging.CursorExpired, Detail: fmt.Sprintf("catalog snapshot %q holds no such position", snapshot)}
	}
	return f.pos[i], nil
}

// Page implements paging.KeysetSource over a frozen list.
func (s *snapshotStore[T]) Page(_ context.Context, snapshot string, q paging.Query, after *paging.Position, limit int) ([]T, error) {
	f, err := s.use(snapshot)
	if err != nil {
		return nil, err
	}
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(f.pos, *after, func(p, t paging.Position) int {
			if c := paging.ComparePositions(q.Sort, p, t); c != 0 {
				return c
			}
			return -1 // equal to the boundary: before it, strictly after is wanted
		})
	}
	// start+limit overflows for a limit near math.MaxInt.
	end := start + min(max(limit, 0), len(f.items)-start)
	return slices.Clone(f.items[start:end]), nil
}

// Position implements paging.KeysetSource.
func (s *snapshotStore[T]) Position(_ paging.Query, item T) paging.Position { return s.pos(item) }

func (s *snapshotStore[T]) expireLocked(now time.Time) {
	for el := s.lru.Back(); el != nil; {
		prev := el.Prev()
		if f := el.Value.(*frozenList[T]); !now.Before(f.expires) {
			s.lru.Remove(el)
			delete(s.byID, f.id)
		}
		el = prev
	}
}
