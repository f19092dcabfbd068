package paging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"time"
)

// RecoveryMode is what a Walker does when the server says its cursor expired.
// The choice belongs to the caller: the walker never restarts on its own.
type RecoveryMode string

const (
	// RecoverNone (the zero value) ends the walk with the CURSOR_EXPIRED error.
	RecoverNone RecoveryMode = ""
	// RecoverAudit starts a new snapshot where the walk began: after
	// WalkOptions.Start when it is set, else at the first item. Items of the
	// abandoned snapshot were already yielded; OnRecovery tells the consumer
	// to discard them before the first item of the new snapshot arrives.
	RecoverAudit RecoveryMode = "audit"
	// RecoverIncremental continues from the last confirmed position (sort
	// values and id of the last item of the last accepted page) in a new
	// walk; nothing already yielded is read again.
	RecoverIncremental RecoveryMode = "incremental"
)

// CursorRecoverySchema is the Schema of CursorRecovery records.
const CursorRecoverySchema = "cursorRecovery.v1"

// CursorRecovery records one recovery from an expired cursor.
type CursorRecovery struct {
	Schema string          `json:"schema"`
	Reason CursorErrorCode `json:"reason"`
	Detail string          `json:"detail,omitempty"`
	Mode   RecoveryMode    `json:"mode"`
	// FromCursorDigest is "sha256:" and the hex SHA-256 of the cursor that
	// failed; the cursor itself is a bearer token and is never recorded.
	FromCursorDigest string `json:"from_cursor_digest"`
	// Boundary is the position the new walk starts after: the last
	// confirmed position for an incremental recovery, WalkOptions.Start for
	// an audit recovery (nil when the audit restarts at the first item).
	Boundary *Position `json:"boundary,omitempty"`
	// AbandonedSnapshotID is the snapshot the failed cursor read.
	AbandonedSnapshotID string `json:"abandoned_snapshot_id,omitempty"`
	// PagesBefore and ItemsBefore count what the walk accepted before.
	PagesBefore int       `json:"pages_before"`
	ItemsBefore int       `json:"items_before"`
	At          time.Time `json:"at"`
}

// WalkRequest is one request of a walk, handed to the caller's fetch function.
type WalkRequest struct {
	// Cursor continues the walk; empty together with After nil starts it.
	Cursor string
	// After starts a new walk after a position: WalkOptions.Start, or where a
	// recovery restarts.
	After *Position
	// IdempotencyKey is the same for every attempt of one request, so that a
	// retry after a lost response returns the page the server already served.
	IdempotencyKey string
	// Attempt counts the tries of this request, from 1.
	Attempt int
}

// FetchPage sends one page request, for example a tools/call of a paged
// tool. Cursor failures are returned as *CursorError.
type FetchPage[T any] func(ctx context.Context, req WalkRequest) (*PageEnvelope[T], error)

// WalkOptions configures a Walker. Zero fields take the defaults.
type WalkOptions[T any] struct {
	// Position returns an item's place in the walk's order. Required: it is
	// how the walker checks fingerprints and knows its last confirmed
	// boundary.
	Position func(T) Position
	// Start, when set, begins the walk after this position instead of at
	// the first item: an incremental sync resuming from the last position it
	// stored. An audit recovery restarts after Start too, since items before
	// it are outside the walk the caller asked for.
	Start *Position
	// Order, when set, is the walk's sort order; every item must then come
	// strictly after the one before it, across pages too. A server that
	// repeats or reorders items is reported as ErrPageInconsistent.
	Order []SortField
	// CheckDigest recomputes each page's content digest from its items
	// (ContentDigest) and refuses a mismatch. Use it when T re-encodes to the
	// JSON the server digested, for example map[string]any or a struct with
	// the same fields.
	CheckDigest bool
	// Recovery applies to CURSOR_EXPIRED. Other cursor errors end the walk.
	Recovery RecoveryMode
	// MaxRecoveries bounds recoveries in one walk. Default 3.
	MaxRecoveries int
	// Retryable reports whether a fetch error is worth retrying with the same
	// idempotency key. Nil retries nothing. Cursor errors, ErrPageInconsistent
	// and context errors are never retried.
	Retryable func(error) bool
	// MaxRetries bounds the retries of one request. Default 2.
	MaxRetries int
	// MaxPages bounds the pages of one walk. Default 100000.
	MaxPages int
	// NewIdempotencyKey returns a fresh key per request. Default: 128 random bits.
	NewIdempotencyKey func() string
	// OnRecovery is called with each recovery before the walk continues.
	OnRecovery func(CursorRecovery)
	// Clock stamps recoveries. Default time.Now.
	Clock func() time.Time
}

// WalkedPage records one accepted page. A page that needed retries is
// checked like every page (its fingerprint must describe its items and
// continue the walk's snapshot and order); since a retry carries the same
// idempotency key, a server that stored the lost response replays it, and
// Fingerprint is then the fingerprint of that first response.
type WalkedPage struct {
	Fingerprint PageFingerprint
	// Attempts is 1 unless the request was retried.
	Attempts int
	// IdempotencyKey is the key every attempt of the request carried.
	IdempotencyKey string
}

// Walker follows next_cursor through the pages of a paged tool. It is not
// safe for concurrent use; each call of All starts a new walk and resets
// Pages and Recoveries.
type Walker[T any] struct {
	fetch FetchPage[T]
	opts  WalkOptions[T]

	pages      []WalkedPage
	recoveries []CursorRecovery
}

// NewWalker returns a walker that fetches pages with fetch.
func NewWalker[T any](fetch FetchPage[T], opts *WalkOptions[T]) (*Walker[T], error) {
	if fetch == nil {
		return nil, errors.New("mcpsync: walker without fetch function")
	}
	if opts == nil || opts.Position == nil {
		return nil, errors.New("mcpsync: walker needs a Position function")
	}
	o := *opts
	switch o.Recovery {
	case RecoverNone, RecoverAudit, RecoverIncremental:
	default:
		return nil, fmt.Errorf("mcpsync: unknown recovery %q", o.Recovery)
	}
	if o.MaxRecoveries < 0 || o.MaxRetries < 0 || o.MaxPages < 0 {
		return nil, errors.New("mcpsync: walker limits must not be negative")
	}
	if o.MaxRecoveries == 0 {
		o.MaxRecoveries = 3
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 2
	}
	if o.MaxPages == 0 {
		o.MaxPages = 100000
	}
	if o.NewIdempotencyKey == nil {
		o.NewIdempotencyKey = randomHex128
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Walker[T]{fetch: fetch, opts: o}, nil
}

// Pages returns the pages accepted by the last walk.
func (w *Walker[T]) Pages() []WalkedPage { return w.pages }

// Recoveries returns the recoveries of the last walk.
func (w *Walker[T]) Recoveries() []CursorRecovery { return w.recoveries }

// All walks every page and yields its items in order. On an error it yields
// the error once and stops. Cancelling ctx stops the walk with ctx's error.
func (w *Walker[T]) All(ctx context.Context) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		w.pages, w.recoveries = nil, nil
		var zero T
		if err := w.walk(ctx, yield); err != nil {
			yield(zero, err)
		}
	}
}

func (w *Walker[T]) walk(ctx context.Context, yield func(T, error) bool) error {
	var (
		req       = WalkRequest{After: w.opts.Start} // the next request
		confirmed = w.opts.Start                     // last item of the last accepted page
		snapshot  string                             // snapshot of the walk, set by its first page
		items     int
		seen      = map[string]bool{} // cursors of this walk, to refuse cycles
	)
	for range w.opts.MaxPages {
		req.IdempotencyKey = w.opts.NewIdempotencyKey()
		env, attempts, err := w.fetchWithRetry(ctx, req)
		var ce *CursorError
		if errors.As(err, &ce) && ce.Code == CursorExpired && req.Cursor != "" && w.opts.Recovery != RecoverNone {
			if len(w.recoveries) >= w.opts.MaxRecoveries {
				return fmt.Errorf("mcpsync: %d cursor recoveries, giving up: %w", len(w.recoveries), err)
			}
			digest := sha256.Sum256([]byte(req.Cursor))
			rec := CursorRecovery{
				Schema:              CursorRecoverySchema,
				Reason:              ce.Code,
				Detail:              ce.Detail,
				Mode:                w.opts.Recovery,
				FromCursorDigest:    "sha256:" + hex.EncodeToString(digest[:]),
				AbandonedSnapshotID: snapshot,
				PagesBefore:         len(w.pages),
				ItemsBefore:         items,
				At:                  w.opts.Clock(),
			}
			if w.opts.Recovery == RecoverAudit {
				confirmed = w.opts.Start
			}
			rec.Boundary = confirmed
			req = WalkRequest{After: confirmed}
			snapshot = ""
			w.recoveries = append(w.recoveries, rec)
			if w.opts.OnRecovery != nil {
				w.opts.OnRecovery(rec)
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := w.check(env, snapshot, confirmed); err != nil {
			return err
		}
		if snapshot == "" || env.Consistency == ConsistencyIncremental {
			snapshot = env.Page.SnapshotID
		}
		w.pages = append(w.pages, WalkedPage{Fingerprint: env.Fingerprint, Attempts: attempts, IdempotencyKey: req.IdempotencyKey})
		for _, it := range env.Items {
			if !yield(it, nil) {
				return nil
			}
		}
		items += len(env.Items)
		if len(env.Items) > 0 {
			last := w.opts.Position(env.Items[len(env.Items)-1])
			confirmed = &last
		}
		if !env.Page.HasMore {
			return nil
		}
		if seen[env.Page.NextCursor] {
			return fmt.Errorf("%w: cursor repeated", ErrPageInconsistent)
		}
		seen[env.Page.NextCursor] = true
		req = WalkRequest{Cursor: env.Page.NextCursor}
	}
	return fmt.Errorf("%w: more than %d pages", ErrPageInconsistent, w.opts.MaxPages)
}

func (w *Walker[T]) fetchWithRetry(ctx context.Context, req WalkRequest) (*PageEnvelope[T], int, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, attempt, err
		}
		req.Attempt = attempt
		env, err := w.fetch(ctx, req)
		if err == nil {
			if env == nil {
				return nil, attempt, fmt.Errorf("%w: no page and no error", ErrPageInconsistent)
			}
			return env, attempt, nil
		}
		var ce *CursorError
		if attempt > w.opts.MaxRetries || w.opts.Retryable == nil || errors.As(err, &ce) ||
			errors.Is(err, ErrPageInconsistent) || ctx.Err() != nil || !w.opts.Retryable(err) {
			return nil, attempt, err
		}
	}
}

// check refuses a page that contradicts its fingerprint or the walk: a
// retried request may be answered from a server's replay cache, and a
// mismatch there means the server's page boundary moved.
func (w *Walker[T]) check(env *PageEnvelope[T], snapshot string, confirmed *Position) error {
	fp := env.Fingerprint
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrPageInconsistent}, args...)...)
	}
	if fp.Count != len(env.Items) {
		return bad("fingerprint counts %d items, page has %d", fp.Count, len(env.Items))
	}
	if fp.SnapshotID != env.Page.SnapshotID {
		return bad("fingerprint snapshot %q, page snapshot %q", fp.SnapshotID, env.Page.SnapshotID)
	}
	if len(env.Items) > 0 {
		first, last := w.opts.Position(env.Items[0]).ID, w.opts.Position(env.Items[len(env.Items)-1]).ID
		if fp.FirstID != first || fp.LastID != last {
			return bad("fingerprint ids %q..%q, page ids %q..%q", fp.FirstID, fp.LastID, first, last)
		}
	}
	if w.opts.CheckDigest {
		d, err := ContentDigest(env.Items)
		if err != nil {
			return err
		}
		if d != fp.ContentDigest {
			return bad("content digest %s, items digest to %s", fp.ContentDigest, d)
		}
	}
	if env.Page.HasMore != (env.Page.NextCursor != "") {
		return bad("has_more %t with next_cursor %q", env.Page.HasMore, env.Page.NextCursor)
	}
	if env.Page.HasMore && len(env.Items) == 0 {
		return bad("empty page claims more")
	}
	if snapshot != "" && env.Consistency == ConsistencySnapshot && env.Page.SnapshotID != snapshot {
		return bad("snapshot changed from %q to %q", snapshot, env.Page.SnapshotID)
	}
	if w.opts.Order != nil {
		prev := confirmed
		for _, it := range env.Items {
			p := w.opts.Position(it)
			if prev != nil && ComparePositions(w.opts.Order, p, *prev) <= 0 {
				return bad("item %q not after %q", p.ID, prev.ID)
			}
			prev = &p
		}
	}
	return nil
}
