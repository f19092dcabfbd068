package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpsync/mcpsync/internal/inplace"
	"github.com/mcpsync/mcpsync/internal/uri"
	"github.com/mcpsync/mcpsync/ledger"
)

// EngineOptions configure an Engine. The zero value (or nil) means defaults.
type EngineOptions struct {
	// Ledger stores records, the outbox, identity counters and revoked
	// subjects; nil means ledger.NewMemory(nil).
	Ledger ledger.Ledger
	// Guard checks content before it becomes visible; nil accepts all.
	Guard ContentGuard
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AuditCapacity is how many stale receipts StaleReceipts keeps (the
	// counts in StaleCounts are never dropped); 0 means 1024.
	AuditCapacity int
	// MaxReadsInFlight bounds the unsettled tickets of one URI; 0 means 16.
	MaxReadsInFlight int
	// OnTransition, if set, is told of every state change, after it is
	// stored and outside every lock. It must not block for long.
	OnTransition func(Transition)
	// ConfirmSends promises that the caller reports every queued read
	// (from Notify, RequestRead, ApplyListing, Catalog.Reconcile or a
	// follow-up) with Sending right before it goes out. Pulses that arrive
	// before then are covered by that read, so duplicate notifications cost
	// no follow-up. A Client turns it on for the engine it drives; a caller
	// that cannot keep the promise leaves it false, and every pulse during a
	// read earns one follow-up.
	ConfirmSends bool
}

// Engine keeps the local copy of one MCP server's resources: it issues read
// tickets, runs the fence, drives the subscription state machine and owns the
// outbox. An Engine is safe for concurrent use.
//
// What the copy serves, whoever drives it: Lookup, Entries, Subscription,
// Subscriptions and ResumableSubscriptions; the outbox through Consume and
// Acknowledge (or PullOutbox, for DefaultConsumer), OutboxState, Resolve,
// and RecordDerived and ForgetDerived for what consumers built from it;
// RevokeSubject; StaleCounts and StaleReceipts for the refusals; ID, Ledger
// and SessionGeneration for which engine, ledger and session it is.
//
// A Client drives an engine (ClientOptions.Engine) with the calls that
// follow; a program that connects with a Client makes none of them. A
// program that talks to the server over a transport of its own makes them
// itself (ExampleEngine_ownTransport runs one read cycle):
//
//   - each initialize: BeginSession, with what the server declared;
//   - each subscription: Subscribe before resources/subscribe (or
//     subscriptions/listen), Activate once the server confirms (ledger.ModePoll for
//     a server that cannot notify, with PublishStalenessBound), BeginClose
//     before resources/unsubscribe and FinishClose with its answer
//     (ResolveUnsubscribe once an unknown answer is reconciled), Forget to
//     evict what nothing keeps fresh;
//   - each read: Notify for a resources/updated, RequestRead for any other
//     trigger (both coalesce: ok says whether to send), or IssueTicket for a
//     read of its own; Sending as it goes out (with
//     EngineOptions.ConfirmSends); its answer through FinishRead, which
//     returns the follow-up read due, or AcceptResourceVersion; no answer
//     through Fail, which returns the read due, or AbandonRead;
//   - list evidence: Catalog.Reconcile, or, URI by URI, ApplyListing;
//     Discover records a URI a scan found.
type Engine struct {
	ledger ledger.Ledger
	// listedMu protects listedSince: the start of the newest clean
	// listing reconciled, or the time of the newest that failed. An
	// absence counts only in a listing that began then or later
	// (countsUnlisted).
	listedMu    sync.Mutex
	listedSince time.Time
	// mem is ledger when it is the memory ledger, whose writes the fence
	// makes in place (change); nil for every other ledger.
	mem memStore
	// deferring is ledger when it can defer writes (ledger.Deferring),
	// batching when it takes many in one call (ledger.Batching).
	deferring    ledger.Deferring
	batching     ledger.Batching
	guard        ContentGuard
	now          func() time.Time
	onTransition func(Transition)
	maxTickets   int

	// id names this engine instance on everything it writes: two engines
	// opened on copies of one ledger allocate the same numbers, and only
	// the id tells their tickets apart.
	id string

	session   atomic.Pointer[session] // never nil
	sessionMu sync.Mutex              // serializes BeginSession and a Client's release of the engine
	requests  idBlock                 // request ids reserved from the ledger

	// revokeMu is read-held by every write that binds content to a subject
	// (accept, RecordDerived) and write-held while a revocation publishes its
	// subject. Once RevokeSubject holds it, no such write is half done, so
	// its sweep of the ledger sees every version the subject will ever have.
	revokeMu sync.RWMutex
	revoked  sync.Map // subject → struct{}; only grows
	// revokedAny is set once revoked holds a subject: until then no
	// lookup of it is needed.
	revokedAny atomic.Bool
	// revokedGen is the ledger's RevokedGeneration that revoked reflects:
	// when the ledger's moves on (another engine on the same ledger
	// revoked a subject), the set is read again (syncRevoked).
	revokedGen atomic.Uint64
	reloadMu   sync.Mutex // serializes reading the revoked set from the ledger

	queue readQueue
	audit auditLog

	// driver is the Client that drives the engine, nil while none does.
	driver atomic.Pointer[Client]
	// changed is the driver's change hook while it has a Handler: told of
	// every write by compare-and-swap that moves a current version.
	changed atomic.Pointer[changeHook]
}

type session struct {
	gen  uint64
	live bool // false for the generation recovered from the ledger
	info SessionInfo
}

// NewEngine returns an engine over opts.Ledger, with a new identity (ID).
// Session generations, close epochs and request ids are allocated by the
// ledger, so an engine restarted on a durable ledger never reissues an
// identity an older read might carry, and revocations recorded in it stay
// in force. A revocation whose sweep a crash cut short is finished here.
func NewEngine(opts *EngineOptions) (*Engine, error) {
	var o EngineOptions
	if opts != nil {
		o = *opts
	}
	if o.AuditCapacity < 0 || o.MaxReadsInFlight < 0 {
		return nil, errors.New("mcpsync: negative AuditCapacity or MaxReadsInFlight")
	}
	if o.Ledger == nil {
		o.Ledger = ledger.NewMemory(nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AuditCapacity == 0 {
		o.AuditCapacity = 1024
	}
	if o.MaxReadsInFlight == 0 {
		o.MaxReadsInFlight = 16
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, errorf("engine identity: %w", err)
	}
	e := &Engine{
		id:           id.String(),
		ledger:       o.Ledger,
		guard:        o.Guard,
		now:          o.Now,
		onTransition: o.OnTransition,
		maxTickets:   o.MaxReadsInFlight,
	}
	e.mem, _ = inplace.Get[ledger.Record, ledger.OutboxEntry, ledger.StoredVersion](o.Ledger)
	e.deferring, _ = o.Ledger.(ledger.Deferring)
	e.batching, _ = o.Ledger.(ledger.Batching)
	e.queue.init(o.ConfirmSends)
	var auditMu *sync.Mutex
	if e.mem != nil {
		auditMu = e.mem.Mutex()
	}
	e.audit.init(o.AuditCapacity, auditMu)
	// No session is current until BeginSession: results of the sessions the
	// ledger remembers all belong to older generations.
	e.session.Store(&session{})
	ctx := context.Background()
	revoked, err := e.loadRevoked(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range revoked {
		if !r.Swept {
			if _, err := e.sweep(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// ID returns the engine's identity, a random UUID drawn by NewEngine. It is
// recorded on every ticket, outbox entry and revocation the engine writes.
func (e *Engine) ID() string { return e.id }

// requestBlock is how many request ids an engine reserves from its ledger at
// once: a durable ledger then writes once per block, not once per read, and
// a crash only leaves the rest of a block unused.
const requestBlock = 64

// idBlock holds request ids reserved from the ledger and not yet used, and
// the next block, reserved while this one still has ids, so that readers do
// not all wait for its reservation when this one runs out.
// On the memory ledger the ledger's lock guards it instead of mu: only
// steps in place (issue) hand ids out there (requestIDLocked).
type idBlock struct {
	mu        sync.Mutex // protects every field
	next, end uint64     // next is free while next < end
	// spare is the first id of the next block (0: none yet); reserving
	// says a reader is reserving it.
	spare     uint64
	reserving bool
}

// requestID hands out a request id the ledger will never hand out again.
// The reader that takes the middle id of a block reserves the next one,
// outside the lock, while the others go on taking ids.
func (e *Engine) requestID(ctx context.Context) (uint64, error) {
	b := &e.requests
	b.mu.Lock()
	if b.next == b.end && b.spare != 0 {
		b.next, b.end, b.spare = b.spare, b.spare+requestBlock, 0
	}
	if b.next == b.end {
		// None left and none reserved: reserve under the lock, which the
		// others wait on (as they would for any id).
		defer b.mu.Unlock()
		return b.take(func() (uint64, error) { return e.ledger.Next(ctx, ledger.CounterRequest, requestBlock) })
	}
	id, _ := b.take(nil)
	reserve := !b.reserving && b.spare == 0 && b.end-b.next <= requestBlock/2
	if reserve {
		b.reserving = true
	}
	b.mu.Unlock()
	if reserve {
		first, err := e.ledger.Next(ctx, ledger.CounterRequest, requestBlock)
		b.mu.Lock()
		b.reserving = false
		if err == nil {
			b.spare = first
		}
		b.mu.Unlock()
		// A failed reservation is tried again by whoever runs out.
	}
	return id, nil
}

// requestIDLocked is requestID in a step on the memory ledger, whose lock
// the caller holds: the block is reserved from the ledger's counter under
// that lock, as Next would reserve it.
func (e *Engine) requestIDLocked() (uint64, error) {
	return e.requests.take(func() (uint64, error) { return e.mem.NextLocked(string(ledger.CounterRequest), requestBlock) })
}

// take hands out the block's next id, reserving a new block with reserve
// (which returns its first id) once this one is spent.
func (b *idBlock) take(reserve func() (uint64, error)) (uint64, error) {
	if b.next == b.end {
		first, err := reserve()
		if err != nil {
			return 0, errorf("reserve request ids: %w", err)
		}
		b.next, b.end = first, first+requestBlock
	}
	id := b.next
	b.next++
	return id, nil
}

// Ledger returns the ledger the engine writes, for export (ledger.Export).
func (e *Engine) Ledger() ledger.Ledger { return e.ledger }

// BeginSession tells the engine that the MCP connection was (re)initialized
// and returns the new session generation, with the capability receipt bound
// to it. From now on results and notifications of older generations are
// refused. Subscriptions whose unsubscribe outcome stayed unknown end with
// their session: they become CLOSED.
func (e *Engine) BeginSession(info SessionInfo) (ledger.CapabilityReceipt, error) {
	return e.beginSessionOf(nil, info)
}

// beginSessionOf is BeginSession for the Client c that drives the engine:
// refused once c no longer does (it was closed, and the engine may drive
// another Client's sessions by now). Client.release frees the engine under
// the same lock.
func (e *Engine) beginSessionOf(c *Client, info SessionInfo) (ledger.CapabilityReceipt, error) {
	e.sessionMu.Lock()
	if c != nil && e.driver.Load() != c {
		e.sessionMu.Unlock()
		return ledger.CapabilityReceipt{}, ErrClientClosed
	}
	gen, err := e.ledger.Next(context.Background(), ledger.CounterSession, 1)
	if err != nil {
		e.sessionMu.Unlock()
		return ledger.CapabilityReceipt{}, errorf("allocate session generation: %w", err)
	}
	info.Capabilities.Schema = ledger.SchemaCapabilityReceipt
	info.Capabilities.SessionGeneration = gen
	// A generation is unique only within one ledger's lineage: the engine's
	// identity is what tells a session of another engine (on another
	// ledger, or a copy of this one) apart.
	info.Capabilities.Engine = e.id
	if info.Capabilities.ReceivedAt.IsZero() {
		info.Capabilities.ReceivedAt = e.now()
	}
	e.session.Store(&session{gen: gen, live: true, info: info})
	e.sessionMu.Unlock()
	return info.Capabilities, e.endUnknownCloses(gen)
}

// sessionGeneration returns the current session generation, or 0 when no
// session of this engine's lifetime is current (no ticket carries 0).
func (e *Engine) sessionGeneration() uint64 {
	if s := e.session.Load(); s.live {
		return s.gen
	}
	return 0
}

// Now reads the engine's clock (EngineOptions.Now), the one its receipts,
// versions and staleness bounds are stamped with.
func (e *Engine) Now() time.Time { return e.now() }

// SessionGeneration returns the current session generation (0 before the
// first BeginSession).
func (e *Engine) SessionGeneration() uint64 { return e.sessionGeneration() }

const casAttempts = 100

// update applies fn to the record of key and stores its result by
// compare-and-swap, retrying with the fresh record when another writer won.
// fn must depend only on the record it is given; it returns a nil record to
// write nothing. update returns the record as stored afterwards.
func (e *Engine) update(key string, fn func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error)) (*ledger.Record, uint64, error) {
	return e.updateFrom(key, nil, false, nil, fn)
}

// updateFrom is update starting from cur, the record as the caller just
// loaded it, when loaded: one round trip fewer, and when another writer got
// there since, the compare-and-swap says so and the next attempt loads. A
// write for which mayDefer (when not nil) says so may be deferred
// (swap).
func (e *Engine) updateFrom(key string, cur *ledger.Record, loaded bool, mayDefer func(cur, next *ledger.Record) bool,
	fn func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error)) (*ledger.Record, uint64, error) {
	// Engine calls take no context yet; a ledger write is one short
	// transaction.
	ctx := context.Background()
	for range casAttempts {
		if !loaded {
			var err error
			if cur, err = e.ledger.Load(ctx, key); err != nil {
				return nil, 0, errorf("load %s: %w", key, err)
			}
		}
		loaded = false
		next, entries, err := fn(cur)
		if err != nil || next == nil {
			return cur, 0, err
		}
		for i := range entries {
			entries[i].Engine = e.id
		}
		deferrable := mayDefer != nil && mayDefer(cur, next)
		seq, ok, err := e.swap(ctx, key, cur, next, entries, deferrable)
		if err != nil {
			return nil, 0, errorf("store %s: %w", key, err)
		}
		if ok {
			e.movedCurrent(key, cur, next, entries)
			return next, seq, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: %s", ErrLedgerConflict, key)
}

// swap stores next over cur by compare-and-swap, with entries; a write
// with no entries that a crash makes moot (deferrable) is deferred on a
// ledger that can defer it (ledger.Deferring): it is visible at once and
// durable with the key's next durable write.
func (e *Engine) swap(ctx context.Context, key string, cur, next *ledger.Record, entries []OutboxEntry, deferrable bool) (uint64, bool, error) {
	if deferrable && len(entries) == 0 && e.deferring != nil {
		ok, err := e.deferring.CompareAndSwapDeferred(ctx, key, revisionOf(cur), next)
		return 0, ok, err
	}
	return e.ledger.CompareAndSwap(ctx, key, revisionOf(cur), next, entries)
}

// resumedAnyway reports whether a write of cur that leaves next may be
// deferred because a crash that lost it would leave the key as a restart
// resumes it anyway: cur and next are both generations a restart resumes
// (ResumableSubscriptions), of one subject, server and spelling. A deferred
// write is only ever made on a record such a write left or a durable one,
// so the record a crash leaves is resumed as next would be.
func resumedAnyway(cur, next *ledger.Record) bool {
	if cur == nil || cur.Sub == nil || next == nil || next.Sub == nil || !resumes(cur) || !resumes(next) {
		return false
	}
	a, b := cur.Sub, next.Sub
	return a.Subject == b.Subject && a.URI == b.URI && a.RawURI == b.RawURI && serverIDOf(a) == serverIDOf(b)
}

// resumes reports whether a restart resumes r's generation (as
// ResumableSubscriptions picks them, whatever its session).
func resumes(r *ledger.Record) bool {
	if r.Sub.Generation == 0 || r.CloseEpoch != 0 {
		return false
	}
	switch st := r.State; {
	case st.Open(), st == ledger.StateSubscribing, st == ledger.StateTombstonePending,
		st == ledger.StateTombstoned, st == ledger.StateReconciliationRequired:
		return true
	}
	return false
}

// serverIDOf is the ServerID s was opened with (serverOf).
func serverIDOf(s *ledger.SubscriptionInfo) string {
	if s.Capabilities != nil && s.Capabilities.ServerID != "" {
		return s.Capabilities.ServerID
	}
	return s.Server.Name
}

// stepFunc is one write of a record, made on a copy: cur is the record as
// stored (nil when there is none), which it must not change, and next, when
// cur is not nil, a copy of it one revision on. The step changes next's
// fields and its tickets in place (next's ticket array is its own); what
// next points to (its version, subscription, corroboration, artifacts) it
// replaces, never modifies. It appends the outbox entries of the write to
// *entries and returns whether to store next. It must keep neither cur nor
// next, and must not call the ledger: on the memory ledger it runs under
// the ledger's lock, on the ledger's private copy of the record.
type stepFunc func(cur, next *ledger.Record, entries *[]OutboxEntry) (bool, error)

// change applies fn to the record of key and stores its result: on the
// memory ledger in place, under its lock (memUpdate), on any
// other ledger by compare-and-swap, retrying with the fresh record when
// another writer won, starting from cur when loaded (as updateFrom), and
// deferring it when deferrable (swap). It returns the number of the first
// outbox entry written (0: none).
func (e *Engine) change(key string, cur *ledger.Record, loaded, deferrable bool, fn stepFunc) (uint64, error) {
	ctx := context.Background()
	if e.mem != nil {
		return memUpdate(e.mem, key, e.id, fn)
	}
	var entries []OutboxEntry
	for range casAttempts {
		if !loaded {
			var err error
			if cur, err = e.ledger.Load(ctx, key); err != nil {
				return 0, errorf("load %s: %w", key, err)
			}
		}
		loaded = false
		var next *ledger.Record
		if cur != nil {
			next = clone(cur)
			next.Tickets = slices.Clone(cur.Tickets) // the step's own
		}
		entries = entries[:0]
		write, err := fn(cur, next, &entries)
		if err != nil || !write {
			return 0, err
		}
		if next == nil {
			return 0, fmt.Errorf("mcpsync: store %s: a write of no record", key)
		}
		if len(next.Tickets) == 0 {
			next.Tickets = nil
		}
		for i := range entries {
			entries[i].Engine = e.id
		}
		seq, ok, err := e.swap(ctx, key, cur, next, entries, deferrable)
		if err != nil {
			return 0, errorf("store %s: %w", key, err)
		}
		if ok {
			e.movedCurrent(key, cur, next, entries)
			return seq, nil
		}
	}
	return 0, fmt.Errorf("%w: %s", ErrLedgerConflict, key)
}

// view runs fn on the record of key as stored (nil when there is none),
// which fn must not change or keep: on the memory ledger it runs under the
// ledger's lock and costs no copy.
func (e *Engine) view(key string, fn func(cur *ledger.Record)) error {
	ctx := context.Background()
	if e.mem != nil {
		inspect(e.mem, key, fn)
		return nil
	}
	cur, err := e.ledger.Load(ctx, key)
	if err != nil {
		return errorf("load %s: %w", key, err)
	}
	fn(cur)
	return nil
}

// NormalizeURI returns the key uri is stored under: the form every
// method of the engine turns a URI into before it touches the ledger, and
// the key of a lease on a shared ledger.
func NormalizeURI(uri string) (string, error) { return normalizeKey(uri) }

func normalizeKey(raw string) (string, error) {
	key, err := uri.Normalize(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidURI, err)
	}
	return key, nil
}

// Entry is a version that may be put into a prompt or an index.
type Entry struct {
	Version ResourceVersion
	// Contents are shared with the engine: do not modify them.
	Contents []Content
	// State is the subscription's state at the time of the lookup.
	State ledger.SubscriptionState
	// ValidatedAt is the last time the server confirmed this version: when
	// the newest read that returned it, changed or unchanged, was issued
	// (the server read the text no earlier), so a slow answer never
	// stretches the bound.
	ValidatedAt time.Time
	// StalenessBound is how old the copy may get (the published bound):
	// the copy is fresh until ValidatedAt + StalenessBound, whatever the
	// connection does meanwhile. It is in force from the moment a
	// subscription publishes it until the subscription begins to close,
	// across reconnects; zero when no subscription keeps the copy fresh.
	StalenessBound time.Duration
	// Degraded, when not empty, says why the copy is not being kept fresh
	// right now (the session is lost and healing, reads keep failing). It
	// is set by Client.Lookup and Client.Entries.
	Degraded string
}

// LookupOption changes one Lookup, or one listing (Entries).
type LookupOption func(*lookupOptions)

type lookupOptions struct {
	fresh  bool
	prefix string
}

func lookupOptionsOf(opts []LookupOption) lookupOptions {
	var o lookupOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// RequireFresh makes Lookup refuse, with ErrStale, a version that no
// subscription keeps fresh or whose last confirmation is older than its
// staleness bound: the strict mode for text about to go into a prompt. A
// listing (Entries) leaves such versions out.
func RequireFresh() LookupOption { return func(o *lookupOptions) { o.fresh = true } }

// URIPrefix makes a listing (Entries) yield only the entries whose
// normalized URI (Entry.Version.URI) begins with prefix, and looks no
// other up. Lookup of one URI ignores it.
func URIPrefix(prefix string) LookupOption { return func(o *lookupOptions) { o.prefix = prefix } }

// Lookup returns the current version of a URI if, and only if, it may be
// served to subject: it passed the fence and the content guard, it was read
// by subject, that subject is not revoked, and no newer read said the
// resource is gone. Otherwise it returns ErrInvalidURI for a URI that is no
// URI, ErrUnknownURI for one never subscribed, ErrNoVersion, ErrRevoked,
// ErrForbidden, ErrQuarantined, ErrTombstonePending or ErrTombstoned; with
// RequireFresh, also ErrStale. RefusalOf names each.
func (e *Engine) Lookup(subject, rawURI string, opts ...LookupOption) (Entry, error) {
	o := lookupOptionsOf(opts)
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Entry{}, err
	}
	if err := e.checkReader(context.Background(), subject); err != nil {
		return Entry{}, err
	}
	entry, err := e.servedNow(key, subject)
	if err != nil {
		return Entry{}, err
	}
	if o.fresh {
		if err := e.fresh(key, entry); err != nil {
			return Entry{}, err
		}
	}
	return entry, nil
}

// checkReader refuses a subject nothing may be served to now: one revoked
// (ErrRevoked), or one no read may be made for (a ledger of an earlier
// release may hold versions of one).
func (e *Engine) checkReader(ctx context.Context, subject string) error {
	if err := e.syncRevoked(ctx); err != nil {
		return err
	}
	if e.isRevoked(subject) {
		return ErrRevoked
	}
	return checkSubject(subject)
}

// servedNow reads key's record and returns what it serves subject
// (servedFrom), or ErrUnknownURI for a key the ledger does not know.
func (e *Engine) servedNow(key, subject string) (Entry, error) {
	var entry Entry
	var refused error
	known := true
	if err := e.view(key, func(r *ledger.Record) {
		if r == nil {
			known = false
			return
		}
		entry, refused = servedFrom(r, subject)
	}); err != nil {
		return Entry{}, err
	}
	if !known {
		return Entry{}, fmt.Errorf("%w: %s was never subscribed", ErrUnknownURI, key)
	}
	return entry, refused
}

// servedFrom is the rule of what a record serves a subject the engine
// does not hold revoked: its current version, when that passed the fence
// and the guard, was read by subject and was not revoked, quarantined or
// found gone since; otherwise the refusal that says which. The entry is
// copied out of r, which it keeps nothing of (the contents are the read's,
// never changed).
func servedFrom(r *ledger.Record, subject string) (Entry, error) {
	c := r.Current
	switch {
	case c == nil:
		return Entry{}, ErrNoVersion
	case c.Status == ledger.VersionRevoked:
		return Entry{}, ErrRevoked
	case c.Version.Subject != subject:
		return Entry{}, ErrForbidden
	case c.Status == ledger.VersionQuarantined:
		return Entry{}, ErrQuarantined
	case c.Status == ledger.VersionTombstonePending:
		return Entry{}, ErrTombstonePending
	case c.Status == ledger.VersionTombstoned:
		return Entry{}, ErrTombstoned
	}
	return Entry{
		Version: c.Version, Contents: c.Contents, State: r.State, ValidatedAt: r.ValidatedAt,
		StalenessBound: boundInForce(r),
	}, nil
}

// boundInForce is the staleness bound r's subscription keeps the copy to:
// the one its generation published, from then until its close begins.
// While a new session opens the subscription again (SUBSCRIBING), or its
// identity is reconciled, the bound stays in force: freshness is
// ValidatedAt + bound, not the state of the connection.
func boundInForce(r *ledger.Record) time.Duration {
	if r == nil || r.Sub == nil || r.CloseEpoch != 0 {
		return 0
	}
	switch st := r.State; {
	case st.Open(), st == ledger.StateSubscribing, st == ledger.StateReconciliationRequired:
		return r.Sub.StalenessBound
	}
	return 0
}

// fresh refuses, with ErrStale, an entry no bound is in force for or
// whose last confirmation is older than its bound.
func (e *Engine) fresh(key string, entry Entry) error {
	if entry.StalenessBound == 0 {
		return fmt.Errorf("%w: no open subscription keeps %s fresh", ErrStale, key)
	}
	if age := e.now().Sub(entry.ValidatedAt); age > entry.StalenessBound {
		return fmt.Errorf("%w: %s was confirmed %v ago, bound %v", ErrStale, key, age, entry.StalenessBound)
	}
	return nil
}

// refuseRevoked returns an error matching ErrRevoked when the ledger holds
// subject revoked: nothing read for it can ever pass the fence.
func (e *Engine) refuseRevoked(subject string) error {
	if err := e.syncRevoked(context.Background()); err != nil {
		return err
	}
	if e.isRevoked(subject) {
		return fmt.Errorf("%w: subject %q", ErrRevoked, subject)
	}
	return nil
}

func (e *Engine) isRevoked(subject string) bool {
	if !e.revokedAny.Load() {
		return false
	}
	_, ok := e.revoked.Load(subject)
	return ok
}

// addRevoked adds subjects to the cached revoked set, which only grows: a
// revocation costs the subjects it adds, not the set.
func (e *Engine) addRevoked(subjects ...string) {
	for _, s := range subjects {
		e.revoked.Store(s, struct{}{})
	}
	if len(subjects) > 0 {
		e.revokedAny.Store(true)
	}
}

// syncRevoked makes the cached revoked set hold every subject the ledger
// holds, reading it again only when the ledger's RevokedGeneration moved:
// another engine sharing the ledger revoked a subject. Unchanged, it costs
// one cheap read, so every accept and lookup can afford it.
func (e *Engine) syncRevoked(ctx context.Context) error {
	var gen uint64
	if e.mem != nil {
		gen = e.mem.RevokedGeneration()
	} else {
		var err error
		if gen, err = e.ledger.RevokedGeneration(ctx); err != nil {
			return errorf("read revocations: %w", err)
		}
	}
	if gen == e.revokedGen.Load() {
		return nil
	}
	if x, ok := e.ledger.(ledger.Index); ok {
		return e.loadRevokedAfter(ctx, x)
	}
	_, err := e.loadRevoked(ctx)
	return err
}

// loadRevokedAfter adds to the cache the subjects that joined the ledger's
// revoked set since the generation it reflects: the ones it lacks, and no
// others.
func (e *Engine) loadRevokedAfter(ctx context.Context, x ledger.Index) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	subjects, gen, err := x.RevokedAfter(ctx, e.revokedGen.Load())
	if err != nil {
		return errorf("read revocations: %w", err)
	}
	e.addRevoked(subjects...)
	e.revokedGen.Store(gen)
	return nil
}

// loadRevoked reads the ledger's revoked set into the cache and returns it.
// The generation is read first, so the set read after it holds at least
// what that generation counts.
func (e *Engine) loadRevoked(ctx context.Context) ([]ledger.RevokedSubject, error) {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	gen, err := e.ledger.RevokedGeneration(ctx)
	if err != nil {
		return nil, errorf("read revocations: %w", err)
	}
	revoked, err := e.ledger.Revoked(ctx)
	if err != nil {
		return nil, errorf("read revocations: %w", err)
	}
	subjects := make([]string, len(revoked))
	for i, r := range revoked {
		subjects[i] = r.Subject
	}
	e.addRevoked(subjects...)
	e.revokedGen.Store(gen)
	return revoked, nil
}

// Transition is one state change of a subscription generation.
type Transition struct {
	URI                    string                   `json:"uri"`
	SubscriptionGeneration uint64                   `json:"subscriptionGeneration"`
	From                   ledger.SubscriptionState `json:"from"`
	To                     ledger.SubscriptionState `json:"to"`
	Event                  string                   `json:"event"`
}

// emit tells the observer of the steps path recorded.
func (e *Engine) emit(key string, path *transitions) {
	if e.onTransition == nil {
		return
	}
	for i := 0; i < path.n; i++ {
		s := path.steps[i]
		e.onTransition(Transition{
			URI: key, SubscriptionGeneration: path.gen,
			From: stateNames[s.from], To: stateNames[s.to], Event: eventNames[s.event],
		})
	}
}

// auditLog keeps the newest stale receipts and a count per reason.
type auditLog struct {
	// mu guards every field below: own, or, on the memory ledger, the
	// ledger's lock, which a write in place that refuses a result already
	// holds (recordLocked): a stale result then takes one lock, not two.
	mu   *sync.Mutex
	own  sync.Mutex
	ring []StaleReceipt
	next int // where the next receipt goes
	full bool
	// known counts the reasons of staleReasons, by reasonIndex, and counts
	// any other.
	known  [len(staleReasons)]uint64
	counts map[StaleReason]uint64
}

func (a *auditLog) init(capacity int, mu *sync.Mutex) {
	if mu == nil {
		mu = &a.own
	}
	a.mu = mu
	a.ring = make([]StaleReceipt, capacity)
	a.counts = make(map[StaleReason]uint64)
}

func (a *auditLog) record(s *StaleReceipt) {
	a.mu.Lock()
	a.recordLocked(s)
	a.mu.Unlock()
}

// recordLocked is record by a holder of a.mu.
func (a *auditLog) recordLocked(s *StaleReceipt) {
	a.ring[a.next] = *s
	a.next++
	if a.next == len(a.ring) {
		a.next, a.full = 0, true
	}
	if i := reasonIndex(s.Reason); i >= 0 {
		a.known[i]++
	} else {
		a.counts[s.Reason]++
	}
}

// StaleReceipts returns the newest stale receipts, oldest first.
func (e *Engine) StaleReceipts() []StaleReceipt {
	a := &e.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.full {
		return append([]StaleReceipt(nil), a.ring[:a.next]...)
	}
	return append(append([]StaleReceipt(nil), a.ring[a.next:]...), a.ring[:a.next]...)
}

// StaleCounts returns how many results were refused, by reason, since the
// engine started.
func (e *Engine) StaleCounts() map[StaleReason]uint64 {
	a := &e.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[StaleReason]uint64, len(a.counts))
	for k, v := range a.counts {
		out[k] = v
	}
	for i, n := range a.known {
		if n > 0 {
			out[staleReasons[i]] = n
		}
	}
	return out
}
