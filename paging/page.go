package paging

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Keyset pagination for paged tool results. A page never depends on an
// offset: every page after the first starts strictly after the full
// composite position (sort values and unique id) of the previous page's last
// item, which the signed cursor carries. Inserts, updates and deletes before
// the boundary therefore cannot push an unread item over it, and runs of
// equal sort values are split only by the id, never skipped or repeated.

// SortField is one field of a composite order.
type SortField struct {
	Name string `json:"name"`
	Desc bool   `json:"desc,omitempty"`
}

// Consistency says what a walk of pages reads.
type Consistency string

const (
	// ConsistencySnapshot reads every page of a walk from the view pinned by
	// its first page: exports and audits.
	ConsistencySnapshot Consistency = "snapshot"
	// ConsistencyIncremental reads each page from the data as it is when the
	// page is requested, after the boundary of the previous page: continuous
	// sync. Items that change and move before the boundary are left to the
	// next sync.
	ConsistencyIncremental Consistency = "incremental"
)

// Query is what a cursor is bound to.
type Query struct {
	// Tool names the tool (or list method) that pages.
	Tool string
	// Filter is the tool's filter in any JSON-marshalable form. Its digest is
	// taken over a canonical JSON form (object keys sorted, numbers kept as
	// written), so a struct and a map with the same content are the same
	// filter.
	Filter any
	// Sort is the composite order. Its last field is the unique id that
	// breaks ties, e.g. {updated_at desc, id desc}.
	Sort []SortField
	// PageSize is the number of items per page.
	PageSize int
	// Consistency defaults to ConsistencySnapshot.
	Consistency Consistency
}

func (q Query) consistency() Consistency {
	if q.Consistency == "" {
		return ConsistencySnapshot
	}
	return q.Consistency
}

func (q Query) validate(maxPageSize int) error {
	switch {
	case q.Tool == "":
		return fmt.Errorf("%w: query without tool name", ErrInvalidPageRequest)
	case len(q.Sort) == 0:
		return fmt.Errorf("%w: query without sort fields (the last one is the unique id)", ErrInvalidPageRequest)
	case len(q.Sort) > maxSortValues+1:
		return fmt.Errorf("%w: %d sort fields, at most %d", ErrInvalidPageRequest, len(q.Sort), maxSortValues+1)
	case q.PageSize < 1 || maxPageSize > 0 && q.PageSize > maxPageSize:
		return fmt.Errorf("%w: page size %d outside 1..%d", ErrInvalidPageRequest, q.PageSize, maxPageSize)
	}
	switch q.consistency() {
	case ConsistencySnapshot, ConsistencyIncremental:
	default:
		return fmt.Errorf("%w: consistency %q", ErrInvalidPageRequest, q.Consistency)
	}
	return nil
}

// Hash returns the digest a cursor is bound to: tool name, canonical filter
// digest, sort fields, page size and consistency. A cursor presented with a
// query of another hash is CURSOR_QUERY_MISMATCH: changing the page size or
// the filter mid-walk changes the meaning of the boundary.
func (q Query) Hash() (QueryHash, error) {
	fd, err := FilterDigest(q.Filter)
	if err != nil {
		return QueryHash{}, err
	}
	h := sha256.New()
	var b []byte
	b = append(b, "mcpsync.query.v1\x00"...)
	b = appendCursorString(b, q.Tool)
	b = append(b, fd[:]...)
	b = binary.AppendUvarint(b, uint64(len(q.Sort)))
	for _, f := range q.Sort {
		b = appendCursorString(b, f.Name)
		if f.Desc {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	b = binary.AppendUvarint(b, uint64(q.PageSize))
	b = appendCursorString(b, string(q.consistency()))
	h.Write(b)
	var out QueryHash
	copy(out[:], h.Sum(nil))
	return out, nil
}

// FilterDigest is the SHA-256 of the canonical JSON form of filter (object
// keys sorted, insignificant space removed, numbers as written). A nil filter
// and an empty object differ.
func FilterDigest(filter any) ([sha256.Size]byte, error) {
	raw, err := json.Marshal(filter)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("mcpsync: filter: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("mcpsync: filter: %w", err)
	}
	// encoding/json writes map keys sorted, which is the canonical form.
	canon, err := json.Marshal(v)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("mcpsync: filter: %w", err)
	}
	return sha256.Sum256(canon), nil
}

// Position is the place of an item in a composite order: one value per sort
// field except the last, and the item's unique id for the last. Values are
// compared as byte strings, so callers encode them order-preservingly
// (fixed-width UTC timestamps such as SortTime, zero-padded numbers).
type Position struct {
	Sort []string `json:"sort"`
	ID   string   `json:"id"`
}

// SortTime encodes t so that byte order is time order (UTC, fixed width,
// nanoseconds), for use as a Position sort value.
func SortTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z")
}

// ComparePositions orders a and b by order: negative when a comes first. The
// last field of order applies to the id, the others to Sort values in turn.
// Every position of one order has len(order)-1 sort values.
func ComparePositions(order []SortField, a, b Position) int {
	for i, f := range order[:len(order)-1] {
		var av, bv string
		if i < len(a.Sort) {
			av = a.Sort[i]
		}
		if i < len(b.Sort) {
			bv = b.Sort[i]
		}
		if c := strings.Compare(av, bv); c != 0 {
			if f.Desc {
				return -c
			}
			return c
		}
	}
	c := strings.Compare(a.ID, b.ID)
	if order[len(order)-1].Desc {
		return -c
	}
	return c
}

// PositionDigest names a position without carrying it: the SHA-256 of its
// sort values and id, each prefixed by its length. A cursor after a long
// position carries its digest (see PositionResolver).
type PositionDigest [sha256.Size]byte

// DigestPosition returns the digest of p.
func DigestPosition(p Position) PositionDigest {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write([]byte("mcpsync.position.v1\x00"))
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(p.Sort)))])
	for _, v := range p.Sort {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
		h.Write([]byte(v))
	}
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(p.ID)))])
	h.Write([]byte(p.ID))
	var d PositionDigest
	h.Sum(d[:0])
	return d
}

// inlinePosition is the longest position a cursor carries inline when the
// source could resolve its digest: shorter keys keep their version 1 cursors
// and need no lookup.
const inlinePosition = 1024

// PositionResolver is implemented by a KeysetSource that keeps its snapshots
// and can find a position in one by its digest. The Paginator then puts only
// the digest of a position longer than 1 KiB in a cursor, so that keys of any
// length page with cursors of about 150 bytes plus the snapshot id. Without
// it, positions travel inline and are bounded by MaxCursorPosition.
type PositionResolver interface {
	// ResolvePosition returns the position, in q's order, of the item of
	// the state named by snapshot whose DigestPosition is d. A snapshot that
	// is no longer retained, or that holds no such item, returns an error
	// that matches ErrCursorExpired.
	ResolvePosition(ctx context.Context, snapshot string, q Query, d PositionDigest) (Position, error)
}

// KeysetSource is the data a Paginator pages over. A source that also
// implements PositionResolver pages keys of any length; any other source
// pages positions (sort values and id together) of up to MaxCursorPosition
// bytes, and a page that would end at a longer one is refused with
// CURSOR_TOO_LONG.
type KeysetSource[T any] interface {
	// Snapshot pins the current state of the data and returns an id that
	// names it. The id must stay valid (or be refused, see Page) and must
	// never name another state later, even across restarts. It is at most
	// MaxCursorSnapshotID bytes; a longer one is refused with
	// CURSOR_TOO_LONG before any page is read.
	Snapshot(ctx context.Context) (string, error)
	// Page returns at most limit items of the state named by snapshot that
	// match q.Filter, in q.Sort order, each strictly after after:
	// ComparePositions(q.Sort, Position(q, item), *after) > 0. With after nil
	// it starts at the first item. The comparison is on the full position,
	// never on the sort values alone, so no item equal in sort values to the
	// boundary is skipped or repeated.
	//
	// A snapshot that is unknown or no longer retained returns an error that
	// matches ErrCursorExpired, never an empty page.
	Page(ctx context.Context, snapshot string, q Query, after *Position, limit int) ([]T, error)
	// Position returns item's place in q.Sort order.
	Position(q Query, item T) Position
}

// PageEnvelope is one page of a paged tool result.
type PageEnvelope[T any] struct {
	Items       []T             `json:"items"`
	Page        PageInfo        `json:"page"`
	Consistency Consistency     `json:"consistency"`
	Fingerprint PageFingerprint `json:"fingerprint"`
}

// PageInfo tells the caller how to continue.
type PageInfo struct {
	// NextCursor continues the walk; it is empty exactly when HasMore is false.
	NextCursor      string    `json:"next_cursor,omitempty"`
	HasMore         bool      `json:"has_more"`
	CursorExpiresAt time.Time `json:"cursor_expires_at,omitzero"`
	SnapshotID      string    `json:"snapshot_id"`
}

// PageFingerprint identifies a page's content. It is not a credential: it lets
// a caller tell a replay of the same page from a page whose boundaries moved.
type PageFingerprint struct {
	SnapshotID    string `json:"snapshot_id"`
	FirstID       string `json:"first_id"`
	LastID        string `json:"last_id"`
	Count         int    `json:"count"`
	ContentDigest string `json:"content_digest"`
}

// ContentDigest is "sha256:" and the hex SHA-256 over the JSON encoding of
// each item, each prefixed by its length. The digest of no items is that of
// the empty input.
func ContentDigest[T any](items []T) (string, error) {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	// One encoder and buffer for all items; Encode writes what json.Marshal
	// returns plus a newline, which is left out.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, it := range items {
		buf.Reset()
		if err := enc.Encode(it); err != nil {
			return "", fmt.Errorf("mcpsync: content digest: %w", err)
		}
		b := buf.Bytes()[:buf.Len()-1]
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	var sum [sha256.Size]byte
	return "sha256:" + hex.EncodeToString(h.Sum(sum[:0])), nil
}

// PageRequest asks a Paginator for one page.
type PageRequest struct {
	Query Query
	// Cursor continues a walk. Empty starts one.
	Cursor string
	// After starts a walk after a boundary the caller confirmed earlier (the
	// incremental recovery from an expired cursor). Only without Cursor.
	After *Position
	// IdempotencyKey makes a repeated request inside the idempotency window
	// return the stored page instead of reading again. Empty disables it.
	IdempotencyKey string
}

// PaginatorOptions configures a Paginator. Zero fields take the defaults.
type PaginatorOptions struct {
	// Keyring signs and verifies cursors. Required.
	Keyring *Keyring
	// CursorTTL is how long a cursor stays valid. Default 10 minutes.
	CursorTTL time.Duration
	// MaxPageSize bounds Query.PageSize. Default 1000.
	MaxPageSize int
	// IdempotencyWindow is how long a page is kept for replay under its
	// idempotency key. Default 2 minutes; it cannot exceed CursorTTL, since
	// the replayed page carries the original cursor.
	IdempotencyWindow time.Duration
	// IdempotencyEntries bounds the pages kept for replay; the oldest is
	// evicted first. Default 1024.
	IdempotencyEntries int
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
}

// Paginator serves pages of a KeysetSource with signed cursors. It is safe
// for concurrent use.
type Paginator[T any] struct {
	src      KeysetSource[T]
	resolver PositionResolver // src, when it resolves digests; else nil
	opts     PaginatorOptions
	cache    *idempotencyCache[T]
}

// NewPaginator returns a paginator over src.
func NewPaginator[T any](src KeysetSource[T], opts *PaginatorOptions) (*Paginator[T], error) {
	if src == nil {
		return nil, errors.New("mcpsync: paginator without source")
	}
	if opts == nil || opts.Keyring == nil {
		return nil, errors.New("mcpsync: paginator without keyring")
	}
	o := *opts
	if o.CursorTTL < 0 || o.IdempotencyWindow < 0 || o.MaxPageSize < 0 || o.IdempotencyEntries < 0 {
		return nil, errors.New("mcpsync: paginator options must not be negative")
	}
	if o.CursorTTL == 0 {
		o.CursorTTL = 10 * time.Minute
	}
	if o.MaxPageSize == 0 {
		o.MaxPageSize = 1000
	}
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = min(2*time.Minute, o.CursorTTL)
	}
	if o.IdempotencyWindow > o.CursorTTL {
		return nil, fmt.Errorf("mcpsync: idempotency window %v longer than cursor TTL %v", o.IdempotencyWindow, o.CursorTTL)
	}
	if o.IdempotencyEntries == 0 {
		o.IdempotencyEntries = 1024
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	resolver, _ := src.(PositionResolver)
	return &Paginator[T]{
		src:      src,
		resolver: resolver,
		opts:     o,
		cache:    newIdempotencyCache[T](o.IdempotencyEntries, o.IdempotencyWindow),
	}, nil
}

// Page returns the page req asks for. A cursor that cannot be continued
// returns a *CursorError (never an empty page); a repeated request with the
// same idempotency key and query inside the window returns the stored page
// with the same fingerprint; the same key with another cursor or boundary is
// ErrIdempotencyConflict. The returned envelope is shared with replays and
// must not be modified.
func (p *Paginator[T]) Page(ctx context.Context, req PageRequest) (*PageEnvelope[T], error) {
	q := req.Query
	if err := q.validate(p.opts.MaxPageSize); err != nil {
		return nil, err
	}
	if req.Cursor != "" && req.After != nil {
		return nil, fmt.Errorf("%w: both cursor and after boundary", ErrInvalidPageRequest)
	}
	if req.After != nil && len(req.After.Sort) != len(q.Sort)-1 {
		return nil, fmt.Errorf("%w: boundary has %d sort values, the order needs %d", ErrInvalidPageRequest, len(req.After.Sort), len(q.Sort)-1)
	}
	qh, err := q.Hash()
	if err != nil {
		return nil, err
	}
	now := p.opts.Clock()
	var ik idempotencyKey
	if req.IdempotencyKey != "" {
		ik = idempotencyKey{key: req.IdempotencyKey, query: qh}
		env, err := p.cache.get(ik, requestDigest(req), now)
		if env != nil || err != nil {
			return env, err
		}
	}
	after := req.After
	snapshot := ""
	if req.Cursor != "" {
		c, err := p.opts.Keyring.Decode(req.Cursor, qh, now)
		if err != nil {
			return nil, err
		}
		if after, err = p.cursorBoundary(ctx, q, c); err != nil {
			return nil, err
		}
		snapshot = c.SnapshotID
	}
	if snapshot == "" || q.consistency() == ConsistencyIncremental {
		if snapshot, err = p.src.Snapshot(ctx); err != nil {
			return nil, err
		}
		// Before any page is read: a snapshot id no cursor can carry would
		// otherwise fail only once the first page is full.
		if err := checkCursorLimits(snapshot, 0); err != nil {
			return nil, err
		}
	}
	items, err := p.src.Page(ctx, snapshot, q, after, fetchLimit(q.PageSize))
	if err != nil {
		return nil, err
	}
	first, last, err := checkKeysetOrder(p.src, q, after, items)
	if err != nil {
		return nil, err
	}
	env := &PageEnvelope[T]{
		Items:       items,
		Consistency: q.consistency(),
		Page:        PageInfo{SnapshotID: snapshot},
	}
	if len(items) > q.PageSize {
		env.Items = items[:q.PageSize:q.PageSize]
		last = p.src.Position(q, env.Items[len(env.Items)-1])
		expires := now.Add(p.opts.CursorTTL).Truncate(time.Millisecond).UTC()
		c := CursorPayload{
			Query:      qh,
			After:      last,
			SnapshotID: snapshot,
			IssuedAt:   now.Truncate(time.Millisecond).UTC(),
			ExpiresAt:  expires,
		}
		if p.resolver != nil && positionLen(last) > inlinePosition {
			c.After, c.AfterDigest = Position{}, DigestPosition(last)
		}
		next, err := p.opts.Keyring.Encode(c)
		if err != nil {
			return nil, err
		}
		env.Page = PageInfo{NextCursor: next, HasMore: true, CursorExpiresAt: expires, SnapshotID: snapshot}
	}
	if env.Items == nil {
		env.Items = []T{}
	}
	env.Fingerprint = PageFingerprint{SnapshotID: snapshot, Count: len(env.Items)}
	if len(env.Items) > 0 {
		env.Fingerprint.FirstID, env.Fingerprint.LastID = first.ID, last.ID
	}
	if env.Fingerprint.ContentDigest, err = ContentDigest(env.Items); err != nil {
		return nil, err
	}
	if req.IdempotencyKey != "" {
		// When two identical requests race, the first stored page wins and
		// both callers get it.
		return p.cache.put(ik, requestDigest(req), env, now)
	}
	return env, nil
}

// cursorBoundary returns the position a verified cursor continues after,
// resolving a digest in the snapshot that the issuing page was read at.
func (p *Paginator[T]) cursorBoundary(ctx context.Context, q Query, c CursorPayload) (*Position, error) {
	if c.AfterDigest == (PositionDigest{}) {
		return &c.After, nil
	}
	if p.resolver == nil {
		// Signed by a key of ours, so written for a source that resolves:
		// this one was swapped for one that cannot.
		return nil, invalidCursor("position digest, and the source cannot resolve one")
	}
	pos, err := p.resolver.ResolvePosition(ctx, c.SnapshotID, q, c.AfterDigest)
	if err != nil {
		return nil, err
	}
	if DigestPosition(pos) != c.AfterDigest {
		return nil, fmt.Errorf("%w: resolved position %q does not match the cursor's digest", ErrKeysetOrder, pos.ID)
	}
	return &pos, nil
}

// fetchLimit is how many items a page of size asks its source for: one item
// more than the page tells whether another page exists, so the last page says
// has_more=false instead of pointing at an empty page. A page of math.MaxInt
// items asks for math.MaxInt: no slice holds more, so there is never another.
func fetchLimit(size int) int {
	if size == math.MaxInt {
		return size
	}
	return size + 1
}

// checkKeysetOrder refuses a page whose source broke its contract: serving
// it would repeat or reorder items across pages. A comparison on sort values
// alone, or <= instead of <, is the usual cause. It returns the positions of
// the first and last item.
func checkKeysetOrder[T any](src KeysetSource[T], q Query, after *Position, items []T) (first, last Position, err error) {
	if limit := fetchLimit(q.PageSize); len(items) > limit {
		return first, last, fmt.Errorf("%w: %d items for a limit of %d", ErrKeysetOrder, len(items), limit)
	}
	var prev Position
	hasPrev := after != nil
	if hasPrev {
		prev = *after
	}
	for i, it := range items {
		pos := src.Position(q, it)
		if hasPrev && ComparePositions(q.Sort, pos, prev) <= 0 {
			return first, last, fmt.Errorf("%w: %q not after %q", ErrKeysetOrder, pos.ID, prev.ID)
		}
		if i == 0 {
			first = pos
		}
		prev, hasPrev = pos, true
	}
	if len(items) > 0 {
		last = prev
	}
	return first, last, nil
}

// requestDigest names what a request asks for beyond its query, so that an
// idempotency key reused for another page is detected.
func requestDigest(req PageRequest) [sha256.Size]byte {
	var b []byte
	b = appendCursorString(b, req.Cursor)
	if req.After != nil {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(req.After.Sort)))
		for _, v := range req.After.Sort {
			b = appendCursorString(b, v)
		}
		b = appendCursorString(b, req.After.ID)
	}
	return sha256.Sum256(b)
}

// idempotencyKey scopes a client's idempotency key to one query, so that two
// tools (or two clients) choosing the same key never share pages.
type idempotencyKey struct {
	key   string
	query QueryHash
}

type idempotencyEntry[T any] struct {
	key     idempotencyKey
	request [sha256.Size]byte
	env     *PageEnvelope[T]
	expires time.Time
}

// idempotencyCache keeps recent pages for replay: at most max entries, each
// for ttl after it was stored, oldest evicted first. Insertion order is
// expiry order (a replay does not extend the window: the page's cursor keeps
// its own expiry), so expiry and eviction both work from the back in O(1).
type idempotencyCache[T any] struct {
	max int
	ttl time.Duration

	mu      sync.Mutex // protects entries and fifo
	entries map[idempotencyKey]*list.Element
	fifo    *list.List // of *idempotencyEntry[T], newest at the front
}

func newIdempotencyCache[T any](max int, ttl time.Duration) *idempotencyCache[T] {
	return &idempotencyCache[T]{max: max, ttl: ttl, entries: make(map[idempotencyKey]*list.Element), fifo: list.New()}
}

// get returns the stored page of k, nil if there is none in the window, or
// ErrIdempotencyConflict if k was used for another request.
func (c *idempotencyCache[T]) get(k idempotencyKey, req [sha256.Size]byte, now time.Time) (*PageEnvelope[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	el, ok := c.entries[k]
	if !ok {
		return nil, nil
	}
	e := el.Value.(*idempotencyEntry[T])
	if e.request != req {
		return nil, fmt.Errorf("%w: key %q", ErrIdempotencyConflict, k.key)
	}
	return e.env, nil
}

// put stores env under k unless a page is already stored, and returns the
// stored page.
func (c *idempotencyCache[T]) put(k idempotencyKey, req [sha256.Size]byte, env *PageEnvelope[T], now time.Time) (*PageEnvelope[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	if el, ok := c.entries[k]; ok {
		e := el.Value.(*idempotencyEntry[T])
		if e.request != req {
			return nil, fmt.Errorf("%w: key %q", ErrIdempotencyConflict, k.key)
		}
		return e.env, nil
	}
	c.entries[k] = c.fifo.PushFront(&idempotencyEntry[T]{key: k, request: req, env: env, expires: now.Add(c.ttl)})
	for c.fifo.Len() > c.max {
		c.removeLocked(c.fifo.Back())
	}
	return env, nil
}

// expireLocked drops entries whose window has passed, oldest first.
func (c *idempotencyCache[T]) expireLocked(now time.Time) {
	for el := c.fifo.Back(); el != nil && !now.Before(el.Value.(*idempotencyEntry[T]).expires); el = c.fifo.Back() {
		c.removeLocked(el)
	}
}

func (c *idempotencyCache[T]) removeLocked(el *list.Element) {
	c.fifo.Remove(el)
	delete(c.entries, el.Value.(*idempotencyEntry[T]).key)
}

func (c *idempotencyCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fifo.Len()
}

// MemorySourceOptions configures a MemorySource.
type MemorySourceOptions[T any] struct {
	// ID returns an item's unique id. Required.
	ID func(T) string
	// SortValue returns the value of field for item, encoded so that byte
	// order is the field's order (see Position). Required.
	SortValue func(item T, field string) string
	// Match reports whether item passes filter (Query.Filter). Nil matches
	// every item.
	Match func(item T, filter any) bool
	// Retain is how many versions are kept for snapshot reads; a snapshot
	// older than that is refused with CURSOR_EXPIRED. Default 16.
	Retain int
}

// MemorySource is an in-memory KeysetSource that keeps the last versions of
// its data, so that a snapshot id really pins a consistent view while writes
// go on. Every Put or Delete makes a new version (copy-on-write); it is a
// reference implementation for tests and small data sets. Safe for
// concurrent use.
type MemorySource[T any] struct {
	opts   MemorySourceOptions[T]
	prefix string // random per source, so snapshot ids never name another source's state

	mu       sync.Mutex // protects versions and seq
	versions []*memoryVersion[T]
	seq      uint64
}

type memoryVersion[T any] struct {
	id    string
	items map[string]T // read-only once published

	mu      sync.Mutex                           // protects list, sorted and digests
	list    []T                                  // items in id order, built on first read
	sorted  map[string][]sortedAt                // order signature -> positions sorted by it
	digests map[string]map[PositionDigest]string // order signature -> digest -> id, built on first lookup
}

type sortedAt struct {
	pos Position
	idx int // into memoryVersion.list
}

// NewMemorySource returns an empty source.
func NewMemorySource[T any](opts *MemorySourceOptions[T]) (*MemorySource[T], error) {
	if opts == nil || opts.ID == nil || opts.SortValue == nil {
		return nil, errors.New("mcpsync: memory source needs ID and SortValue")
	}
	o := *opts
	if o.Retain < 0 {
		return nil, errors.New("mcpsync: memory source Retain must not be negative")
	}
	if o.Retain == 0 {
		o.Retain = 16
	}
	s := &MemorySource[T]{opts: o, prefix: randomHex128()[:16]}
	s.versions = []*memoryVersion[T]{s.newVersion(map[string]T{})}
	return s, nil
}

func (s *MemorySource[T]) newVersion(items map[string]T) *memoryVersion[T] {
	s.seq++
	return &memoryVersion[T]{id: fmt.Sprintf("snap-%s-%d", s.prefix, s.seq), items: items}
}

// Put inserts or replaces items (by id) in one new version and returns its id.
func (s *MemorySource[T]) Put(items ...T) string {
	return s.write(func(m map[string]T) {
		for _, it := range items {
			m[s.opts.ID(it)] = it
		}
	})
}

// Delete removes the items with ids in one new version and returns its id.
func (s *MemorySource[T]) Delete(ids ...string) string {
	return s.write(func(m map[string]T) {
		for _, id := range ids {
			delete(m, id)
		}
	})
}

func (s *MemorySource[T]) write(change func(map[string]T)) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.versions[len(s.versions)-1]
	next := make(map[string]T, len(cur.items)+1)
	for k, v := range cur.items {
		next[k] = v
	}
	change(next)
	v := s.newVersion(next)
	s.versions = append(s.versions, v)
	if len(s.versions) > s.opts.Retain {
		s.versions = slices.Delete(s.versions, 0, len(s.versions)-s.opts.Retain)
	}
	return v.id
}

// Snapshot returns the id of the current version.
func (s *MemorySource[T]) Snapshot(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[len(s.versions)-1].id, nil
}

// Position implements KeysetSource.
func (s *MemorySource[T]) Position(q Query, item T) Position {
	p := Position{ID: s.opts.ID(item)}
	if n := len(q.Sort) - 1; n > 0 {
		p.Sort = make([]string, n)
		for i, f := range q.Sort[:n] {
			p.Sort[i] = s.opts.SortValue(item, f.Name)
		}
	}
	return p
}

// Page implements KeysetSource with a binary search for the boundary.
func (s *MemorySource[T]) Page(ctx context.Context, snapshot string, q Query, after *Position, limit int) ([]T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := s.version(snapshot)
	if err != nil {
		return nil, err
	}
	sorted, list := v.sortedBy(s, q)
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(sorted, *after, func(e sortedAt, t Position) int {
			// Items equal to the boundary count as before it: strictly after.
			if c := ComparePositions(q.Sort, e.pos, t); c != 0 {
				return c
			}
			return -1
		})
	}
	if limit < 1 {
		return []T{}, nil
	}
	out := make([]T, 0, min(limit, len(sorted)-start))
	for _, e := range sorted[start:] {
		if len(out) == limit {
			break
		}
		it := list[e.idx]
		if s.opts.Match == nil || s.opts.Match(it, q.Filter) {
			out = append(out, it)
		}
	}
	return out, nil
}

// ResolvePosition implements PositionResolver.
func (s *MemorySource[T]) ResolvePosition(ctx context.Context, snapshot string, q Query, d PositionDigest) (Position, error) {
	if err := ctx.Err(); err != nil {
		return Position{}, err
	}
	v, err := s.version(snapshot)
	if err != nil {
		return Position{}, err
	}
	sig := orderSignature(q)
	v.mu.Lock()
	if v.digests == nil {
		v.digests = make(map[string]map[PositionDigest]string)
	}
	byDigest, ok := v.digests[sig]
	if !ok {
		byDigest = make(map[PositionDigest]string)
		// Every position, short ones too: the paginator looks up only long
		// ones, but the PositionResolver contract is any item the snapshot
		// holds, and another caller (or a later inline bound) may rely on it.
		for id, it := range v.items {
			byDigest[DigestPosition(s.Position(q, it))] = id
		}
		v.digests[sig] = byDigest
	}
	id, ok := byDigest[d]
	v.mu.Unlock()
	if !ok {
		return Position{}, &CursorError{Code: CursorExpired, Detail: fmt.Sprintf("snapshot %q holds no such position", snapshot)}
	}
	return s.Position(q, v.items[id]), nil
}

// version returns the retained version named snapshot.
func (s *MemorySource[T]) version(snapshot string) (*memoryVersion[T], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.versions {
		if v.id == snapshot {
			return v, nil
		}
	}
	return nil, &CursorError{Code: CursorExpired, Detail: fmt.Sprintf("snapshot %q is not retained", snapshot)}
}

func orderSignature(q Query) string {
	var sig strings.Builder
	for _, f := range q.Sort {
		fmt.Fprintf(&sig, "%q/%t,", f.Name, f.Desc)
	}
	return sig.String()
}

// sortedBy returns v's items sorted by q's order, computed once per order.
func (v *memoryVersion[T]) sortedBy(s *MemorySource[T], q Query) ([]sortedAt, []T) {
	sig := orderSignature(q)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sorted == nil {
		v.sorted = make(map[string][]sortedAt)
	}
	list := v.listLocked()
	if got, ok := v.sorted[sig]; ok {
		return got, list
	}
	sorted := make([]sortedAt, len(list))
	for i, it := range list {
		sorted[i] = sortedAt{pos: s.Position(q, it), idx: i}
	}
	slices.SortFunc(sorted, func(a, b sortedAt) int { return ComparePositions(q.Sort, a.pos, b.pos) })
	v.sorted[sig] = sorted
	return sorted, list
}

// listLocked returns the items of v in a fixed (id) order; the sorted views
// index into it.
func (v *memoryVersion[T]) listLocked() []T {
	if v.list != nil {
		return v.list
	}
	keys := make([]string, 0, len(v.items))
	for k := range v.items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = v.items[k]
	}
	v.list = out
	return out
}

// randomHex128 returns 32 hex digits from crypto/rand.
func randomHex128() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}
