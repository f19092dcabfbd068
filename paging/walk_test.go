package paging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errTransient = errors.New("connection reset")

func ticketPosition(x supportTicket) Position { return Position{Sort: []string{x.UpdatedAt}, ID: x.ID} }

// walkFixture is a paginator over the fixed tickets with a fetch function
// that records every request and runs an optional hook after each served page.
type walkFixture struct {
	src      *MemorySource[supportTicket]
	clock    *pageClock
	p        *Paginator[supportTicket]
	q        Query
	requests []WalkRequest
	after    func(n int, env *PageEnvelope[supportTicket]) error // runs after the n-th served page
	served   []*PageEnvelope[supportTicket]
}

func newWalkFixture(t *testing.T, c Consistency) *walkFixture {
	f := &walkFixture{src: ticketSource(t, 1000), clock: newPageClock(), q: ticketQuery(10, c)}
	f.src.Put(fixedTickets()...)
	f.p = newTestPaginator(t, f.src, f.clock, &PaginatorOptions{CursorTTL: time.Minute, IdempotencyWindow: time.Minute})
	return f
}

func (f *walkFixture) fetch(ctx context.Context, req WalkRequest) (*PageEnvelope[supportTicket], error) {
	f.requests = append(f.requests, req)
	env, err := f.p.Page(ctx, PageRequest{Query: f.q, Cursor: req.Cursor, After: req.After, IdempotencyKey: req.IdempotencyKey})
	if err != nil {
		return nil, err
	}
	f.served = append(f.served, env)
	if f.after != nil {
		if err := f.after(len(f.served), env); err != nil {
			return nil, err
		}
	}
	return env, nil
}

func (f *walkFixture) walker(t *testing.T, o WalkOptions[supportTicket]) *Walker[supportTicket] {
	t.Helper()
	o.Position = ticketPosition
	o.Order = f.q.Sort
	o.Clock = f.clock.Now
	w, err := NewWalker(f.fetch, &o)
	require.NoError(t, err)
	return w
}

func collectWalk(w *Walker[supportTicket]) ([]string, error) {
	var got []string
	for x, err := range w.All(context.Background()) {
		if err != nil {
			return got, err
		}
		got = append(got, x.ID)
	}
	return got, nil
}

func TestWalkFollowsNextCursor(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	f.after = func(n int, _ *PageEnvelope[supportTicket]) error {
		f.src.Put(ticketAt(fmt.Sprintf("N-%d", n), 1000))
		f.src.Delete(fmt.Sprintf("T-%04d", n*9))
		return nil
	}
	w := f.walker(t, WalkOptions[supportTicket]{CheckDigest: true})
	got, err := collectWalk(w)
	require.NoError(t, err)
	assert.Equal(t, expectedOrder(f.q, fixedTickets()), got)
	assert.Len(t, w.Pages(), 10)
	assert.Empty(t, w.Recoveries())
	assert.Empty(t, f.requests[0].Cursor)
	for _, r := range f.requests[1:] {
		assert.NotEmpty(t, r.Cursor, "only the first request starts without a cursor")
	}
}

// expireAfterFirstPage moves the clock past the cursor TTL once, after the
// first page, as if the agent paused between pages.
func expireAfterFirstPage(f *walkFixture) {
	f.after = func(n int, _ *PageEnvelope[supportTicket]) error {
		if n == 1 {
			f.src.Put(ticketAt("NEW-TOP", 1000))
			f.clock.Advance(time.Minute)
		}
		return nil
	}
}

func TestWalkExpiredCursorWithoutRecoveryFails(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	expireAfterFirstPage(f)
	w := f.walker(t, WalkOptions[supportTicket]{})
	got, err := collectWalk(w)
	require.ErrorIs(t, err, ErrCursorExpired)
	assert.Len(t, got, 10, "the first page, then the error")
	assert.Len(t, f.requests, 2, "no silent restart from page 1")
	assert.Empty(t, w.Recoveries())
}

func TestWalkAuditRecovery(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	expireAfterFirstPage(f)
	var notified []CursorRecovery
	var got []string
	w := f.walker(t, WalkOptions[supportTicket]{Recovery: RecoverAudit, OnRecovery: func(r CursorRecovery) {
		notified = append(notified, r)
		got = nil // the consumer discards the abandoned snapshot's items
	}})
	for x, err := range w.All(context.Background()) {
		require.NoError(t, err)
		got = append(got, x.ID)
	}
	want := expectedOrder(f.q, append(fixedTickets(), ticketAt("NEW-TOP", 1000)))
	assert.Equal(t, want, got, "the whole new snapshot from the start")

	require.Len(t, w.Recoveries(), 1)
	rec := w.Recoveries()[0]
	assert.Equal(t, notified, w.Recoveries())
	assert.Equal(t, CursorRecoverySchema, rec.Schema)
	assert.Equal(t, CursorExpired, rec.Reason)
	assert.Equal(t, RecoverAudit, rec.Mode)
	assert.Nil(t, rec.Boundary)
	assert.Equal(t, 1, rec.PagesBefore)
	assert.Equal(t, 10, rec.ItemsBefore)
	assert.Equal(t, f.served[0].Page.SnapshotID, rec.AbandonedSnapshotID)
	sum := sha256.Sum256([]byte(f.served[0].Page.NextCursor))
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), rec.FromCursorDigest)
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	assert.NotContains(t, string(b), f.served[0].Page.NextCursor, "the cursor itself is never recorded")
	assert.NotEqual(t, f.served[0].Page.SnapshotID, f.served[len(f.served)-1].Page.SnapshotID, "a new snapshot")
	assert.Equal(t, WalkRequest{IdempotencyKey: f.requests[2].IdempotencyKey, Attempt: 1}, f.requests[2], "restart requested explicitly")
}

func TestWalkIncrementalRecovery(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	expireAfterFirstPage(f)
	w := f.walker(t, WalkOptions[supportTicket]{Recovery: RecoverIncremental})
	got, err := collectWalk(w)
	require.NoError(t, err)
	assert.Equal(t, expectedOrder(f.q, fixedTickets()), got, "continues after the last confirmed supportTicket: no repeat, no gap")
	require.Len(t, w.Recoveries(), 1)
	rec := w.Recoveries()[0]
	assert.Equal(t, RecoverIncremental, rec.Mode)
	last := f.served[0].Items[9]
	require.NotNil(t, rec.Boundary)
	assert.Equal(t, ticketPosition(last), *rec.Boundary)
	require.NotNil(t, f.requests[2].After)
	assert.Equal(t, ticketPosition(last), *f.requests[2].After)
	assert.Empty(t, f.requests[2].Cursor)
}

func TestWalkGivesUpAfterMaxRecoveries(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	f.after = func(int, *PageEnvelope[supportTicket]) error { f.clock.Advance(time.Minute); return nil }
	w := f.walker(t, WalkOptions[supportTicket]{Recovery: RecoverIncremental, MaxRecoveries: 2})
	_, err := collectWalk(w)
	require.ErrorIs(t, err, ErrCursorExpired)
	assert.Len(t, w.Recoveries(), 2)
}

func TestWalkOtherCursorErrorsAreNotRecovered(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	f.after = func(n int, _ *PageEnvelope[supportTicket]) error {
		f.q.PageSize = 11 // the caller changed its query mid-walk
		return nil
	}
	w := f.walker(t, WalkOptions[supportTicket]{Recovery: RecoverAudit})
	_, err := collectWalk(w)
	require.ErrorIs(t, err, ErrCursorQueryMismatch)
	assert.Empty(t, w.Recoveries())
	assert.Len(t, f.requests, 2)
}

// A response lost after the server served it: the walker retries with the
// same idempotency key and gets the very page the server stored, with the
// same fingerprint, although the data changed in between.
func TestWalkRetryReplaysSamePage(t *testing.T) {
	f := newWalkFixture(t, ConsistencyIncremental)
	lost := 0
	f.after = func(n int, env *PageEnvelope[supportTicket]) error {
		if n == 2 && lost == 0 {
			lost++
			f.src.Delete(env.Items[0].ID)
			return errTransient
		}
		return nil
	}
	w := f.walker(t, WalkOptions[supportTicket]{Retryable: func(err error) bool { return errors.Is(err, errTransient) }, CheckDigest: true})
	got, err := collectWalk(w)
	require.NoError(t, err)
	assert.Equal(t, expectedOrder(f.q, fixedTickets()), got)
	assert.Equal(t, f.requests[1].IdempotencyKey, f.requests[2].IdempotencyKey)
	assert.Equal(t, 2, f.requests[2].Attempt)
	assert.Equal(t, 2, w.Pages()[1].Attempts)
	assert.Equal(t, f.served[1].Fingerprint, f.served[2].Fingerprint, "the retry got the stored page")
	assert.Equal(t, f.served[1].Fingerprint, w.Pages()[1].Fingerprint)
	assert.NotEqual(t, f.requests[0].IdempotencyKey, f.requests[1].IdempotencyKey, "a new key per request")
}

func TestWalkRetriesAreBounded(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	f.after = func(int, *PageEnvelope[supportTicket]) error { return errTransient }
	w := f.walker(t, WalkOptions[supportTicket]{Retryable: func(error) bool { return true }, MaxRetries: 3})
	_, err := collectWalk(w)
	require.ErrorIs(t, err, errTransient)
	assert.Len(t, f.requests, 4)
}

// fetchScripted serves the given envelopes in turn.
func fetchScripted(pages ...*PageEnvelope[supportTicket]) FetchPage[supportTicket] {
	return func(context.Context, WalkRequest) (*PageEnvelope[supportTicket], error) {
		env := pages[0]
		pages = pages[1:]
		return env, nil
	}
}

// page builds a consistent envelope of items.
func scriptedPage(t *testing.T, snapshot, next string, items ...supportTicket) *PageEnvelope[supportTicket] {
	d, err := ContentDigest(items)
	require.NoError(t, err)
	env := &PageEnvelope[supportTicket]{
		Items:       items,
		Consistency: ConsistencySnapshot,
		Page:        PageInfo{NextCursor: next, HasMore: next != "", SnapshotID: snapshot},
		Fingerprint: PageFingerprint{SnapshotID: snapshot, Count: len(items), ContentDigest: d},
	}
	if len(items) > 0 {
		env.Fingerprint.FirstID, env.Fingerprint.LastID = items[0].ID, items[len(items)-1].ID
	}
	return env
}

func TestWalkRefusesInconsistentPages(t *testing.T) {
	a, b, c := ticketAt("C", 3), ticketAt("B", 2), ticketAt("A", 1)
	cases := map[string][]*PageEnvelope[supportTicket]{
		"count differs": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "", a, b)
			e.Fingerprint.Count = 3
			return e
		}()},
		"last id differs": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "", a, b)
			e.Fingerprint.LastID = "Z"
			return e
		}()},
		"fingerprint of another snapshot": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "", a)
			e.Fingerprint.SnapshotID = "s0"
			return e
		}()},
		"content digest differs": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "", a)
			e.Items = []supportTicket{{ID: a.ID, UpdatedAt: a.UpdatedAt, Title: "edited"}}
			return e
		}()},
		"snapshot changes mid-walk":   {scriptedPage(t, "s1", "c1", a), scriptedPage(t, "s2", "", b)},
		"replayed previous page":      {scriptedPage(t, "s1", "c1", a, b), scriptedPage(t, "s1", "", a, b)},
		"repeated boundary item":      {scriptedPage(t, "s1", "c1", a, b), scriptedPage(t, "s1", "", b, c)},
		"out of order":                {scriptedPage(t, "s1", "", b, a)},
		"empty page that claims more": {scriptedPage(t, "s1", "c1")},
		"has_more without cursor": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "", a)
			e.Page.HasMore = true
			return e
		}()},
		"cursor repeated (cycle)": {scriptedPage(t, "s1", "c1", a), scriptedPage(t, "s1", "c1", b)},
		"nil page without error":  {nil},
		"cursor without has_more flag": {func() *PageEnvelope[supportTicket] {
			e := scriptedPage(t, "s1", "c1", a)
			e.Page.HasMore = false
			return e
		}()},
	}
	for name, pages := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := NewWalker(fetchScripted(pages...), &WalkOptions[supportTicket]{
				Position: ticketPosition, Order: testQuery().Sort, CheckDigest: true,
			})
			require.NoError(t, err)
			var gotErr error
			for _, err := range w.All(context.Background()) {
				gotErr = err
			}
			require.ErrorIs(t, gotErr, ErrPageInconsistent)
		})
	}
}

func TestWalkStopsWhenConsumerStops(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	w := f.walker(t, WalkOptions[supportTicket]{})
	n := 0
	for _, err := range w.All(context.Background()) {
		require.NoError(t, err)
		if n++; n == 12 {
			break
		}
	}
	assert.Len(t, f.requests, 2)
}

func TestWalkCancelledContext(t *testing.T) {
	f := newWalkFixture(t, ConsistencySnapshot)
	ctx, cancel := context.WithCancel(context.Background())
	f.after = func(int, *PageEnvelope[supportTicket]) error { cancel(); return nil }
	w := f.walker(t, WalkOptions[supportTicket]{Retryable: func(error) bool { return true }})
	var gotErr error
	for _, err := range w.All(ctx) {
		gotErr = err
	}
	require.ErrorIs(t, gotErr, context.Canceled)
}

func TestWalkOptions(t *testing.T) {
	fetch := fetchScripted()
	cases := map[string]*WalkOptions[supportTicket]{
		"nil":              nil,
		"no position":      {},
		"unknown recovery": {Position: ticketPosition, Recovery: "restart"},
		"negative retries": {Position: ticketPosition, MaxRetries: -1},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewWalker(fetch, o)
			require.Error(t, err)
		})
	}
	_, err := NewWalker[supportTicket](nil, &WalkOptions[supportTicket]{Position: ticketPosition})
	require.Error(t, err)
}

func TestCursorRecoveryGolden(t *testing.T) {
	rec := CursorRecovery{
		Schema:              CursorRecoverySchema,
		Reason:              CursorExpired,
		Detail:              "expired at 2026-08-25T04:10:00Z",
		Mode:                RecoverIncremental,
		FromCursorDigest:    "sha256:" + hex.EncodeToString(slices.Repeat([]byte{0xab}, 32)),
		Boundary:            &Position{Sort: []string{"2026-08-25T04:00:12Z"}, ID: "T-1042"},
		AbandonedSnapshotID: "snap-7f2c",
		PagesBefore:         3,
		ItemsBefore:         60,
		At:                  testT0,
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	require.NoError(t, err)
	cursorGolden(t, "cursor_recovery.golden.json", append(b, '\n'))
}

func TestWalkStartsAfterStoredPosition(t *testing.T) {
	f := newWalkFixture(t, ConsistencyIncremental)
	want := expectedOrder(f.q, fixedTickets())
	i := slices.IndexFunc(fixedTickets(), func(x supportTicket) bool { return x.ID == want[41] })
	start := ticketPosition(fixedTickets()[i])
	w := f.walker(t, WalkOptions[supportTicket]{Start: &start})
	got, err := collectWalk(w)
	require.NoError(t, err)
	assert.Equal(t, want[42:], got)
	require.NotNil(t, f.requests[0].After)
	assert.Equal(t, start, *f.requests[0].After)
}

// An audit recovery restarts after Start, where the caller chose to begin,
// on a new snapshot: not from the very first item.
func TestWalkAuditRecoveryRestartsAfterStart(t *testing.T) {
	for _, c := range []Consistency{ConsistencySnapshot, ConsistencyIncremental} {
		t.Run(string(c), func(t *testing.T) {
			f := newWalkFixture(t, c)
			expireAfterFirstPage(f) // also puts NEW-TOP, which sorts before Start
			want := expectedOrder(f.q, fixedTickets())
			start := ticketPosition(fixedTickets()[slices.Index(ticketIDs(fixedTickets()), want[41])])
			var got []string
			w := f.walker(t, WalkOptions[supportTicket]{Start: &start, Recovery: RecoverAudit, OnRecovery: func(CursorRecovery) {
				got = nil // the consumer discards the abandoned snapshot's items
			}})
			for x, err := range w.All(context.Background()) {
				require.NoError(t, err)
				got = append(got, x.ID)
			}
			assert.Equal(t, want[42:], got, "the new snapshot from after Start")
			require.Len(t, w.Recoveries(), 1)
			rec := w.Recoveries()[0]
			assert.Equal(t, RecoverAudit, rec.Mode)
			require.NotNil(t, rec.Boundary, "the record says where the audit restarted")
			assert.Equal(t, start, *rec.Boundary)
			require.NotNil(t, f.requests[2].After)
			assert.Equal(t, start, *f.requests[2].After)
			assert.Empty(t, f.requests[2].Cursor)
		})
	}
}
