package mcpsync

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mcpsync/mcpsync/ledger"
)

// The snapshot extension of resources/list, opt-in for servers that can bind
// every page of a scan to one snapshot. A server declares it under
// capabilities.experimental (or extensions) with this key, and carries the
// snapshot id in the _meta of each list result.
const (
	SnapshotCapability = "io.github.mcpsync/listSnapshot"
	SnapshotIDMetaKey  = "io.github.mcpsync/snapshotId"
)

// ListKind is one of the four paginated listings of MCP. The scanner treats
// them alike; they differ only in what identifies an item.
type ListKind string

// Listing kinds.
const (
	KindResources         ListKind = "resources"
	KindResourceTemplates ListKind = "resourceTemplates"
	KindTools             ListKind = "tools"
	KindPrompts           ListKind = "prompts"
)

// Method returns the JSON-RPC method that lists the kind, or "" for an
// unknown kind.
func (k ListKind) Method() string {
	switch k {
	case KindResources:
		return "resources/list"
	case KindResourceTemplates:
		return "resources/templates/list"
	case KindTools:
		return "tools/list"
	case KindPrompts:
		return "prompts/list"
	}
	return ""
}

// Descriptor is one listed item. A single struct serves the four kinds, so
// that one scanner, one digest and one catalog cover them all; the fields a
// kind does not have stay empty:
//
//   - resources: URI, Name, MIMEType
//   - resource templates: URITemplate, Name, MIMEType
//   - tools and prompts: Name
//
// Titles, descriptions, annotations and _meta are left out on purpose: they
// do not identify an item, and their churn must not look like a changed set.
type Descriptor struct {
	// Kind is set by the scanner to the kind of the listing.
	Kind        ListKind `json:"kind"`
	URI         string   `json:"uri,omitempty"`
	URITemplate string   `json:"uriTemplate,omitempty"`
	Name        string   `json:"name,omitempty"`
	MIMEType    string   `json:"mimeType,omitempty"`
}

// Key returns what identifies the item within its listing: the normalized URI
// of a resource (the raw URI if it cannot be normalized), so that two
// spellings of one resource count as the same item and match the engine's
// keys; the URI template of a template, unchanged, because RFC 6570
// expressions are not URIs; the name of a tool or a prompt.
func (d Descriptor) Key() string {
	switch d.Kind {
	case KindResources:
		if key, err := normalizeKey(d.URI); err == nil {
			return key
		}
		return d.URI
	case KindResourceTemplates:
		return d.URITemplate
	}
	return d.Name
}

// listPage is one page of a list result as the wire gave it.
//
// mcp-go v1.2.1 decodes nextCursor into a string with omitempty
// (mcp.PaginatedResult), which cannot tell an absent nextCursor from "". From
// protocol 2026-07-28 on the difference matters, so the session layer builds
// pages from the raw result.
type listPage struct {
	Items []Descriptor
	// NextCursor is the result's nextCursor, nil when the result had none.
	NextCursor *string
	// SnapshotID is _meta[SnapshotIDMetaKey], "" if absent.
	SnapshotID string
}

// pageFunc fetches the page after cursor (nil: the first page). It must
// return the server's cursor untouched, and the JSON-RPC error of the server
// as an *RPCError (possibly wrapped), so that an invalid cursor can be told
// from other failures.
type pageFunc func(ctx context.Context, cursor *string) (listPage, error)

// ScannerOptions configure discovery scans (ClientOptions.Scanner). The zero
// value (or nil) means defaults.
type ScannerOptions struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand is the source of backoff jitter; nil means the global source of
	// math/rand/v2.
	Rand rand.Source
	// MaxAttempts is how many times a scan may start over (each attempt is
	// one pass with snapshot proof, otherwise two); 0 means 5.
	MaxAttempts int
	// BackoffBase is the wait before the second attempt; later waits double
	// up to BackoffMax. Each wait is jittered between half and all of its
	// value. 0 means 200ms.
	BackoffBase time.Duration
	// BackoffMax caps the wait between attempts; 0 means 10s.
	BackoffMax time.Duration
	// StaleAfter is how long after its measurement a catalog counts as
	// stale; 0 means 5 minutes.
	StaleAfter time.Duration
	// ReviewAfter is how long after its measurement a catalog should be
	// scanned again; 0 means half of StaleAfter. It may not exceed StaleAfter.
	ReviewAfter time.Duration
}

// scanner lists the items of one kind completely, or says it could not. A
// scanner is safe for concurrent use.
type scanner struct {
	opts     ScannerOptions
	maxPages int // the most pages one pass may fetch (Limits.MaxScanPages)

	randMu sync.Mutex // protects rnd
	rnd    *rand.Rand // nil: the global source, which is safe on its own
}

// newScanner returns a scanner with opts applied whose passes fetch at most
// maxPages pages (0: DefaultMaxScanPages). It rejects negative values and a
// ReviewAfter beyond StaleAfter or a BackoffMax below BackoffBase.
func newScanner(opts *ScannerOptions, maxPages int) (*scanner, error) {
	var o ScannerOptions
	if opts != nil {
		o = *opts
	}
	if maxPages < 0 || o.MaxAttempts < 0 || o.BackoffBase < 0 || o.BackoffMax < 0 || o.StaleAfter < 0 || o.ReviewAfter < 0 {
		return nil, errors.New("mcpsync: negative scanner option")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if maxPages == 0 {
		maxPages = DefaultMaxScanPages
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = 200 * time.Millisecond
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = max(10*time.Second, o.BackoffBase)
	}
	if o.BackoffMax < o.BackoffBase {
		return nil, fmt.Errorf("mcpsync: BackoffMax %v below BackoffBase %v", o.BackoffMax, o.BackoffBase)
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = 5 * time.Minute
	}
	if o.ReviewAfter == 0 {
		o.ReviewAfter = o.StaleAfter / 2
	}
	if o.ReviewAfter > o.StaleAfter {
		return nil, fmt.Errorf("mcpsync: ReviewAfter %v beyond StaleAfter %v: the catalog would be stale before its review", o.ReviewAfter, o.StaleAfter)
	}
	s := &scanner{opts: o, maxPages: maxPages}
	if o.Rand != nil {
		s.rnd = rand.New(o.Rand)
	}
	return s, nil
}

// FaultKind names what went wrong in a pass.
type FaultKind string

// Pass faults.
const (
	// FaultCursorCycle: a cursor came back twice in the pass. The pass ends.
	FaultCursorCycle FaultKind = "CURSOR_CYCLE"
	// FaultPageCap: the pass needed more than Limits.MaxScanPages pages.
	// The pass ends.
	FaultPageCap FaultKind = "PAGE_CAP"
	// FaultInvalidCursor: the server refused one of its own cursors with
	// -32602. The pass ends and the scan starts over.
	FaultInvalidCursor FaultKind = "INVALID_CURSOR"
	// FaultRepeatedItem: an item was listed twice in the pass, spelled the
	// same way. It is a fact about the server, not a change of the listing:
	// the pass stays clean, but it proves no snapshot.
	FaultRepeatedItem FaultKind = "REPEATED_ITEM"
	// FaultAliasedItem: two spellings of one key were listed in the pass
	// ("%41bc" beside "Abc"). Like a repeat, it withholds only the proof.
	FaultAliasedItem FaultKind = "ALIASED_ITEM"
	// FaultPageError: fetching a page failed otherwise. The scan ends.
	FaultPageError FaultKind = "PAGE_ERROR"

	// Snapshot faults (ScanReceipt.SnapshotFaults): a page whose snapshot
	// id proves nothing. They withhold the proof only; the pass stays
	// clean. The first two are forged ids, the last a broken proof.

	// FaultSnapshotNotNegotiated: the page carried an id but the server did
	// not declare SnapshotCapability.
	FaultSnapshotNotNegotiated FaultKind = "SNAPSHOT_NOT_NEGOTIATED"
	// FaultSnapshotIDDiffers: the page's id differs from the first page's.
	FaultSnapshotIDDiffers FaultKind = "SNAPSHOT_ID_DIFFERS"
	// FaultSnapshotIDMissing: the extension was negotiated but the page had
	// no id.
	FaultSnapshotIDMissing FaultKind = "SNAPSHOT_ID_MISSING"
)

// passError is a pass that could not reach the end of the listing: the
// error form of the ScanFault its receipt records.
type passError struct {
	Fault FaultKind
	// Page is the 0-based index of the page the pass could not fetch.
	Page int
	// CursorDigest is the digest of the cursor involved, never the cursor.
	CursorDigest string
	// Err is the page function's error (FaultInvalidCursor, FaultPageError).
	Err error
}

func (e *passError) Error() string { return errPrefix + e.text() }

func (e *passError) text() string {
	msg := fmt.Sprintf("list pass: %s at page %d", e.Fault, e.Page)
	if e.Err != nil {
		msg += ": " + causeText(e.Err)
	}
	return msg
}

func (e *passError) Unwrap() error { return e.Err }

// Is matches ErrCursorCycle and ErrPageCap for those faults.
func (e *passError) Is(target error) bool {
	return target == ErrCursorCycle && e.Fault == FaultCursorCycle ||
		target == ErrPageCap && e.Fault == FaultPageCap
}

// ScanError is a scan that ended without a catalog that may be used: the
// attempts ran out, a pass failed in a way a retry cannot mend, or the
// context ended.
type ScanError struct {
	Kind     ListKind
	Attempts int
	// Err is why the last attempt failed: a fault of a pass, which matches
	// ErrCursorCycle or ErrPageCap or wraps the page's error (an *RPCError,
	// say), and which the pass's ScanReceipt.Faults records; ErrListUnstable;
	// ErrScanTimeout; or the context's error.
	Err error
}

func (e *ScanError) Error() string { return errPrefix + e.text() }

func (e *ScanError) text() string {
	return fmt.Sprintf("%s scan unreconciled after %d attempts: %s", e.Kind, e.Attempts, causeText(e.Err))
}

func (e *ScanError) Unwrap() error { return e.Err }

// Is makes every ScanError match ErrScanUnreconciled.
func (e *ScanError) Is(target error) bool { return target == ErrScanUnreconciled }

// PassOutcome is how one pass ended.
type PassOutcome string

// Pass outcomes.
const (
	// PassClean: the pass reached the end with no fault and no
	// list_changed. Snapshot faults do not make a pass unclean.
	PassClean PassOutcome = "CLEAN"
	// PassUnclean: the pass reached the end but its set cannot be trusted.
	PassUnclean PassOutcome = "UNCLEAN"
	// PassAborted: a cursor fault or the page cap ended the pass.
	PassAborted PassOutcome = "ABORTED"
	// PassFailed: a page could not be fetched, or the context ended.
	PassFailed PassOutcome = "FAILED"
)

// ScanFault is one fault of a pass.
type ScanFault struct {
	Fault FaultKind `json:"fault"`
	Page  int       `json:"page"`
	// CursorDigest is the digest of the cursor that cycled or was refused.
	CursorDigest string `json:"cursorDigest,omitempty"`
	// Key is the repeated or aliased item's key.
	Key string `json:"key,omitempty"`
	// Spellings are the first listing of the key and the repeat, as the
	// server spelled them.
	Spellings []string `json:"spellings,omitempty"`
	// Error is what the page function's error says, for the record only.
	Error string `json:"error,omitempty"`
	// SnapshotID is the page's forged or differing snapshot id.
	SnapshotID string `json:"snapshotId,omitempty"`
}

// PageReceipt records one page of a pass.
type PageReceipt struct {
	Index int `json:"index"`
	// CursorDigest is the digest of the cursor sent for this page; it is
	// absent for the first page, which is fetched without a cursor (an empty
	// cursor, valid from protocol 2026-07-28 on, has the digest of "").
	CursorDigest string `json:"cursorDigest,omitempty"`
	ItemCount    int    `json:"itemCount"`
	SnapshotID   string `json:"snapshotId,omitempty"`
}

// ScanReceipt (resourceDiscoveryScan.v1) is the record of one pass over a
// listing. Cursors are kept only as digests: they are opaque and bound to
// their session, so nothing persisted may carry one.
type ScanReceipt struct {
	Schema string `json:"schema"`
	// ID names the pass (a random UUID), for the deletion evidence that
	// rests on it.
	ID                string   `json:"id"`
	Kind              ListKind `json:"kind"`
	Era               Era      `json:"era"`
	SessionGeneration uint64   `json:"sessionGeneration"`
	// Attempt counts from 1; Pass is "A" or "B" within the attempt.
	Attempt int    `json:"attempt"`
	Pass    string `json:"pass"`
	// Backoff is the wait before this pass (only the first pass of an
	// attempt after the first waits).
	Backoff   time.Duration `json:"backoffNanos,omitempty"`
	StartedAt time.Time     `json:"startedAt"`
	EndedAt   time.Time     `json:"endedAt"`
	Pages     []PageReceipt `json:"pages"`
	// ItemCount is the number of items listed, repeats included.
	ItemCount int `json:"itemCount"`
	// SetDigest is the digest of the set of descriptors listed (see
	// Catalog.SetDigest); empty when the pass did not reach the end.
	SetDigest string `json:"setDigest,omitempty"`
	// ListChangedSeen is how many list_changed notifications of the kind
	// arrived between the start and the end of the pass.
	ListChangedSeen    uint64 `json:"listChangedSeen"`
	SnapshotNegotiated bool   `json:"snapshotNegotiated"`
	// SnapshotID is the one id every page carried, set only when the pass
	// proves a snapshot.
	SnapshotID     string      `json:"snapshotId,omitempty"`
	SnapshotFaults []ScanFault `json:"snapshotFaults,omitempty"`
	Faults         []ScanFault `json:"faults,omitempty"`
	Outcome        PassOutcome `json:"outcome"`
}

// proven reports whether the pass alone proves a snapshot.
func (r *ScanReceipt) proven() bool { return r.Outcome == PassClean && r.SnapshotID != "" }

// CatalogStatus says how far a catalog may be trusted.
type CatalogStatus string

// Catalog statuses.
const (
	// CatalogSnapshotProven: one clean pass in which every page carried the
	// same snapshot id of the negotiated extension. Complete as of
	// MeasuredAt.
	CatalogSnapshotProven CatalogStatus = "SNAPSHOT_PROVEN"
	// CatalogSnapshotUnproven: two consecutive identical clean passes with
	// no list_changed. Standard MCP cannot prove more: pages share no
	// snapshot and list_changed is only a SHOULD, so the catalog is the best
	// available view, never an authority for completeness.
	CatalogSnapshotUnproven CatalogStatus = "SNAPSHOT_UNPROVEN"
	// CatalogUnreconciled: no attempt produced a trustworthy set. The
	// catalog lists nothing; its receipts say what was seen.
	CatalogUnreconciled CatalogStatus = "UNRECONCILED"
)

// Catalog (resourceCatalog.v1) is the outcome of a scan: the listed items,
// how far they may be trusted, and the receipts of every pass.
type Catalog struct {
	Schema            string        `json:"schema"`
	Kind              ListKind      `json:"kind"`
	Status            CatalogStatus `json:"status"`
	SessionGeneration uint64        `json:"sessionGeneration"`
	// Engine is the ID of the engine whose session was listed (the
	// receipt's); empty for a receipt no engine issued.
	Engine     string `json:"engine,omitempty"`
	SnapshotID string `json:"snapshotId,omitempty"`
	// Descriptors are sorted by Key, one per key; nil when UNRECONCILED.
	Descriptors []Descriptor `json:"items"`
	// SetDigest is "sha256:" and the lower-case hex SHA-256 of this
	// canonical form, integers unsigned 64-bit big-endian:
	//
	//	"mcpsync.descriptors.v1" 0x00  len(kind) kind  count
	//	then for each distinct descriptor, sorted by key and then by fields:
	//	  len(key) key  len(uri) uri  len(uriTemplate) uriTemplate
	//	  len(name) name  len(mimeType) mimeType
	SetDigest string        `json:"setDigest,omitempty"`
	Scans     []ScanReceipt `json:"scans"`
	// MeasuredAt is when the set was last known to hold: the end of pass B
	// for an unproven catalog; for a proven one the start of its pass, since
	// the snapshot answered the first page (the extension does not say how
	// much older the snapshot is).
	MeasuredAt time.Time `json:"measuredAt"`
	// StaleAfter is MeasuredAt plus ScannerOptions.StaleAfter; for an
	// unreconciled catalog it equals MeasuredAt.
	StaleAfter time.Time `json:"staleAfter"`
	// NextReviewAt is when the listing should be scanned again.
	NextReviewAt time.Time `json:"nextReviewAt"`
}

// Items yields the listed items in key order (none when UNRECONCILED).
func (c Catalog) Items() iter.Seq[Descriptor] { return slices.Values(c.Descriptors) }

// lists reports whether the catalog lists key.
func (c Catalog) lists(key string) bool {
	_, ok := slices.BinarySearchFunc(c.Descriptors, key, func(d Descriptor, k string) int {
		return cmp.Compare(d.Key(), k)
	})
	return ok
}

// CatalogRefusalReason says why a catalog cannot serve a completeness task.
type CatalogRefusalReason string

// Reasons of catalog refusals.
const (
	// CatalogReasonNotProven: the catalog's status is not SNAPSHOT_PROVEN.
	CatalogReasonNotProven CatalogRefusalReason = "NOT_PROVEN"
	// CatalogReasonOtherSession: the catalog was measured in another
	// session generation; what a session listed proves nothing about the
	// next one.
	CatalogReasonOtherSession CatalogRefusalReason = "OTHER_SESSION"
	// CatalogReasonStale: the catalog is past its StaleAfter.
	CatalogReasonStale CatalogRefusalReason = "STALE"
	// CatalogReasonOtherEngine: the catalog lists a session of another
	// engine. Session generations are unique within one ledger's lineage
	// only; an engine on another ledger, or on a restored copy of this one,
	// may have had the same generation with another server.
	CatalogReasonOtherEngine CatalogRefusalReason = "OTHER_ENGINE"
)

// CatalogError is a catalog refused for a task that needs a complete
// enumeration. It matches ErrSnapshotUnproven whatever its reason: the
// completeness of the listing, now, in this session, is not proven.
type CatalogError struct {
	Kind              ListKind
	Status            CatalogStatus
	Reason            CatalogRefusalReason
	SessionGeneration uint64 // the catalog's
	CurrentGeneration uint64 // the session generation asked for
}

func (e *CatalogError) Error() string { return errPrefix + e.text() }

func (e *CatalogError) text() string {
	return fmt.Sprintf("%s catalog %s (session %d, current %d) refused: %s",
		e.Kind, e.Status, e.SessionGeneration, e.CurrentGeneration, e.Reason)
}

// Is makes every CatalogError match ErrSnapshotUnproven.
func (e *CatalogError) Is(target error) bool { return target == ErrSnapshotUnproven }

// Proven returns the listed items for a task that needs all of them
// (revocation sweeps, cleanup), and refuses with a *CatalogError (matching
// ErrSnapshotUnproven) anything but a SNAPSHOT_PROVEN catalog of session
// generation sessionGen that is not stale at now.
//
// Proven knows the session by its generation only; ProvenIn also
// refuses a catalog of another engine (CatalogReasonOtherEngine).
func (c Catalog) Proven(now time.Time, sessionGen uint64) ([]Descriptor, error) {
	if err := c.refusal(now, sessionGen, "", true); err != nil {
		return nil, err
	}
	return slices.Clone(c.Descriptors), nil
}

// ProvenIn is Proven for e's current session, at e's clock: it also
// refuses, with CatalogReasonOtherEngine, a catalog listed in a session of
// another engine.
func (c Catalog) ProvenIn(e *Engine) ([]Descriptor, error) {
	if err := c.refusal(e.now(), e.SessionGeneration(), e.id, true); err != nil {
		return nil, err
	}
	return slices.Clone(c.Descriptors), nil
}

// refusal returns why the catalog cannot vouch for absence (proof: true) or
// for presence (proof: false) at now in session generation gen of engine
// (not checked when empty). A catalog whose receipt names no engine is
// judged by its generation alone.
func (c Catalog) refusal(now time.Time, gen uint64, engine string, proof bool) error {
	refuse := func(reason CatalogRefusalReason) error {
		return &CatalogError{Kind: c.Kind, Status: c.Status, Reason: reason, SessionGeneration: c.SessionGeneration, CurrentGeneration: gen}
	}
	switch {
	case c.Status == CatalogUnreconciled || proof && c.Status != CatalogSnapshotProven:
		return refuse(CatalogReasonNotProven)
	case engine != "" && c.Engine != "" && c.Engine != engine:
		return refuse(CatalogReasonOtherEngine)
	case c.SessionGeneration != gen:
		return refuse(CatalogReasonOtherSession)
	case proof && !now.Before(c.StaleAfter):
		return refuse(CatalogReasonStale)
	}
	return nil
}

// Reconciliation is what Catalog.Reconcile did.
type Reconciliation struct {
	// Tickets are the reconcile reads to send, one per URI restored to
	// ACTIVE (none for a URI whose read is already in flight: it was marked
	// dirty instead).
	Tickets []ledger.Ticket `json:"tickets"`
	// Present are the URIs the catalog lists, restored to ACTIVE, or
	// TOMBSTONED ones it lists again, read to bring them back.
	Present []string `json:"present"`
	// Tombstoned are the URIs a proven catalog does not list, confirmed
	// deleted.
	Tombstoned []string `json:"tombstoned"`
	// Receipts are the tombstone receipts of Tombstoned, in the same order.
	Receipts []TombstoneReceipt `json:"receipts,omitempty"`
	// Corroborating are the TOMBSTONE_PENDING URIs an unproven catalog does
	// not list, under a DeletionPolicy that lets it corroborate: each was
	// sent a second read (among Tickets, or queued behind a read in
	// flight), whose not-found confirms the deletion (deletion.go).
	Corroborating []string `json:"corroborating,omitempty"`
	// Missing are the open subscriptions the catalog does not list; each
	// was sent a reconcile read, whose not-found takes the fenced path.
	Missing []string `json:"missing,omitempty"`
	// Unlisted are the URIs the catalog does not list whose absence
	// DeletionUnlisted counts and that it did not yet confirm.
	Unlisted []string `json:"unlisted,omitempty"`
	// Deferred are the URIs the catalog does not list but that it can
	// neither prove absent nor corroborate; they stay as they are (a
	// TOMBSTONE_PENDING resource is not served) until a later catalog
	// decides.
	Deferred []string `json:"deferred"`
	// TooOld are the URIs of Deferred whose newest not-found came after
	// the catalog's scan began (ErrEvidenceTooOld): its absence says
	// nothing of them, and a scan begun now may decide them.
	TooOld []string `json:"tooOld,omitempty"`
}

// Scan lists kind completely over pages, as Client.Scan says: the snapshot
// extension counts as negotiated when receipt.SnapshotList is set, and
// listChanged counts the list_changed notifications of kind; nil means they
// are not observed (a server without listChanged), which the digest
// comparison still covers.
func (s *scanner) Scan(ctx context.Context, kind ListKind, era Era, receipt ledger.CapabilityReceipt, pages pageFunc, listChanged func() uint64) (Catalog, error) {
	if kind.Method() == "" {
		return Catalog{}, fmt.Errorf("mcpsync: unknown list kind %q", kind)
	}
	if era != EraLegacy && era != EraModern {
		return Catalog{}, fmt.Errorf("mcpsync: unknown protocol era %q", era)
	}
	if listChanged == nil {
		listChanged = func() uint64 { return 0 }
	}
	c := Catalog{Schema: SchemaCatalog, Kind: kind, Status: CatalogUnreconciled, SessionGeneration: receipt.SessionGeneration, Engine: receipt.Engine}
	fail := func(attempts int, err error) (Catalog, error) {
		c.MeasuredAt = s.opts.Now()
		if n := len(c.Scans); n > 0 {
			c.MeasuredAt = c.Scans[n-1].EndedAt
		}
		c.StaleAfter = c.MeasuredAt
		c.NextReviewAt = c.MeasuredAt.Add(s.opts.BackoffMax)
		return c, &ScanError{Kind: kind, Attempts: attempts, Err: err}
	}
	publish := func(status CatalogStatus, r *ScanReceipt, set []Descriptor, measured time.Time) (Catalog, error) {
		c.Status, c.SnapshotID, c.Descriptors, c.SetDigest = status, r.SnapshotID, set, r.SetDigest
		c.MeasuredAt = measured
		c.StaleAfter = measured.Add(s.opts.StaleAfter)
		c.NextReviewAt = measured.Add(s.opts.ReviewAfter)
		return c, nil
	}
	var last error
	for attempt := 1; attempt <= s.opts.MaxAttempts; attempt++ {
		var wait time.Duration
		if attempt > 1 {
			wait = s.backoff(attempt - 1)
			if err := waitBackoff(ctx, wait); err != nil {
				return fail(attempt-1, err)
			}
		}
		before := listChanged()
		a, setA, err := s.pass(ctx, kind, era, receipt, pages, listChanged)
		a.Attempt, a.Pass, a.Backoff = attempt, "A", wait
		c.Scans = append(c.Scans, a)
		if err != nil {
			if !retryablePass(err) {
				return fail(attempt, err)
			}
			last = err
			continue
		}
		if a.proven() {
			return publish(CatalogSnapshotProven, &a, setA, a.StartedAt)
		}
		if a.Outcome != PassClean {
			last = ErrListUnstable
			continue
		}
		b, setB, err := s.pass(ctx, kind, era, receipt, pages, listChanged)
		b.Attempt, b.Pass = attempt, "B"
		c.Scans = append(c.Scans, b)
		if err != nil {
			if !retryablePass(err) {
				return fail(attempt, err)
			}
			last = err
			continue
		}
		if b.proven() {
			return publish(CatalogSnapshotProven, &b, setB, b.StartedAt)
		}
		// A notification between the passes shows in neither receipt, so
		// the counter is compared across the whole attempt.
		if b.Outcome == PassClean && a.SetDigest == b.SetDigest && listChanged() == before {
			return publish(CatalogSnapshotUnproven, &b, setB, b.EndedAt)
		}
		last = ErrListUnstable
	}
	return fail(s.opts.MaxAttempts, last)
}

// retryablePass reports whether a failed pass may be mended by scanning again: a
// cursor cycle or an invalid cursor may come from the listing changing under
// the pass. The page cap is not retried: a listing longer than the cap stays
// longer, and retrying would multiply the load the cap exists to bound.
func retryablePass(err error) bool {
	pe, ok := errors.AsType[*passError](err)
	return ok && (pe.Fault == FaultCursorCycle || pe.Fault == FaultInvalidCursor)
}

// backoff returns the jittered wait before the attempt after the n-th
// failure: BackoffBase doubled n-1 times, capped at BackoffMax, of which a
// random half is waited on top of the other half, so that the wait never
// collapses to zero while scanners that failed together still spread out.
func (s *scanner) backoff(n int) time.Duration {
	d := s.opts.BackoffBase
	for i := 1; i < n && d < s.opts.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, s.opts.BackoffMax)
	var f float64
	if s.rnd != nil {
		s.randMu.Lock()
		f = s.rnd.Float64()
		s.randMu.Unlock()
	} else {
		f = rand.Float64()
	}
	return d/2 + time.Duration(f*float64(d/2))
}

// waitBackoff waits d or until ctx ends, on a timer, so that tests can run it in
// virtual time (testing/synctest).
func waitBackoff(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pass walks the listing once and returns its receipt and, when it reached
// the end, its distinct descriptors sorted by key. The error is the pass's
// *passError, or ctx's error.
func (s *scanner) pass(ctx context.Context, kind ListKind, era Era, receipt ledger.CapabilityReceipt, pages pageFunc, listChanged func() uint64) (ScanReceipt, []Descriptor, error) {
	r := ScanReceipt{
		Schema: SchemaDiscoveryScan, ID: uuid.NewString(), Kind: kind, Era: era, SessionGeneration: receipt.SessionGeneration,
		SnapshotNegotiated: receipt.SnapshotList, StartedAt: s.opts.Now(), Pages: []PageReceipt{},
	}
	before := listChanged()
	var items []keyedDescriptor
	seen := make(map[string]string) // key -> its first spelling
	var walkErr error
	for w, err := range s.walkPages(ctx, era, pages) {
		if err != nil {
			walkErr = err
			break
		}
		r.Pages = append(r.Pages, PageReceipt{Index: w.index, CursorDigest: w.cursorDigest, ItemCount: len(w.page.Items), SnapshotID: w.page.SnapshotID})
		for _, d := range w.page.Items {
			d.Kind = kind
			key := d.Key()
			spelling := d.URI + d.URITemplate
			if spelling == "" {
				spelling = d.Name
			}
			if first, dup := seen[key]; dup {
				fault := FaultRepeatedItem
				if first != spelling {
					fault = FaultAliasedItem
				}
				r.Faults = append(r.Faults, ScanFault{Fault: fault, Page: w.index, Key: key, Spellings: []string{first, spelling}})
			} else {
				seen[key] = spelling
			}
			items = append(items, keyedDescriptor{key, d})
		}
	}
	r.ItemCount = len(items)
	r.SnapshotFaults, r.SnapshotID = snapshotVerdict(r.Pages, receipt.SnapshotList)
	r.ListChangedSeen = listChanged() - before
	r.EndedAt = s.opts.Now()
	if walkErr != nil {
		r.Outcome, r.SnapshotID = PassFailed, ""
		if pe, ok := errors.AsType[*passError](walkErr); ok {
			f := ScanFault{Fault: pe.Fault, Page: pe.Page, CursorDigest: pe.CursorDigest}
			if pe.Err != nil {
				f.Error = causeText(pe.Err)
			}
			r.Faults = append(r.Faults, f)
			if pe.Fault != FaultPageError {
				r.Outcome = PassAborted
			}
		}
		return r, nil, walkErr
	}
	// One descriptor per key: of aliases, the first in canonical order, so
	// that passes listing the same spellings agree whatever their order.
	set := slices.CompactFunc(canonicalDescriptorSet(items), func(a, b keyedDescriptor) bool { return a.key == b.key })
	r.SetDigest = descriptorSetDigest(kind, set)
	descriptors := make([]Descriptor, len(set))
	for i, k := range set {
		descriptors[i] = k.d
	}
	r.Outcome = PassClean
	// A forged or broken snapshot id, a repeat or an alias only withhold
	// the proof: the pass is judged by the two-pass rule like any pass of a
	// server without the extension. A listing that really moved under the
	// pass shows as differing set digests of A and B, or as list_changed.
	if len(r.Faults) > 0 {
		r.SnapshotID = ""
	}
	if r.ListChangedSeen > 0 {
		r.Outcome, r.SnapshotID = PassUnclean, ""
	}
	return r, descriptors, nil
}

// snapshotVerdict returns the forged or missing snapshot ids of a pass, and
// the id the pass proves: the one non-empty id of every page, and only when
// the extension was negotiated.
func snapshotVerdict(pages []PageReceipt, negotiated bool) ([]ScanFault, string) {
	var faults []ScanFault
	var first string
	if len(pages) > 0 {
		first = pages[0].SnapshotID
	}
	for _, p := range pages {
		switch {
		case !negotiated && p.SnapshotID != "":
			faults = append(faults, ScanFault{Page: p.Index, Fault: FaultSnapshotNotNegotiated, SnapshotID: p.SnapshotID})
		case negotiated && p.SnapshotID == "":
			faults = append(faults, ScanFault{Page: p.Index, Fault: FaultSnapshotIDMissing})
		case negotiated && p.SnapshotID != first:
			faults = append(faults, ScanFault{Page: p.Index, Fault: FaultSnapshotIDDiffers, SnapshotID: p.SnapshotID})
		}
	}
	if !negotiated || len(faults) > 0 || first == "" {
		return faults, ""
	}
	return nil, first
}

// keyedDescriptor is a descriptor with its key, computed once.
type keyedDescriptor struct {
	key string
	d   Descriptor
}

// canonicalDescriptorSet returns the distinct descriptors sorted by key, then fields.
func canonicalDescriptorSet(items []keyedDescriptor) []keyedDescriptor {
	set := slices.Clone(items)
	slices.SortFunc(set, func(a, b keyedDescriptor) int {
		return cmp.Or(
			cmp.Compare(a.key, b.key),
			cmp.Compare(a.d.URI, b.d.URI),
			cmp.Compare(a.d.URITemplate, b.d.URITemplate),
			cmp.Compare(a.d.Name, b.d.Name),
			cmp.Compare(a.d.MIMEType, b.d.MIMEType),
		)
	})
	return slices.Compact(set)
}

// descriptorSetDigest hashes a canonical set in the form documented on
// Catalog.SetDigest.
func descriptorSetDigest(kind ListKind, set []keyedDescriptor) string {
	h := sha256.New()
	var buf []byte
	str := func(s string) {
		buf = binary.BigEndian.AppendUint64(buf[:0], uint64(len(s)))
		buf = append(buf, s...)
		h.Write(buf)
	}
	h.Write([]byte("mcpsync.descriptors.v1\x00"))
	str(string(kind))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(set))))
	for _, k := range set {
		str(k.key)
		str(k.d.URI)
		str(k.d.URITemplate)
		str(k.d.Name)
		str(k.d.MIMEType)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Walk lists kind lazily in one pass, yielding each item as listed (repeats
// included), and yields an error and stops at the first failure: a
// *passError for a cursor cycle, the page cap or a failed page (an invalid
// cursor is not retried here; Scan starts over), or ctx's error. It proves
// nothing about completeness; use Scan for that.
func (s *scanner) Walk(ctx context.Context, kind ListKind, era Era, pages pageFunc) iter.Seq2[Descriptor, error] {
	return func(yield func(Descriptor, error) bool) {
		for w, err := range s.walkPages(ctx, era, pages) {
			if err != nil {
				yield(Descriptor{}, err)
				return
			}
			for _, d := range w.page.Items {
				d.Kind = kind
				if !yield(d, nil) {
					return
				}
			}
		}
	}
}
