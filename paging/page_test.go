package paging

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// supportTicket is the item of a search_tickets tool.
type supportTicket struct {
	ID        string `json:"id"`
	UpdatedAt string `json:"updated_at"`
	Title     string `json:"title,omitempty"`
}

// pageClock is an injected clock; tests move it, nothing sleeps.
type pageClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func newPageClock() *pageClock { return &pageClock{t: testT0} }

func (c *pageClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *pageClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ticketSource(t testing.TB, retain int) *MemorySource[supportTicket] {
	t.Helper()
	src, err := NewMemorySource(&MemorySourceOptions[supportTicket]{
		ID: func(x supportTicket) string { return x.ID },
		SortValue: func(x supportTicket, field string) string {
			if field != "updated_at" {
				panic("unknown sort field " + field)
			}
			return x.UpdatedAt
		},
		Retain: retain,
	})
	require.NoError(t, err)
	return src
}

// ticketAt makes a supportTicket updated minute m after testT0. Many tickets share
// a minute, so runs of equal sort values cross page boundaries.
func ticketAt(id string, m int) supportTicket {
	return supportTicket{ID: id, UpdatedAt: SortTime(testT0.Add(time.Duration(m) * time.Minute)), Title: "ticket " + id}
}

// fixedTickets is the fixed data set: 95 tickets with unique ids in runs of
// seven equal timestamps.
func fixedTickets() []supportTicket {
	var out []supportTicket
	for i := range 95 {
		out = append(out, ticketAt(fmt.Sprintf("T-%04d", i), i/7))
	}
	return out
}

func ticketQuery(size int, c Consistency) Query {
	q := testQuery()
	q.PageSize = size
	q.Consistency = c
	return q
}

func newTestPaginator(t testing.TB, src KeysetSource[supportTicket], clock *pageClock, o *PaginatorOptions) *Paginator[supportTicket] {
	t.Helper()
	opts := PaginatorOptions{}
	if o != nil {
		opts = *o
	}
	opts.Keyring = testKeyring(t, testKey)
	opts.Clock = clock.Now
	p, err := NewPaginator(src, &opts)
	require.NoError(t, err)
	return p
}

func ticketIDs(items []supportTicket) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// expectedOrder sorts items the way the query orders them.
func expectedOrder(q Query, items []supportTicket) []string {
	s := slices.Clone(items)
	pos := func(x supportTicket) Position { return Position{Sort: []string{x.UpdatedAt}, ID: x.ID} }
	slices.SortFunc(s, func(a, b supportTicket) int { return ComparePositions(q.Sort, pos(a), pos(b)) })
	return ticketIDs(s)
}

// TestPagesAcceptance is the pagination acceptance test: over a
// fixed data set with unique ids, with inserts, updates and deletes between
// pages, a snapshot walk returns exactly the snapshot's set, in order, with
// no id twice, including runs of equal sort values across page boundaries.
func TestPagesAcceptance(t *testing.T) {
	for _, size := range []int{1, 5, 7, 10, 20, 94, 95, 96} {
		t.Run(fmt.Sprintf("snapshot/page size %d", size), func(t *testing.T) {
			src := ticketSource(t, 1000) // three versions per page, all retained
			src.Put(fixedTickets()...)
			p := newTestPaginator(t, src, newPageClock(), nil)
			q := ticketQuery(size, ConsistencySnapshot)

			var got []string
			var snapshot string
			req := PageRequest{Query: q}
			for page := 0; ; page++ {
				env, err := p.Page(context.Background(), req)
				require.NoError(t, err)
				if page == 0 {
					snapshot = env.Page.SnapshotID
				}
				require.Equal(t, snapshot, env.Page.SnapshotID, "every page reads the first page's snapshot")
				require.NotEmpty(t, env.Items, "no empty page")
				got = append(got, ticketIDs(env.Items)...)
				// Between pages: a new supportTicket on top, one in the middle of
				// a run, an update that moves a supportTicket, a delete.
				src.Put(ticketAt(fmt.Sprintf("N-%d", page), 1000), ticketAt(fmt.Sprintf("M-%d", page), 6))
				src.Put(ticketAt(fmt.Sprintf("T-%04d", 90-page%90), 2000))
				src.Delete(fmt.Sprintf("T-%04d", (page*13)%95))
				if !env.Page.HasMore {
					require.Empty(t, env.Page.NextCursor)
					break
				}
				req = PageRequest{Query: q, Cursor: env.Page.NextCursor}
			}
			assert.Equal(t, expectedOrder(q, fixedTickets()), got, "the snapshot's set, once each, in order")
		})
	}
	t.Run("incremental", func(t *testing.T) {
		src := ticketSource(t, 64)
		src.Put(fixedTickets()...)
		p := newTestPaginator(t, src, newPageClock(), nil)
		q := ticketQuery(10, ConsistencyIncremental)
		touched := map[string]bool{}
		var got []string
		snapshots := map[string]bool{}
		req := PageRequest{Query: q}
		for page := 0; ; page++ {
			env, err := p.Page(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, ConsistencyIncremental, env.Consistency)
			snapshots[env.Page.SnapshotID] = true
			got = append(got, ticketIDs(env.Items)...)
			// Inserts in the unread part, an update of an unread supportTicket
			// (moves it to the top, before the boundary) and a delete of
			// an unread supportTicket.
			ins := fmt.Sprintf("M-%d", page)
			src.Put(ticketAt(ins, 0))
			upd := fmt.Sprintf("T-%04d", 20+page)
			src.Put(ticketAt(upd, 2000))
			del := fmt.Sprintf("T-%04d", 40+page)
			src.Delete(del)
			touched[upd], touched[del] = true, true
			if !env.Page.HasMore {
				break
			}
			req = PageRequest{Query: q, Cursor: env.Page.NextCursor}
		}
		seen := map[string]bool{}
		for _, id := range got {
			require.False(t, seen[id], "id %s twice", id)
			seen[id] = true
		}
		for _, x := range fixedTickets() {
			if !touched[x.ID] {
				assert.True(t, seen[x.ID], "untouched supportTicket %s missed", x.ID)
			}
		}
		for i := range 3 {
			assert.True(t, seen[fmt.Sprintf("M-%d", i)], "insert after the boundary is read live")
		}
		assert.Greater(t, len(snapshots), 1, "incremental pages read live data")
	})
}

// The classic offset fault: with offsets, a supportTicket inserted on top
// pushes the 20th supportTicket over the page boundary and it is never read.
func TestInsertOnTopDoesNotHideBoundaryItem(t *testing.T) {
	for _, c := range []Consistency{ConsistencySnapshot, ConsistencyIncremental} {
		t.Run(string(c), func(t *testing.T) {
			src := ticketSource(t, 0)
			var data []supportTicket
			for i := range 40 {
				data = append(data, ticketAt(fmt.Sprintf("T-%04d", i), i))
			}
			src.Put(data...)
			p := newTestPaginator(t, src, newPageClock(), nil)
			q := ticketQuery(20, c)
			first, err := p.Page(context.Background(), PageRequest{Query: q})
			require.NoError(t, err)
			src.Put(ticketAt("NEW", 1000))
			second, err := p.Page(context.Background(), PageRequest{Query: q, Cursor: first.Page.NextCursor})
			require.NoError(t, err)
			all := append(ticketIDs(first.Items), ticketIDs(second.Items)...)
			assert.Equal(t, expectedOrder(q, data), all)
		})
	}
}

func TestEqualSortValuesAcrossBoundary(t *testing.T) {
	src := ticketSource(t, 0)
	var data []supportTicket
	for i := range 25 {
		data = append(data, ticketAt(fmt.Sprintf("T-%04d", i), 0)) // one timestamp for all
	}
	src.Put(data...)
	p := newTestPaginator(t, src, newPageClock(), nil)
	q := ticketQuery(4, ConsistencySnapshot)
	var got []string
	req := PageRequest{Query: q}
	for {
		env, err := p.Page(context.Background(), req)
		require.NoError(t, err)
		got = append(got, ticketIDs(env.Items)...)
		if !env.Page.HasMore {
			break
		}
		req.Cursor = env.Page.NextCursor
	}
	assert.Equal(t, expectedOrder(q, data), got)
}

// mcp-go's own listing fault: a page that ends exactly at the end still
// points at an empty page. Fetching one item more tells there is none.
func TestNoEmptyLastPage(t *testing.T) {
	src := ticketSource(t, 0)
	var data []supportTicket
	for i := range 10 {
		data = append(data, ticketAt(fmt.Sprintf("T-%04d", i), i))
	}
	src.Put(data...)
	p := newTestPaginator(t, src, newPageClock(), nil)
	q := ticketQuery(5, ConsistencySnapshot)
	first, err := p.Page(context.Background(), PageRequest{Query: q})
	require.NoError(t, err)
	require.True(t, first.Page.HasMore)
	second, err := p.Page(context.Background(), PageRequest{Query: q, Cursor: first.Page.NextCursor})
	require.NoError(t, err)
	assert.Len(t, second.Items, 5)
	assert.False(t, second.Page.HasMore)
	assert.Empty(t, second.Page.NextCursor)
	assert.True(t, second.Page.CursorExpiresAt.IsZero())
}

func TestEmptyResultIsOnePageWithoutMore(t *testing.T) {
	p := newTestPaginator(t, ticketSource(t, 0), newPageClock(), nil)
	env, err := p.Page(context.Background(), PageRequest{Query: ticketQuery(5, ConsistencySnapshot)})
	require.NoError(t, err)
	assert.NotNil(t, env.Items)
	assert.Empty(t, env.Items)
	assert.False(t, env.Page.HasMore)
	b, err := json.Marshal(env)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"items":[]`)
}

func TestPageCursorErrors(t *testing.T) {
	src := ticketSource(t, 2)
	src.Put(fixedTickets()...)
	clock := newPageClock()
	p := newTestPaginator(t, src, clock, &PaginatorOptions{CursorTTL: time.Minute})
	q := ticketQuery(10, ConsistencySnapshot)
	first, err := p.Page(context.Background(), PageRequest{Query: q})
	require.NoError(t, err)
	next := first.Page.NextCursor

	t.Run("another page size", func(t *testing.T) {
		_, err := p.Page(context.Background(), PageRequest{Query: ticketQuery(11, ConsistencySnapshot), Cursor: next})
		requireCursorCode(t, err, CursorQueryMismatch)
	})
	t.Run("another tool", func(t *testing.T) {
		other := q
		other.Tool = "search_users"
		_, err := p.Page(context.Background(), PageRequest{Query: other, Cursor: next})
		requireCursorCode(t, err, CursorQueryMismatch)
	})
	t.Run("tampered", func(t *testing.T) {
		_, err := p.Page(context.Background(), PageRequest{Query: q, Cursor: tamperLast(next)})
		requireCursorCode(t, err, CursorInvalid)
	})
	t.Run("snapshot no longer retained", func(t *testing.T) {
		src.Put(ticketAt("X1", 1))
		src.Put(ticketAt("X2", 1))
		env, err := p.Page(context.Background(), PageRequest{Query: q, Cursor: next})
		requireCursorCode(t, err, CursorExpired)
		assert.Nil(t, env, "an error, never an empty page")
		var ce *CursorError
		require.ErrorAs(t, err, &ce)
		assert.NotEmpty(t, ce.Detail)
	})
	t.Run("expired by the clock", func(t *testing.T) {
		fresh, err := p.Page(context.Background(), PageRequest{Query: q})
		require.NoError(t, err)
		clock.Advance(time.Minute)
		_, err = p.Page(context.Background(), PageRequest{Query: q, Cursor: fresh.Page.NextCursor})
		requireCursorCode(t, err, CursorExpired)
	})
}

func TestPageRequestValidation(t *testing.T) {
	p := newTestPaginator(t, ticketSource(t, 0), newPageClock(), nil)
	good := ticketQuery(10, ConsistencySnapshot)
	cases := map[string]PageRequest{
		"no tool":            {Query: Query{Sort: good.Sort, PageSize: 10}},
		"no sort":            {Query: Query{Tool: "t", PageSize: 10}},
		"zero page size":     {Query: ticketQuery(0, ConsistencySnapshot)},
		"page size too big":  {Query: ticketQuery(1001, ConsistencySnapshot)},
		"bad consistency":    {Query: ticketQuery(10, "eventual")},
		"cursor and after":   {Query: good, Cursor: "v1.x.y.z", After: &Position{Sort: []string{"a"}, ID: "b"}},
		"boundary too short": {Query: good, After: &Position{ID: "b"}},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Page(context.Background(), req)
			require.ErrorIs(t, err, ErrInvalidPageRequest)
		})
	}
}

func TestPaginatorOptions(t *testing.T) {
	src := ticketSource(t, 0)
	k := testKeyring(t, testKey)
	cases := map[string]*PaginatorOptions{
		"nil":                    nil,
		"no keyring":             {},
		"negative TTL":           {Keyring: k, CursorTTL: -time.Second},
		"window longer than TTL": {Keyring: k, CursorTTL: time.Minute, IdempotencyWindow: 2 * time.Minute},
		"negative entries":       {Keyring: k, IdempotencyEntries: -1},
		"negative max page size": {Keyring: k, MaxPageSize: -1},
		"negative window":        {Keyring: k, IdempotencyWindow: -1},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewPaginator[supportTicket](src, o)
			require.Error(t, err)
		})
	}
	t.Run("short TTL shortens the default window", func(t *testing.T) {
		p, err := NewPaginator[supportTicket](src, &PaginatorOptions{Keyring: k, CursorTTL: time.Second})
		require.NoError(t, err)
		assert.Equal(t, time.Second, p.opts.IdempotencyWindow)
	})
}

// A request repeated with the same idempotency key inside the window gets
// the same page and fingerprint even when the data changed in between.
func TestIdempotentRetry(t *testing.T) {
	ctx := context.Background()
	src := ticketSource(t, 0)
	src.Put(fixedTickets()...)
	clock := newPageClock()
	p := newTestPaginator(t, src, clock, &PaginatorOptions{IdempotencyWindow: 30 * time.Second})
	q := ticketQuery(10, ConsistencyIncremental)
	first, err := p.Page(ctx, PageRequest{Query: q})
	require.NoError(t, err)

	req := PageRequest{Query: q, Cursor: first.Page.NextCursor, IdempotencyKey: "req-2"}
	a, err := p.Page(ctx, req)
	require.NoError(t, err)
	src.Delete(a.Items[0].ID)
	src.Put(ticketAt("T-NEW", 12))
	clock.Advance(29 * time.Second)
	b, err := p.Page(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, a.Fingerprint, b.Fingerprint)
	assert.Equal(t, a, b)

	t.Run("another request under the same key is refused", func(t *testing.T) {
		_, err := p.Page(ctx, PageRequest{Query: q, IdempotencyKey: "req-2"})
		require.ErrorIs(t, err, ErrIdempotencyConflict)
		_, err = p.Page(ctx, PageRequest{Query: q, After: &Position{Sort: []string{"x"}, ID: "y"}, IdempotencyKey: "req-2"})
		require.ErrorIs(t, err, ErrIdempotencyConflict)
	})
	t.Run("the same key of another query is another request", func(t *testing.T) {
		other := ticketQuery(11, ConsistencyIncremental)
		_, err := p.Page(ctx, PageRequest{Query: other, IdempotencyKey: "req-2"})
		require.NoError(t, err)
	})
	t.Run("after the window the page is read again", func(t *testing.T) {
		clock.Advance(time.Second)
		c, err := p.Page(ctx, req)
		require.NoError(t, err)
		assert.NotEqual(t, a.Fingerprint, c.Fingerprint)
	})
}

func TestIdempotencyCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	src := ticketSource(t, 0)
	src.Put(fixedTickets()...)
	clock := newPageClock()
	p := newTestPaginator(t, src, clock, &PaginatorOptions{IdempotencyEntries: 3})
	q := ticketQuery(5, ConsistencySnapshot)
	first := map[string]*PageEnvelope[supportTicket]{}
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		env, err := p.Page(ctx, PageRequest{Query: q, IdempotencyKey: key})
		require.NoError(t, err)
		first[key] = env
		require.LessOrEqual(t, p.cache.len(), 3)
	}
	// k9 is still stored; k0 was evicted, so a new read gets a new snapshot.
	src.Put(ticketAt("T-NEW", 500))
	again, err := p.Page(ctx, PageRequest{Query: q, IdempotencyKey: "k9"})
	require.NoError(t, err)
	assert.Same(t, first["k9"], again)
	fresh, err := p.Page(ctx, PageRequest{Query: q, IdempotencyKey: "k0"})
	require.NoError(t, err)
	assert.NotEqual(t, first["k0"].Fingerprint, fresh.Fingerprint)
}

// Concurrent identical requests under one key all get the one stored page.
func TestIdempotentRetryConcurrent(t *testing.T) {
	src := ticketSource(t, 0)
	src.Put(fixedTickets()...)
	p := newTestPaginator(t, src, newPageClock(), nil)
	q := ticketQuery(10, ConsistencyIncremental)
	var wg sync.WaitGroup
	got := make([]*PageEnvelope[supportTicket], 8)
	for i := range got {
		wg.Go(func() {
			env, err := p.Page(context.Background(), PageRequest{Query: q, IdempotencyKey: "same"})
			if err == nil {
				got[i] = env
			}
			src.Put(ticketAt(fmt.Sprintf("W-%d", i), 3000))
		})
	}
	wg.Wait()
	for _, env := range got {
		require.NotNil(t, env)
		assert.Equal(t, got[0].Fingerprint, env.Fingerprint)
	}
}

func TestFingerprint(t *testing.T) {
	src := ticketSource(t, 0)
	src.Put(fixedTickets()...)
	p := newTestPaginator(t, src, newPageClock(), nil)
	env, err := p.Page(context.Background(), PageRequest{Query: ticketQuery(10, ConsistencySnapshot)})
	require.NoError(t, err)
	fp := env.Fingerprint
	assert.Equal(t, env.Page.SnapshotID, fp.SnapshotID)
	assert.Equal(t, env.Items[0].ID, fp.FirstID)
	assert.Equal(t, env.Items[9].ID, fp.LastID)
	assert.Equal(t, 10, fp.Count)
	d, err := ContentDigest(env.Items)
	require.NoError(t, err)
	assert.Equal(t, d, fp.ContentDigest)
	changed := slices.Clone(env.Items)
	changed[3].Title = "edited"
	d2, err := ContentDigest(changed)
	require.NoError(t, err)
	assert.NotEqual(t, d, d2)
}

// staticSource is a fixed data set under a fixed snapshot id, for golden files.
type staticSource struct{ items []supportTicket }

func (s staticSource) Snapshot(context.Context) (string, error) { return "snap-7f2c", nil }

func (s staticSource) Position(_ Query, x supportTicket) Position {
	return Position{Sort: []string{x.UpdatedAt}, ID: x.ID}
}

func (s staticSource) Page(_ context.Context, snapshot string, q Query, after *Position, limit int) ([]supportTicket, error) {
	var out []supportTicket
	for _, x := range s.items { // already in order
		if (after == nil || ComparePositions(q.Sort, s.Position(q, x), *after) > 0) && len(out) < limit {
			out = append(out, x)
		}
	}
	return out, nil
}

func TestEnvelopeGolden(t *testing.T) {
	src := staticSource{items: []supportTicket{
		{ID: "T-1042", UpdatedAt: "2026-08-25T04:00:12Z"},
		{ID: "T-1041", UpdatedAt: "2026-08-25T04:00:12Z"},
		{ID: "T-0999", UpdatedAt: "2026-08-25T03:59:00Z"},
	}}
	p := newTestPaginator(t, src, newPageClock(), nil)
	q := ticketQuery(2, ConsistencySnapshot)
	first, err := p.Page(context.Background(), PageRequest{Query: q})
	require.NoError(t, err)
	last, err := p.Page(context.Background(), PageRequest{Query: q, Cursor: first.Page.NextCursor})
	require.NoError(t, err)
	b, err := json.MarshalIndent([]*PageEnvelope[supportTicket]{first, last}, "", "  ")
	require.NoError(t, err)
	cursorGolden(t, "envelope.golden.json", append(b, '\n'))
}

func TestComparePositions(t *testing.T) {
	order := []SortField{{Name: "updated_at", Desc: true}, {Name: "id", Desc: true}}
	a := Position{Sort: []string{"2"}, ID: "a"}
	b := Position{Sort: []string{"1"}, ID: "z"}
	c := Position{Sort: []string{"2"}, ID: "b"}
	assert.Negative(t, ComparePositions(order, a, b), "newer first")
	assert.Negative(t, ComparePositions(order, c, a), "equal time: id desc")
	assert.Zero(t, ComparePositions(order, a, a))
	asc := []SortField{{Name: "name"}, {Name: "uri"}}
	assert.Negative(t, ComparePositions(asc, Position{Sort: []string{"x"}, ID: "1"}, Position{Sort: []string{"x"}, ID: "2"}))
	assert.Negative(t, ComparePositions([]SortField{{Name: "id"}}, Position{ID: "a"}, Position{ID: "b"}))
}

func TestMemorySourceOptions(t *testing.T) {
	_, err := NewMemorySource[supportTicket](nil)
	require.Error(t, err)
	_, err = NewMemorySource(&MemorySourceOptions[supportTicket]{ID: func(supportTicket) string { return "" }})
	require.Error(t, err)
	_, err = NewMemorySource(&MemorySourceOptions[supportTicket]{
		ID: func(supportTicket) string { return "" }, SortValue: func(supportTicket, string) string { return "" }, Retain: -1,
	})
	require.Error(t, err)
}

func TestMemorySourceFilterAndSnapshotIDs(t *testing.T) {
	src, err := NewMemorySource(&MemorySourceOptions[supportTicket]{
		ID:        func(x supportTicket) string { return x.ID },
		SortValue: func(x supportTicket, _ string) string { return x.UpdatedAt },
		Match: func(x supportTicket, f any) bool {
			m, _ := f.(map[string]any)
			return m["prefix"] == nil || x.ID[:1] == m["prefix"]
		},
	})
	require.NoError(t, err)
	src.Put(ticketAt("A-1", 1), ticketAt("B-1", 2), ticketAt("A-2", 3))
	q := ticketQuery(10, ConsistencySnapshot)
	q.Filter = map[string]any{"prefix": "A"}
	snap, err := src.Snapshot(context.Background())
	require.NoError(t, err)
	got, err := src.Page(context.Background(), snap, q, nil, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"A-2", "A-1"}, ticketIDs(got))

	other := ticketSource(t, 0)
	otherSnap, err := other.Snapshot(context.Background())
	require.NoError(t, err)
	assert.NotEqual(t, snap, otherSnap, "two sources never share snapshot ids")
	_, err = src.Page(context.Background(), otherSnap, q, nil, 10)
	require.ErrorIs(t, err, ErrCursorExpired)
}

// BenchmarkPage100 serves a page of 100 tickets out of 10000 from the
// in-memory source: the full paginator (verify cursor, read, sign next
// cursor, fingerprint) beside the bare source read it wraps, and beside a
// replay from the idempotency cache.
func BenchmarkPage100(b *testing.B) {
	src := ticketSource(b, 0)
	var data []supportTicket
	for i := range 10000 {
		data = append(data, ticketAt(fmt.Sprintf("T-%05d", i), i/7))
	}
	src.Put(data...)
	p := newTestPaginator(b, src, newPageClock(), nil)
	q := ticketQuery(100, ConsistencySnapshot)
	ctx := context.Background()
	first, err := p.Page(ctx, PageRequest{Query: q})
	if err != nil {
		b.Fatal(err)
	}
	snap := first.Page.SnapshotID
	after := src.Position(q, first.Items[99])
	b.Run("paginator", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			env, err := p.Page(ctx, PageRequest{Query: q, Cursor: first.Page.NextCursor})
			if err != nil || len(env.Items) != 100 {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=source", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			items, err := src.Page(ctx, snap, q, &after, 101)
			if err != nil || len(items) != 101 {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=source+digest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			items, err := src.Page(ctx, snap, q, &after, 101)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ContentDigest(items[:100]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("idempotent-replay", func(b *testing.B) {
		req := PageRequest{Query: q, Cursor: first.Page.NextCursor, IdempotencyKey: "bench"}
		if _, err := p.Page(ctx, req); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Page(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPagesModel walks random data sets with random writes between pages.
// The model is the data itself: a snapshot walk must return exactly the set
// at its first page, in order; an incremental walk must return every item
// that no write touched, in strictly increasing order, and an id twice only
// when an update moved it past the boundary after it was read (a new
// version, which continuous sync wants).
func TestPagesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		src, err := NewMemorySource(&MemorySourceOptions[supportTicket]{
			ID:        func(x supportTicket) string { return x.ID },
			SortValue: func(x supportTicket, _ string) string { return x.UpdatedAt },
			Retain:    1 << 20,
		})
		require.NoError(rt, err)
		live := map[string]supportTicket{}
		for i := range rapid.IntRange(0, 60).Draw(rt, "items") {
			x := ticketAt(fmt.Sprintf("T-%03d", i), rapid.IntRange(0, 5).Draw(rt, "minute"))
			live[x.ID] = x
			src.Put(x)
		}
		initial := make([]supportTicket, 0, len(live))
		for _, x := range live {
			initial = append(initial, x)
		}
		k, err := NewKeyring(testKey)
		require.NoError(rt, err)
		p, err := NewPaginator[supportTicket](src, &PaginatorOptions{Keyring: k, Clock: newPageClock().Now})
		require.NoError(rt, err)
		c := rapid.SampledFrom([]Consistency{ConsistencySnapshot, ConsistencyIncremental}).Draw(rt, "consistency")
		q := ticketQuery(rapid.IntRange(1, 12).Draw(rt, "page size"), c)

		touched := map[string]bool{}
		var got []supportTicket
		req := PageRequest{Query: q}
		for {
			env, err := p.Page(context.Background(), req)
			require.NoError(rt, err)
			// In incremental mode the rest may be deleted after a page said
			// has_more; a snapshot cannot change.
			require.True(rt, len(env.Items) > 0 || len(got) == 0 || c == ConsistencyIncremental, "no empty page after the first")
			got = append(got, env.Items...)
			for i := range rapid.IntRange(0, 3).Draw(rt, "writes") {
				ids := slices.Sorted(maps.Keys(live))
				switch op := rapid.IntRange(0, 2).Draw(rt, "op"); {
				case op == 0 || len(ids) == 0:
					x := ticketAt(fmt.Sprintf("N-%d-%d", len(got), i), rapid.IntRange(0, 5).Draw(rt, "minute"))
					live[x.ID] = x
					src.Put(x)
				case op == 1:
					id := rapid.SampledFrom(ids).Draw(rt, "update")
					x := ticketAt(id, rapid.IntRange(0, 5).Draw(rt, "minute"))
					live[id], touched[id] = x, true
					src.Put(x)
				default:
					id := rapid.SampledFrom(ids).Draw(rt, "delete")
					delete(live, id)
					touched[id] = true
					src.Delete(id)
				}
			}
			if !env.Page.HasMore {
				break
			}
			req = PageRequest{Query: q, Cursor: env.Page.NextCursor}
		}
		for i := 1; i < len(got); i++ {
			require.Negative(rt, ComparePositions(q.Sort, ticketPosition(got[i-1]), ticketPosition(got[i])), "strictly increasing")
		}
		if c == ConsistencySnapshot {
			require.Equal(rt, expectedOrder(q, initial), ticketIDs(got))
			return
		}
		seen := map[string]bool{}
		for _, x := range got {
			require.False(rt, seen[x.ID] && !touched[x.ID], "untouched id %s twice", x.ID)
			seen[x.ID] = true
		}
		for _, x := range initial {
			if !touched[x.ID] {
				require.True(rt, seen[x.ID], "untouched %s missed", x.ID)
			}
		}
	})
}

func ExamplePaginator() {
	type supportTicket struct {
		ID        string `json:"id"`
		UpdatedAt string `json:"updated_at"`
	}
	keys, _ := NewKeyring(CursorKey{ID: "k1", Secret: []byte("a secret of at least thirty-two bytes")})
	src, _ := NewMemorySource(&MemorySourceOptions[supportTicket]{
		ID:        func(t supportTicket) string { return t.ID },
		SortValue: func(t supportTicket, _ string) string { return t.UpdatedAt },
	})
	// Five tickets, the last three updated in the same second.
	src.Put(
		supportTicket{"T-1", "2026-08-25T04:00:01Z"}, supportTicket{"T-2", "2026-08-25T04:00:02Z"},
		supportTicket{"T-3", "2026-08-25T04:00:03Z"}, supportTicket{"T-4", "2026-08-25T04:00:03Z"},
		supportTicket{"T-5", "2026-08-25T04:00:03Z"},
	)
	pages, _ := NewPaginator[supportTicket](src, &PaginatorOptions{Keyring: keys})
	q := Query{
		Tool:     "search_tickets",
		Sort:     []SortField{{Name: "updated_at", Desc: true}, {Name: "id", Desc: true}},
		PageSize: 2,
	}
	req := PageRequest{Query: q}
	for {
		env, err := pages.Page(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		src.Put(supportTicket{"T-" + env.Fingerprint.LastID, "2026-08-25T05:00:00Z"}) // a write between pages
		var got []string
		for _, t := range env.Items {
			got = append(got, t.ID)
		}
		fmt.Println(got, env.Page.HasMore)
		if !env.Page.HasMore {
			return
		}
		req.Cursor = env.Page.NextCursor
	}
	// Output:
	// [T-5 T-4] true
	// [T-3 T-2] true
	// [T-1] false
}

// inclusiveSource breaks the keyset contract the usual way: it compares with
// <= and so returns the boundary item again.
type inclusiveSource struct{ staticSource }

func (s inclusiveSource) Page(_ context.Context, _ string, q Query, after *Position, limit int) ([]supportTicket, error) {
	var out []supportTicket
	for _, x := range s.items {
		if (after == nil || ComparePositions(q.Sort, s.Position(q, x), *after) >= 0) && len(out) < limit {
			out = append(out, x)
		}
	}
	return out, nil
}

func TestPaginatorRefusesSourceThatBreaksOrder(t *testing.T) {
	items := []supportTicket{ticketAt("T-3", 2), ticketAt("T-2", 1), ticketAt("T-1", 0)}
	p := newTestPaginator(t, inclusiveSource{staticSource{items: items}}, newPageClock(), nil)
	q := ticketQuery(2, ConsistencySnapshot)
	first, err := p.Page(context.Background(), PageRequest{Query: q})
	require.NoError(t, err)
	_, err = p.Page(context.Background(), PageRequest{Query: q, Cursor: first.Page.NextCursor})
	require.ErrorIs(t, err, ErrKeysetOrder, "an error, not a page that repeats T-2")

	unsorted := newTestPaginator(t, staticSource{items: []supportTicket{items[2], items[0]}}, newPageClock(), nil)
	_, err = unsorted.Page(context.Background(), PageRequest{Query: q})
	require.ErrorIs(t, err, ErrKeysetOrder)
}

// A page size of math.MaxInt, with MaxPageSize math.MaxInt to say "no
// limit", must not overflow the one item more that tells whether another
// page exists.
func TestPageSizeAtIntLimit(t *testing.T) {
	for _, size := range []int{math.MaxInt, math.MaxInt - 1} {
		t.Run(fmt.Sprintf("page size %d", size), func(t *testing.T) {
			src := ticketSource(t, 0)
			src.Put(fixedTickets()...)
			p := newTestPaginator(t, src, newPageClock(), &PaginatorOptions{MaxPageSize: math.MaxInt})
			q := ticketQuery(size, ConsistencySnapshot)
			env, err := p.Page(context.Background(), PageRequest{Query: q})
			require.NoError(t, err)
			assert.Equal(t, expectedOrder(q, fixedTickets()), ticketIDs(env.Items))
			assert.False(t, env.Page.HasMore)
		})
	}
	t.Run("memory source after a boundary", func(t *testing.T) {
		src := ticketSource(t, 0)
		src.Put(fixedTickets()...)
		q := ticketQuery(10, ConsistencySnapshot)
		snap, err := src.Snapshot(context.Background())
		require.NoError(t, err)
		want := expectedOrder(q, fixedTickets())
		after := ticketPosition(fixedTickets()[slices.Index(ticketIDs(fixedTickets()), want[89])])
		got, err := src.Page(context.Background(), snap, q, &after, math.MaxInt)
		require.NoError(t, err)
		assert.Equal(t, want[90:], ticketIDs(got))
	})
}

// longTickets are n tickets whose ids (or sort values) are size bytes long,
// so that every page boundary is a long position.
func longTickets(n, size int, longSort bool) []supportTicket {
	var out []supportTicket
	for i := range n {
		x := ticketAt(fmt.Sprintf("T-%04d-", i)+strings.Repeat("x", size), i/2)
		if longSort {
			x = ticketAt(fmt.Sprintf("T-%04d", i), i/2)
			x.UpdatedAt += strings.Repeat("z", size)
		}
		out = append(out, x)
	}
	return out
}

// walkPages follows next_cursor from the first page and returns every id.
func walkPages(t *testing.T, p *Paginator[supportTicket], q Query) []string {
	t.Helper()
	var got []string
	req := PageRequest{Query: q}
	for range 1000 {
		env, err := p.Page(context.Background(), req)
		require.NoError(t, err)
		got = append(got, ticketIDs(env.Items)...)
		if !env.Page.HasMore {
			return got
		}
		req = PageRequest{Query: q, Cursor: env.Page.NextCursor}
	}
	t.Fatal("walk does not end")
	return nil
}

// A long key at a page boundary pages like any other: the memory source
// resolves the digest its cursor carries, and a source that cannot resolve
// positions gets them inline up to MaxCursorPosition.
func TestLongPositionAtPageBoundary(t *testing.T) {
	for _, size := range []int{1105, 4 << 10, 64 << 10, 200 << 10} {
		for _, longSort := range []bool{false, true} {
			for _, c := range []Consistency{ConsistencySnapshot, ConsistencyIncremental} {
				name := fmt.Sprintf("%d-byte id/%s", size, c)
				if longSort {
					name = fmt.Sprintf("%d-byte sort value/%s", size, c)
				}
				t.Run(name, func(t *testing.T) {
					src := ticketSource(t, 0)
					data := longTickets(9, size, longSort)
					src.Put(data...)
					q := ticketQuery(2, c)
					p := newTestPaginator(t, src, newPageClock(), nil)
					assert.Equal(t, expectedOrder(q, data), walkPages(t, p, q))
				})
			}
		}
	}
	t.Run("source without position lookup", func(t *testing.T) {
		data := longTickets(9, 2000, false)
		q := ticketQuery(2, ConsistencySnapshot)
		sorted := slices.Clone(data)
		slices.SortFunc(sorted, func(a, b supportTicket) int { return ComparePositions(q.Sort, ticketPosition(a), ticketPosition(b)) })
		p := newTestPaginator(t, staticSource{items: sorted}, newPageClock(), nil)
		assert.Equal(t, expectedOrder(q, data), walkPages(t, p, q))
	})
}

// MemorySource resolves the digest of any position a snapshot holds, short
// or long, as PositionResolver says; a digest the snapshot does not hold and
// a snapshot no longer kept are CURSOR_EXPIRED.
func TestMemorySourceResolvesEveryPosition(t *testing.T) {
	src := ticketSource(t, 1)
	short, long := ticketAt("T-1", 0), longTickets(1, 2000, false)[0]
	snap := src.Put(short, long)
	q := ticketQuery(2, ConsistencySnapshot)
	for _, x := range []supportTicket{short, long} {
		pos := ticketPosition(x)
		got, err := src.ResolvePosition(context.Background(), snap, q, DigestPosition(pos))
		require.NoError(t, err, "position of %d bytes", positionLen(pos))
		assert.Equal(t, pos, got)
	}
	_, err := src.ResolvePosition(context.Background(), snap, q, DigestPosition(ticketPosition(ticketAt("T-2", 0))))
	requireCursorCode(t, err, CursorExpired)
	src.Put(ticketAt("T-3", 0)) // Retain 1: snap is no longer kept
	_, err = src.ResolvePosition(context.Background(), snap, q, DigestPosition(ticketPosition(short)))
	requireCursorCode(t, err, CursorExpired)
}

// longSnapshotSource names its states with ids no cursor can carry and
// counts the pages it was asked for.
type longSnapshotSource struct {
	staticSource
	pages *int
}

func (s longSnapshotSource) Snapshot(context.Context) (string, error) {
	return strings.Repeat("s", MaxCursorSnapshotID+1), nil
}

func (s longSnapshotSource) Page(ctx context.Context, snapshot string, q Query, after *Position, limit int) ([]supportTicket, error) {
	*s.pages++
	return s.staticSource.Page(ctx, snapshot, q, after, limit)
}

// The limits that remain are typed errors naming them: a position beyond
// MaxCursorPosition from a source that cannot resolve digests, and a
// snapshot id beyond MaxCursorSnapshotID, refused before a page is read.
func TestCursorLimitsAreCursorErrors(t *testing.T) {
	q := ticketQuery(2, ConsistencySnapshot)
	t.Run("position beyond MaxCursorPosition", func(t *testing.T) {
		data := longTickets(5, MaxCursorPosition, false)
		slices.SortFunc(data, func(a, b supportTicket) int { return ComparePositions(q.Sort, ticketPosition(a), ticketPosition(b)) })
		p := newTestPaginator(t, staticSource{items: data}, newPageClock(), nil)
		_, err := p.Page(context.Background(), PageRequest{Query: q})
		requireCursorCode(t, err, CursorTooLong)
		assert.Contains(t, err.Error(), "MaxCursorPosition")
	})
	t.Run("snapshot id beyond MaxCursorSnapshotID", func(t *testing.T) {
		pages := 0
		p := newTestPaginator(t, longSnapshotSource{staticSource{items: fixedTickets()[:1]}, &pages}, newPageClock(), nil)
		_, err := p.Page(context.Background(), PageRequest{Query: q})
		requireCursorCode(t, err, CursorTooLong)
		assert.Contains(t, err.Error(), "MaxCursorSnapshotID")
		assert.Zero(t, pages, "refused before a page is read, even a page that needs no cursor")
	})
	t.Run("digest cursor on a source that cannot resolve", func(t *testing.T) {
		src := ticketSource(t, 0)
		data := longTickets(5, 2000, false)
		src.Put(data...)
		first, err := newTestPaginator(t, src, newPageClock(), nil).Page(context.Background(), PageRequest{Query: q})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(first.Page.NextCursor, "v2."))
		other := newTestPaginator(t, staticSource{items: data}, newPageClock(), nil)
		_, err = other.Page(context.Background(), PageRequest{Query: q, Cursor: first.Page.NextCursor})
		requireCursorCode(t, err, CursorInvalid)
	})
}

// An incremental walk over long keys whose issuing view is no longer kept
// gets CURSOR_EXPIRED, and the walker's incremental recovery continues from
// its own copy of the position: nothing is missed or repeated.
func TestLongPositionIncrementalRecovery(t *testing.T) {
	src := ticketSource(t, 2)
	data := longTickets(9, 5000, false)
	src.Put(data...)
	q := ticketQuery(2, ConsistencyIncremental)
	p := newTestPaginator(t, src, newPageClock(), nil)
	served := 0
	w, err := NewWalker(func(ctx context.Context, req WalkRequest) (*PageEnvelope[supportTicket], error) {
		env, err := p.Page(ctx, PageRequest{Query: q, Cursor: req.Cursor, After: req.After})
		if served++; served == 2 {
			src.Put(ticketAt("A", -1)) // two writes push the issuing view out
			src.Put(ticketAt("B", -1))
		}
		return env, err
	}, &WalkOptions[supportTicket]{Position: ticketPosition, Order: q.Sort, Recovery: RecoverIncremental})
	require.NoError(t, err)
	got, err := collectWalk(w)
	require.NoError(t, err)
	assert.Equal(t, expectedOrder(q, append(data, ticketAt("A", -1), ticketAt("B", -1))), got)
	require.Len(t, w.Recoveries(), 1)
	assert.Equal(t, CursorExpired, w.Recoveries()[0].Reason)
}

// TestLongKeysModel pages random data sets whose ids have random lengths up
// to 64 KiB, from a source that resolves position digests and from one that
// does not. Every item is reached exactly once; the one other outcome is
// CURSOR_TOO_LONG from the source that cannot resolve, on the page that
// would end at a position longer than MaxCursorPosition.
func TestLongKeysModel(t *testing.T) {
	idLen := rapid.OneOf(rapid.IntRange(0, 16), rapid.IntRange(1000, 1200), rapid.IntRange(0, 64<<10))
	rapid.Check(t, func(rt *rapid.T) {
		c := rapid.SampledFrom([]Consistency{ConsistencySnapshot, ConsistencyIncremental}).Draw(rt, "consistency")
		q := ticketQuery(rapid.IntRange(1, 4).Draw(rt, "page size"), c)
		var data []supportTicket
		for i := range rapid.IntRange(0, 15).Draw(rt, "items") {
			id := fmt.Sprintf("T-%03d-", i) + strings.Repeat("x", idLen.Draw(rt, "id length"))
			data = append(data, ticketAt(id, rapid.IntRange(0, 3).Draw(rt, "minute")))
		}
		want := expectedOrder(q, data)
		byID := map[string]supportTicket{}
		for _, x := range data {
			byID[x.ID] = x
		}
		var src KeysetSource[supportTicket]
		resolving := rapid.Bool().Draw(rt, "source resolves digests")
		if resolving {
			mem, err := NewMemorySource(&MemorySourceOptions[supportTicket]{
				ID:        func(x supportTicket) string { return x.ID },
				SortValue: func(x supportTicket, _ string) string { return x.UpdatedAt },
			})
			require.NoError(rt, err)
			mem.Put(data...)
			src = mem
		} else {
			sorted := make([]supportTicket, len(want))
			for i, id := range want {
				sorted[i] = byID[id]
			}
			src = staticSource{items: sorted}
		}
		k, err := NewKeyring(testKey)
		require.NoError(rt, err)
		p, err := NewPaginator(src, &PaginatorOptions{Keyring: k, Clock: newPageClock().Now})
		require.NoError(rt, err)

		got := []string{}
		req := PageRequest{Query: q}
		for range len(want) + 1 {
			env, err := p.Page(context.Background(), req)
			if err != nil {
				require.False(rt, resolving, "a resolving source pages every key: %v", err)
				require.ErrorIs(rt, err, ErrCursorTooLong)
				last := byID[want[len(got)+q.PageSize-1]]
				require.Greater(rt, positionLen(ticketPosition(last)), MaxCursorPosition, "refused only past the bound")
				return
			}
			got = append(got, ticketIDs(env.Items)...)
			if !env.Page.HasMore {
				break
			}
			req = PageRequest{Query: q, Cursor: env.Page.NextCursor}
		}
		require.Equal(rt, want, got, "every item exactly once, in order")
	})
}
