package mcpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unsafe"
)

// Ledger stores everything the fence needs to survive a restart: one Record
// per normalized URI, the invalidation outbox with the position of each of
// its consumers, the counters that allocate identities (session generations,
// close epochs, request ids) and the revoked subjects.
//
// Its one write of a record is CompareAndSwap, which replaces the record and
// appends outbox entries in a single atomic step, so that a watermark can
// never rise without its version and its invalidation (or the other way
// round), whatever store sits behind it.
//
// Records are immutable once handed out: Load hands out shared pointers, and
// a writer builds a new record instead of changing one. (The memory ledger
// writes its own private copy of a record in place, under its lock, for the
// engine, and hands out immutable copies of it: memSlot.)
//
// NewMemoryLedger keeps everything in memory (the default, for an
// in-process cache); durable ledgers (package ledger/boltledger) implement
// the same methods over a transactional store, and package
// mcpsynctest/ledgertest holds every implementation to one contract. Every
// method takes a context; cancelling it abandons the call (a write either
// committed or did not).
type Ledger interface {
	// Load returns the record stored under key, or nil if there is none.
	Load(ctx context.Context, key string) (*Record, error)
	// CompareAndSwap stores next under key if the stored record's revision is
	// still prev (0 when there is no record) and appends entries to the
	// outbox, numbering them consecutively after every entry ever appended;
	// it returns the first number (0 when entries is empty).
	// next.Revision must be prev+1. When another writer got there first it
	// writes nothing and returns ok == false.
	CompareAndSwap(ctx context.Context, key string, prev uint64, next *Record, entries []OutboxEntry) (firstSeq uint64, ok bool, err error)
	// Range calls fn for every record, in key order, until fn returns false.
	// fn may call back into the ledger. Range is no snapshot: a record
	// written during the walk may be seen before or after the write, and a
	// key added during it may be missed; Export reads one instant.
	Range(ctx context.Context, fn func(key string, r *Record) bool) error

	// Next reserves n consecutive values of counter and returns the first.
	// No value is ever returned twice by a ledger and the ledgers restored
	// from its snapshots: not after a restart, not after a crash (a crash
	// leaves a gap, never a repeat), not after a rollback, since Restore
	// resumes every counter RestoreCounterGap beyond the snapshot's value
	// (LedgerSnapshot.ForRestore). Counters start at 1. A reservation
	// that would run past the top of the counter is refused with
	// ErrCounterExhausted and reserves nothing.
	Next(ctx context.Context, counter Counter, n uint64) (uint64, error)

	// Revoke stores r, replacing what is stored for r.Subject.
	Revoke(ctx context.Context, r RevokedSubject) error
	// Revoked returns every revoked subject, by subject.
	Revoked(ctx context.Context) ([]RevokedSubject, error)
	// RevokedGeneration returns a number that rises whenever a subject
	// joins the revoked set (by Revoke or Restore), and changes at no other
	// time. Every engine sharing the ledger compares it, before and after
	// each write that binds content to a subject, with the value its cached
	// set reflects and reads Revoked again when it moved, so a revocation
	// through one engine is enforced by all of them. It must be cheap: it is
	// read on every accept and lookup. Only values read from one opened
	// ledger are compared with each other.
	RevokedGeneration(ctx context.Context) (uint64, error)

	// Outbox returns up to max (<= 0: all) retained entries numbered above
	// after, in order.
	Outbox(ctx context.Context, after uint64, max int) ([]OutboxEntry, error)
	// Ack records that consumer processed every entry numbered up to and
	// including seq; positions only rise. An unknown consumer is
	// registered, no further back than the oldest retained entry. Entries
	// every registered consumer passed are discarded.
	Ack(ctx context.Context, consumer string, seq uint64) error
	// OutboxState says what the outbox holds and where each consumer is.
	OutboxState(ctx context.Context) (OutboxState, error)
	// WaitOutbox blocks until an entry numbered above after was appended,
	// or ctx is done (returning its error). It never polls.
	WaitOutbox(ctx context.Context, after uint64) error

	// Export returns the whole ledger as of one instant: every record, the
	// retained outbox, the consumers, the counters and the revoked subjects,
	// read in one transaction, so no key and no pair of keys is torn.
	Export(ctx context.Context) (LedgerSnapshot, error)
	// Restore loads snap into the ledger, which must be empty
	// (ErrLedgerNotEmpty otherwise), in one transaction, as
	// snap.ForRestore prepares it: a snapshot that contradicts itself is
	// refused (ErrSnapshotInvalid) and every counter resumes
	// RestoreCounterGap beyond the snapshot's value. Goroutines blocked in
	// WaitOutbox wake when it restored entries they wait for.
	Restore(ctx context.Context, snap LedgerSnapshot) error
}

// RestoreCounterGap is how far beyond a snapshot's value Restore resumes
// each counter. A snapshot may be older than the ledger it was taken from:
// that ledger kept handing out values after the export, and a restore (a
// rollback, a move to another store) cannot know how many. The gap makes
// the restored ledger's values disjoint from them as long as the live
// ledger handed out fewer than 2^32 of each since the export; it costs
// nothing but numbers, of which a counter has 2^64.
const RestoreCounterGap uint64 = 1 << 32

// Counter names a sequence a ledger allocates from.
type Counter string

// Counters: the identities the fence hands out, and the outbox numbering.
const (
	CounterSession    Counter = "session"
	CounterCloseEpoch Counter = "closeEpoch"
	CounterRequest    Counter = "request"
	// CounterOutbox names the outbox's numbering in the
	// ErrCounterExhausted of an append that would wrap it. It is no
	// identity counter (not in Counters, not allocated by Next): entries
	// are numbered as they are appended.
	CounterOutbox Counter = "outbox"
)

// Counters lists every counter the fence allocates from. Restore advances
// each of them, also those a snapshot does not name: the ledger it was
// taken from may have started one after the export.
var Counters = []Counter{CounterSession, CounterCloseEpoch, CounterRequest}

// RevokedSubject is the ledger's record of one revocation. Swept is set once
// every version and artifact of the subject was marked and announced; an
// engine opened on a ledger finishes any sweep a crash cut short.
type RevokedSubject struct {
	Schema  string    `json:"schema"`
	Subject string    `json:"subject"`
	At      time.Time `json:"at"`
	Engine  string    `json:"engine"`
	Swept   bool      `json:"swept"`
}

// OutboxState is the outbox's extent and its consumers' positions.
type OutboxState struct {
	// Last is the number of the newest entry ever appended (0: none).
	Last uint64 `json:"last"`
	// First is the number of the oldest retained entry; First > Last when
	// none is retained.
	First uint64 `json:"first"`
	// Dropped counts the entries the retention bound discarded before
	// every consumer passed them, and DroppedThrough is the newest of them.
	Dropped        uint64 `json:"dropped"`
	DroppedThrough uint64 `json:"droppedThrough"`
	// Consumers maps each registered consumer to its acknowledged position.
	Consumers map[string]uint64 `json:"consumers"`
}

// Lost returns the entries above pos, the position of consumer, that the
// retention bound dropped, or nil when it dropped none of them. Entries
// missing below First were either passed by every consumer (nothing lost)
// or dropped by the bound, and only the latter reach above DroppedThrough's
// start, so a position below DroppedThrough lost some.
func (s OutboxState) Lost(consumer string, pos uint64) *OutboxGapError {
	if pos < s.DroppedThrough && s.First > pos+1 {
		return &OutboxGapError{Consumer: consumer, From: pos + 1, Through: s.First - 1}
	}
	return nil
}

// DefaultOutboxRetention is how many entries a ledger keeps, at most, when
// its options do not say.
const DefaultOutboxRetention = 1 << 16

// LedgerOptions configure a ledger; nil means defaults.
type LedgerOptions struct {
	// OutboxRetention bounds the entries the outbox keeps: beyond it the
	// oldest are dropped and counted (OutboxState.Dropped), and a consumer
	// that had not passed them gets an *OutboxGapError. 0 means
	// DefaultOutboxRetention; a negative value turns the outbox off (a cache
	// that needs no consumer keeps nothing, and entries are still numbered).
	OutboxRetention int
}

// Retention returns the bound o sets: how many entries to keep.
func (o *LedgerOptions) Retention() uint64 {
	switch {
	case o == nil || o.OutboxRetention == 0:
		return DefaultOutboxRetention
	case o.OutboxRetention < 0:
		return 0
	}
	return uint64(o.OutboxRetention)
}

// Record is the ledger's row for one normalized URI: its subscription
// generation, the fence of that generation, and the version consumers see.
// Its stored form is EncodeRecord's.
type Record struct {
	// Revision rises by one at every write; CompareAndSwap compares it.
	Revision uint64 `json:"revision"`

	// Sub describes the current subscription generation; nil while the URI
	// has only been discovered.
	Sub   *SubscriptionInfo `json:"sub,omitempty"`
	State SubscriptionState `json:"state"`
	// LastNotificationSeq counts resources/updated pulses seen for this
	// generation (a local counter: the protocol has none).
	LastNotificationSeq uint64 `json:"lastNotificationSeq,omitempty"`
	// LastAcceptedDigest is the digest of the newest read this generation
	// accepted (changed or not).
	LastAcceptedDigest string `json:"lastAcceptedDigest,omitempty"`

	// The fence of the current subscription generation.
	LastIssued   uint64 `json:"lastIssued"`             // highest read ordinal handed out
	Watermark    uint64 `json:"watermark"`              // highest read ordinal that passed the fence
	CloseOrdinal uint64 `json:"closeOrdinal,omitempty"` // LastIssued when the close began
	CloseEpoch   uint64 `json:"closeEpoch,omitempty"`   // non-zero once the close began
	// ClosedGeneration is the newest subscription generation whose close
	// began; results of it and of older generations are STALE_AFTER_CLOSE.
	ClosedGeneration uint64 `json:"closedGeneration,omitempty"`
	// ValidatedAt is when the newest read that confirmed Current (changed
	// or unchanged) was issued.
	ValidatedAt time.Time `json:"validatedAt,omitzero"`
	// NotFoundAt is when the newest fenced not-found was accepted; only
	// evidence gathered since then may confirm its tombstone.
	NotFoundAt time.Time `json:"notFoundAt,omitzero"`
	// TombstonedAt is when the URI's deletion was last confirmed; zero once
	// a read found it again. A not-found while it is set is the tombstone
	// standing, whatever version (if any) it deleted.
	TombstonedAt time.Time `json:"tombstonedAt,omitzero"`
	// NotFoundOrdinal is the read ordinal of that not-found.
	NotFoundOrdinal uint64 `json:"notFoundOrdinal,omitempty"`
	// Corroboration is the deletion evidence gathered since that not-found
	// short of proof, waiting for a second not-found (deletion.go); nil
	// when none is under way.
	Corroboration *Corroboration `json:"corroboration,omitempty"`
	// Unlisted is the URI's absence from clean scans, as DeletionUnlisted
	// counts it (deletion.go); nil while the newest scan listed it. It
	// outlives subscription generations.
	Unlisted *Unlisting `json:"unlisted,omitempty"`
	// Tickets are issued and unsettled, each above Watermark, ascending.
	Tickets []Ticket `json:"tickets,omitempty"`

	// Current is the newest version that passed the fence, of any generation;
	// nil if none did. Its Status says whether it may be served.
	Current *StoredVersion `json:"current,omitempty"`
	// Artifacts are what consumers recorded as derived from versions of this
	// URI (RecordDerived); revocation invalidates them.
	Artifacts []DerivedArtifact `json:"artifacts,omitempty"`

	// slot is set only on the memory ledger's private copies of a key's
	// record (memSlot), which it writes in place and never hands out; every
	// record a caller can hold has it nil.
	slot *memSlot
}

func (r *Record) revision() uint64 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// clone returns a copy of r, one revision on, for a writer to change.
func (r *Record) clone() *Record {
	c := *r
	c.Revision++
	c.slot = nil
	return &c
}

// storedRecord is a record as stored: the schema first, so that a reader of a
// later format refuses it instead of misreading it.
type storedRecord struct {
	Schema string `json:"schema"`
	*Record
}

// EncodeRecord returns the stored form of r: JSON with a "schema" of
// SchemaLedgerRecord beside the fields of Record. Durable ledgers store it
// as is.
func EncodeRecord(r *Record) ([]byte, error) {
	return json.Marshal(storedRecord{Schema: SchemaLedgerRecord, Record: r})
}

// DecodeRecord reads EncodeRecord's form, refusing any other schema with
// ErrLedgerSchema and bytes that are not its JSON with ErrLedgerCorrupt.
func DecodeRecord(b []byte) (*Record, error) {
	s := storedRecord{Record: new(Record)}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: decode record: %w", ErrLedgerCorrupt, err)
	}
	if s.Schema != SchemaLedgerRecord {
		return nil, fmt.Errorf("%w: record schema %q, want %q", ErrLedgerSchema, s.Schema, SchemaLedgerRecord)
	}
	return s.Record, nil
}

// EncodeOutboxEntry and DecodeOutboxEntry are the stored form of an outbox
// entry: its JSON, which carries its schema (SchemaInvalidation).
func EncodeOutboxEntry(e OutboxEntry) ([]byte, error) { return json.Marshal(e) }

// DecodeOutboxEntry reads EncodeOutboxEntry's form, refusing any other
// schema with ErrLedgerSchema and bytes that are not its JSON with
// ErrLedgerCorrupt.
func DecodeOutboxEntry(b []byte) (OutboxEntry, error) {
	var e OutboxEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return OutboxEntry{}, fmt.Errorf("%w: decode outbox entry: %w", ErrLedgerCorrupt, err)
	}
	if e.Schema != SchemaInvalidation {
		return OutboxEntry{}, fmt.Errorf("%w: outbox entry schema %q, want %q", ErrLedgerSchema, e.Schema, SchemaInvalidation)
	}
	return e, nil
}

// StoredVersion is a version with its contents and whether it may be served.
type StoredVersion struct {
	Version  ResourceVersion `json:"version"`
	Contents []Content       `json:"contents,omitempty"`
	Status   VersionStatus   `json:"status"`
}

// VersionStatus says whether the current version of a URI may be served.
type VersionStatus string

// Version statuses. Only VersionServed is ever returned by Lookup.
const (
	VersionServed           VersionStatus = "SERVED"
	VersionTombstonePending VersionStatus = "TOMBSTONE_PENDING"
	VersionTombstoned       VersionStatus = "TOMBSTONED"
	VersionQuarantined      VersionStatus = "QUARANTINED"
	VersionRevoked          VersionStatus = "REVOKED"
)

// ledgerChunk is how many keys Range and Export read under the lock at once.
var ledgerChunk = 1024

// keyBlock is the most keys one block of a keyIndex holds.
const keyBlock = 512

// keyIndex holds a set of keys in order, in blocks of at most keyBlock
// keys, so that adding a key moves at most a block's keys and the list of
// blocks, never every key.
type keyIndex struct {
	blocks [][]string // each sorted and not empty; every key of one below every key of the next
}

// add adds k, which must not be in x.
func (x *keyIndex) add(k string) {
	if len(x.blocks) == 0 {
		x.blocks = [][]string{{k}}
		return
	}
	i := sort.Search(len(x.blocks), func(i int) bool {
		b := x.blocks[i]
		return b[len(b)-1] >= k
	})
	if i == len(x.blocks) {
		i--
	}
	b := x.blocks[i]
	j, _ := slices.BinarySearch(b, k)
	b = slices.Insert(b, j, k)
	if len(b) <= keyBlock {
		x.blocks[i] = b
		return
	}
	half := len(b) / 2
	x.blocks[i] = slices.Clip(b[:half])
	x.blocks = slices.Insert(x.blocks, i+1, slices.Clone(b[half:]))
}

// after appends to dst, in order, up to max keys above k (every key from
// the first when from is false) and returns it.
func (x *keyIndex) after(dst []string, k string, from bool, max int) []string {
	i, j := 0, 0
	if from {
		i = sort.Search(len(x.blocks), func(i int) bool {
			b := x.blocks[i]
			return b[len(b)-1] > k
		})
		if i < len(x.blocks) {
			b := x.blocks[i]
			j = sort.Search(len(b), func(j int) bool { return b[j] > k })
		}
	}
	for ; i < len(x.blocks) && len(dst) < max; i, j = i+1, 0 {
		b := x.blocks[i][j:]
		dst = append(dst, b[:min(len(b), max-len(dst))]...)
	}
	return dst
}

// exportView is an export in progress: the record, as of the export's
// instant, of every key written since (nil for a key that had none).
type exportView struct {
	before map[string]*Record
}

// subjectsOf returns the subjects a revocation of which changes r (see
// revokeRecord): the subject of its current version, unless that version is
// revoked already, and those of its derived artifacts.
func subjectsOf(r *Record) []string {
	if r == nil {
		return nil
	}
	var out []string
	if c := r.Current; c != nil && c.Status != VersionRevoked {
		out = append(out, c.Version.Subject)
	}
	for _, a := range r.Artifacts {
		if !slices.Contains(out, a.Version.Subject) {
			out = append(out, a.Version.Subject)
		}
	}
	return out
}

// sameSubjects reports, cheaply, that a and b certainly have the same
// subjectsOf: most writes (an issue, an accept) keep the artifacts of the
// record they replace, and so its list.
func sameSubjects(a, b *Record) bool {
	if a == nil || b == nil {
		return a == b
	}
	ca, cb := a.Current, b.Current
	switch {
	case (ca == nil) != (cb == nil):
		return false
	case ca != nil && (ca.Version.Subject != cb.Version.Subject || (ca.Status == VersionRevoked) != (cb.Status == VersionRevoked)):
		return false
	}
	return len(a.Artifacts) == len(b.Artifacts) && (len(a.Artifacts) == 0 || &a.Artifacts[0] == &b.Artifacts[0])
}

// LedgerIndex is implemented by ledgers that answer, without reading every
// record, what the engine's passes over the whole ledger look for: the
// records a revocation changes, the unknown closes a new session ends, the
// subjects revoked since the engine last looked. The engine uses it when
// its Ledger implements it, and walks every record (Range) when not, so a
// ledger that implements it must answer exactly what that walk would
// (mcpsynctest/ledgertest checks it). Each answer holds every write
// committed before the call (a write that returned is in it) and none
// rolled back.
type LedgerIndex interface {
	// SubjectKeys returns, in key order, every key whose record a
	// revocation of subject changes: the keys whose Record.Subjects holds
	// subject.
	SubjectKeys(ctx context.Context, subject string) ([]string, error)
	// UnknownCloses returns, in key order, every key whose record is in
	// UNSUBSCRIBE_UNKNOWN, and that record (recs[i] is keys[i]'s), read at
	// one instant.
	UnknownCloses(ctx context.Context) (keys []string, recs []*Record, err error)
	// RevokedAfter returns, in the order they joined the revoked set, the
	// subjects that joined it after RevokedGeneration was gen, and the
	// generation that counts them. On a ledger that implements
	// LedgerIndex, RevokedGeneration is the number of subjects that joined
	// (Restore joins a snapshot's in its order), so they are the joins
	// numbered above gen. A gen above the ledger's generation is an error.
	RevokedAfter(ctx context.Context, gen uint64) (subjects []string, now uint64, err error)
}

// DeferringLedger is implemented by durable ledgers that can take a write
// the fence needs no durability for without a commit of its own. The
// engine defers only writes that every crash makes moot: a read ticket and
// its settling without an answer (a ticket is refused after any restart:
// its engine and session generation are gone), a pulse, and the opening and
// activating of a subscription generation whose record a restart resumes
// anyway (docs/design.md, "What must be durable when"). Accepts, tombstones,
// closes, revocations and anything with an outbox entry are never deferred.
type DeferringLedger interface {
	// CompareAndSwapDeferred is CompareAndSwap of a write with no outbox
	// entries that need not be durable when it returns. Once it returned
	// ok, next is key's record for every call made after it (Load, Range,
	// Export, the LedgerIndex answers, compare-and-swap of revision
	// next.Revision). It is durable once the next durable write of key,
	// made from it, is (that write stores the key's state whole), or once
	// Range, Export or a LedgerIndex answer returned, or the ledger was
	// closed. A crash may lose it, but never keeps a later write of key
	// without it. A ledger may also write it durably at once.
	CompareAndSwapDeferred(ctx context.Context, key string, prev uint64, next *Record) (ok bool, err error)
}

// Subjects returns the subjects a revocation of which changes r
// (RevokeSubject), each once: the subject of its current version, unless that
// version is revoked already, then those of its derived artifacts. A
// LedgerIndex keeps its records by them; a nil r has none.
func (r *Record) Subjects() []string { return subjectsOf(r) }

var _ LedgerIndex = (*memoryLedger)(nil)

// The memory ledger never blocks on I/O, so a context can only have ended
// before a call: each method then refuses, like a durable ledger's, so that a
// caller's cancellation means the same on every ledger.

// memSlot holds the memory ledger's private copy of one key's record: rec,
// the key's record once the ledger wrote it in place, with its own ticket
// array and its version in ver when the ledger wrote that too. A write in
// place (memTx) is built in the ledger's draft, a memSlot of its own that
// no key owns, and copied into the key's slot when it is stored, so that
// the map entry stays as it is: a write allocates no record, no ticket
// array and no version, and a key costs a record and a version, as one
// written by compare-and-swap does.
//
// Nothing outside the ledger ever sees a private copy: Load, Range, Export
// and UnknownCloses hand out an immutable copy with its own tickets and
// version (publishLocked), and the record an export keeps of a key written
// during it is such a copy too.
type memSlot struct {
	rec Record
	// tickets is rec's own ticket array, kept while rec has no ticket
	// (Tickets is then nil, as in every record); no other slot's or the
	// draft's.
	tickets []Ticket
	ver     StoredVersion
}

// versionFor returns where the step that writes next, a copy of cur, puts
// a new current version: on the memory ledger's draft, its version cell
// unless next or cur already points to it; otherwise a new StoredVersion.
func versionFor(cur, next *Record) *StoredVersion {
	if s := next.slot; s != nil {
		if v := &s.ver; v != cur.Current && v != next.Current {
			return v
		}
	}
	return new(StoredVersion)
}

// memTx is a write in place on the memory ledger, from lock, which takes
// the ledger's lock, and holding, to commit or end, which let it go. It lives on its
// holder's stack; once the lock is gone, its holder must keep nothing it
// handed out.
//
// Its holder reads cur, the key's record (nil when there is none), which
// it must not change; it may call prepare for next, a private copy of cur
// one revision on (the draft, memSlot), change it in place, append the
// outbox entries
// of the write to entries(), and commit, which stores next and them in one
// step, exactly as CompareAndSwap(key, cur.Revision, next, entries) would.
// What next points to (its version, subscription, corroboration,
// artifacts) the holder replaces, never modifies; a new version goes where
// versionFor says. It may change next's tickets in place, but must not give
// next a slice of cur's. It must not call the ledger.
//
// The record is never seen half written: nothing reads it without the
// lock, and next is not the key's record until commit.
type memTx struct {
	l    *memoryLedger
	key  string
	cur  *Record
	next *Record  // once prepared: the draft's record
	slot *memSlot // once prepared: the key's slot
	held bool
}

// end lets the ledger's lock go, writing nothing commit did not; after
// commit it does nothing.
func (tx *memTx) end() {
	if !tx.held {
		return
	}
	tx.held = false
	l := tx.l
	// The scratch and the draft keep their room; what they point to stays
	// reachable until the next write overwrites them.
	l.scratch = l.scratch[:0]
	tx.cur, tx.next, tx.slot = nil, nil, nil
	l.mu.Unlock()
}

// entries is where the write appends its outbox entries: the ledger's
// scratch, which only the holder of its lock touches.
func (tx *memTx) entries() *[]OutboxEntry { return &tx.l.scratch }

// prepare returns next, the private copy of cur (which must not be nil)
// one revision on that the write changes: the ledger's draft, with tickets
// of its own.
func (tx *memTx) prepare() *Record {
	if tx.next != nil {
		return tx.next
	}
	l, cur := tx.l, tx.cur
	s := cur.slot
	if s == nil {
		if s = l.slots[tx.key]; s == nil {
			s = new(memSlot)
			l.slots[tx.key] = s
		}
	}
	d := &l.draft
	next := &d.rec
	*next = *cur
	next.slot = d
	next.Revision = cur.Revision + 1
	next.Tickets = append(d.tickets[:0], cur.Tickets...)
	if cap(next.Tickets) > cap(d.tickets) {
		d.tickets = next.Tickets[:0]
	}
	tx.next, tx.slot = next, s
	return next
}

// commit stores next as the key's record and appends entries to the
// outbox, in one step, stamping each with engine, and lets the lock go. It
// returns the number of the first entry (0: none).
func (tx *memTx) commit(engine string) (uint64, error) {
	defer tx.end()
	l, cur, next, s, d := tx.l, tx.cur, tx.next, tx.slot, &tx.l.draft
	if next == nil {
		return 0, fmt.Errorf("mcpsync: store %s: a write of no record", tx.key)
	}
	entries := l.scratch
	if _, err := Reserve(CounterOutbox, l.out.last, uint64(len(entries))); err != nil {
		return 0, errorf("store %s: %w", tx.key, err)
	}
	// storeLocked, knowing the key's record: cur, which is read here for
	// the last time (the key's slot is then overwritten).
	l.keepLocked(tx.key, cur)
	l.indexLocked(tx.key, cur, next)
	t := next.Tickets
	if overlaps(t, cur.Tickets) {
		t = slices.Clone(t) // not the draft's: never leave a record sharing them
	}
	if len(t) == 0 {
		t = nil
	} else if unsafe.SliceData(t) == unsafe.SliceData(d.tickets) {
		// The key takes the draft's array, the draft the key's old one.
		d.tickets, s.tickets = s.tickets[:0], t[:0]
	} else {
		s.tickets = t[:0] // grown, or copied: the key's own now
	}
	s.rec = *next
	s.rec.slot, s.rec.Tickets = s, t
	if next.Current == &d.ver {
		s.ver = d.ver
		s.rec.Current = &s.ver
	}
	if cur != &s.rec {
		l.records[tx.key] = &s.rec
	}
	if len(entries) == 0 {
		return 0, nil
	}
	first := l.out.last + 1
	for i := range entries {
		entries[i].Seq = l.out.last + 1
		entries[i].Engine = engine
		l.out.append(&entries[i], next.Sub)
	}
	l.trimLocked()
	l.wakeLocked()
	return first, nil
}

// overlaps reports whether a and b share any of their backing array.
func overlaps(a, b []Ticket) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	size := unsafe.Sizeof(Ticket{})
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b))*size && b0 < a0+uintptr(cap(a))*size
}

func minPosition(consumers map[string]uint64) uint64 {
	first := true
	var low uint64
	for _, p := range consumers {
		if first || p < low {
			low, first = p, false
		}
	}
	return low
}

// Reserve returns the counter's value after reserving n values beyond last,
// or ErrCounterExhausted when that would pass the top of the counter (a
// wrap would hand out every value again). Ledgers implement Next with it.
func Reserve(c Counter, last, n uint64) (uint64, error) {
	if n > math.MaxUint64-last {
		return 0, fmt.Errorf("%w: %s is at %d, %d more would wrap it", ErrCounterExhausted, c, last, n)
	}
	return last + n, nil
}

func sortRevoked(all []RevokedSubject) []RevokedSubject {
	slices.SortFunc(all, func(a, b RevokedSubject) int { return strings.Compare(a.Subject, b.Subject) })
	if all == nil {
		all = []RevokedSubject{}
	}
	return all
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// LedgerSnapshot is a ledger's whole state: every record (watermarks,
// issued tickets, close ordinals and epochs, current versions, derived
// artifacts), the retained outbox and its consumers, the identity counters
// and the revoked subjects. It marshals to JSON and restores into any kind
// of ledger (Ledger.Restore), so a rollback, a restart or a move between
// stores carries the fence with it.
type LedgerSnapshot struct {
	Schema   string             `json:"schema"`
	Records  map[string]*Record `json:"records"`
	Counters map[Counter]uint64 `json:"counters"`
	Revoked  []RevokedSubject   `json:"revoked"`
	// Outbox holds the retained entries, numbered consecutively.
	Outbox []OutboxEntry `json:"outbox"`
	State  OutboxState   `json:"outboxState"`
	// Acked is the single consumer position of a v1 snapshot.
	Acked uint64 `json:"acked,omitempty"`
}

// Upgrade returns snap in the current schema. A v1 snapshot has no
// counters: they are recovered from the records (the highest close epoch,
// request id and session generation any of them names), its one consumer
// becomes DefaultConsumer, and its outbox numbering continues.
func (snap LedgerSnapshot) Upgrade() (LedgerSnapshot, error) {
	switch snap.Schema {
	case SchemaLedgerSnapshot:
		return snap, nil
	case SchemaLedgerSnapshotV1:
	default:
		return LedgerSnapshot{}, fmt.Errorf("%w: ledger snapshot schema %q, want %q", ErrLedgerSchema, snap.Schema, SchemaLedgerSnapshot)
	}
	up := snap
	up.Schema = SchemaLedgerSnapshot
	up.Counters = make(map[Counter]uint64)
	raise := func(c Counter, v uint64) { up.Counters[c] = max64(up.Counters[c], v) }
	for _, r := range snap.Records {
		if r == nil {
			continue
		}
		raise(CounterCloseEpoch, r.CloseEpoch)
		for _, t := range r.Tickets {
			raise(CounterRequest, t.RequestID)
			raise(CounterSession, t.SessionGeneration)
		}
		if r.Sub != nil {
			raise(CounterSession, r.Sub.SessionGeneration)
		}
	}
	last := snap.Acked
	if n := len(snap.Outbox); n > 0 {
		last = snap.Outbox[n-1].Seq
	}
	up.State = OutboxState{Last: last, First: snap.Acked + 1, Consumers: map[string]uint64{DefaultConsumer: snap.Acked}}
	up.Acked = 0
	return up, nil
}

// ForRestore validates snap and returns it as a ledger restores it: every
// counter of Counters and of snap resumes RestoreCounterGap beyond the
// snapshot's value. Every Restore uses it, so a ledger restored from a
// snapshot older than its source never hands out a value the source handed
// out after the export (see Ledger.Next).
//
// A snapshot is refused with ErrSnapshotInvalid, before anything of it is
// stored, when it contradicts itself: a record without a revision, an
// outbox that is not numbered consecutively up to its last number, a
// consumer or a dropped range beyond that number, a record naming a session
// generation, close epoch or request id its counters never handed out, a
// revocation of no subject, entries missing before the first retained one
// that a consumer had not passed and the retention bound did not drop. A
// counter or an outbox numbering within RestoreCounterGap of its top is
// refused with ErrCounterExhausted.
func (snap LedgerSnapshot) ForRestore() (LedgerSnapshot, error) {
	if snap.Schema != SchemaLedgerSnapshot {
		return LedgerSnapshot{}, fmt.Errorf("%w: ledger snapshot schema %q, want %q (Upgrade it first)", ErrLedgerSchema, snap.Schema, SchemaLedgerSnapshot)
	}
	invalid := func(format string, args ...any) (LedgerSnapshot, error) {
		return LedgerSnapshot{}, fmt.Errorf("%w: "+format, append([]any{ErrSnapshotInvalid}, args...)...)
	}
	last := snap.State.Last
	for i, e := range snap.Outbox {
		if i > 0 && e.Seq != snap.Outbox[i-1].Seq+1 || e.Seq == 0 || e.Seq > last {
			return invalid("outbox entry %d numbered %d out of order (last %d)", i, e.Seq, last)
		}
	}
	// Entries before the first retained one may be gone (acknowledged or
	// dropped); those after it up to Last must all be there, or a reader
	// waits for entries that never come.
	if n := len(snap.Outbox); n > 0 && snap.Outbox[n-1].Seq != last {
		return invalid("outbox ends at %d, short of its last entry %d", snap.Outbox[n-1].Seq, last)
	}
	for name, pos := range snap.State.Consumers {
		if pos > last {
			return invalid("consumer %q at %d, beyond the last entry %d", name, pos, last)
		}
	}
	if snap.State.DroppedThrough > last || snap.State.Dropped > snap.State.DroppedThrough {
		return invalid("dropped %d through %d, last entry %d", snap.State.Dropped, snap.State.DroppedThrough, last)
	}
	// An entry before the first retained one is gone because every
	// consumer passed it or the retention bound dropped it (and said so);
	// any other gap is a loss nobody would be told of.
	gone := last
	if len(snap.Outbox) > 0 {
		gone = snap.Outbox[0].Seq - 1
	}
	for name, pos := range snap.State.Consumers {
		if pos < gone && snap.State.DroppedThrough < gone {
			return invalid("entries %d through %d are missing: consumer %q had not passed them, and none were dropped past %d",
				pos+1, gone, name, snap.State.DroppedThrough)
		}
	}
	if _, err := Reserve(CounterOutbox, last, RestoreCounterGap); err != nil {
		return LedgerSnapshot{}, err
	}
	named := func(c Counter, v uint64, what, key string) error {
		if v > snap.Counters[c] {
			return fmt.Errorf("%w: record %q names %s %d, beyond its counter %d", ErrSnapshotInvalid, key, what, v, snap.Counters[c])
		}
		return nil
	}
	for key, r := range snap.Records {
		if r == nil || r.Revision == 0 {
			return invalid("record %q has no revision", key)
		}
		errs := []error{named(CounterCloseEpoch, r.CloseEpoch, "close epoch", key)}
		if r.Sub != nil {
			errs = append(errs, named(CounterSession, r.Sub.SessionGeneration, "session generation", key))
		}
		for _, t := range r.Tickets {
			errs = append(errs, named(CounterSession, t.SessionGeneration, "session generation", key),
				named(CounterRequest, t.RequestID, "request id", key))
		}
		if err := errors.Join(errs...); err != nil {
			return LedgerSnapshot{}, err
		}
	}
	for _, r := range snap.Revoked {
		if r.Subject == "" {
			return invalid("a revocation of no subject")
		}
	}
	out := snap
	out.Counters = make(map[Counter]uint64, len(Counters))
	for _, c := range Counters {
		out.Counters[c] = 0
	}
	maps.Copy(out.Counters, snap.Counters)
	for c, v := range out.Counters {
		resumed, err := Reserve(c, v, RestoreCounterGap)
		if err != nil {
			return LedgerSnapshot{}, err
		}
		out.Counters[c] = resumed
	}
	return out, nil
}

// ExportLedger reads l into a snapshot, consistent across keys (see
// Ledger.Export).
func ExportLedger(ctx context.Context, l Ledger) (LedgerSnapshot, error) {
	return l.Export(ctx)
}

// RestoreLedger loads snap, of this schema or an older one, into the empty
// ledger l, of any kind. An Engine opened on it continues outbox numbers
// from where they were and generations, close epochs and request ids
// RestoreCounterGap beyond them (the ledger exported may have gone on), and
// starts with no live session: every ticket issued before the export is
// refused, whatever it answers.
func RestoreLedger(ctx context.Context, l Ledger, snap LedgerSnapshot) error {
	up, err := snap.Upgrade()
	if err != nil {
		return err
	}
	return l.Restore(ctx, up)
}
