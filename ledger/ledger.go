// Package ledger is the contract a store of the fence fulfils: the Ledger
// interface, the records and outbox entries it keeps, its counters,
// snapshots and errors, and the memory ledger (NewMemory).
package ledger

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
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
// NewMemory keeps everything in memory (the default, for an
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
	// (Snapshot.ForRestore). Counters start at 1. A reservation
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
	Export(ctx context.Context) (Snapshot, error)
	// Restore loads snap into the ledger, which must be empty
	// (ErrLedgerNotEmpty otherwise), in one transaction, as
	// snap.ForRestore prepares it: a snapshot that contradicts itself is
	// refused (ErrSnapshotInvalid) and every counter resumes
	// RestoreCounterGap beyond the snapshot's value. Goroutines blocked in
	// WaitOutbox wake when it restored entries they wait for.
	Restore(ctx context.Context, snap Snapshot) error
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

// Options configure a ledger; nil means defaults.
type Options struct {
	// OutboxRetention bounds the entries the outbox keeps: beyond it the
	// oldest are dropped and counted (OutboxState.Dropped), and a consumer
	// that had not passed them gets an *OutboxGapError. 0 means
	// DefaultOutboxRetention; a negative value turns the outbox off (a cache
	// that needs no consumer keeps nothing, and entries are still numbered).
	OutboxRetention int
}

// Retention returns the bound o sets: how many entries to keep.
func (o *Options) Retention() uint64 {
	switch {
	case o == nil || o.OutboxRetention == 0:
		return DefaultOutboxRetention
	case o.OutboxRetention < 0:
		return 0
	}
	return uint64(o.OutboxRetention)
}

// Index is implemented by ledgers that answer, without reading every
// record, what the engine's passes over the whole ledger look for: the
// records a revocation changes, the unknown closes a new session ends, the
// subjects revoked since the engine last looked. The engine uses it when
// its Ledger implements it, and walks every record (Range) when not, so a
// ledger that implements it must answer exactly what that walk would
// (mcpsynctest/ledgertest checks it). Each answer holds every write
// committed before the call (a write that returned is in it) and none
// rolled back.
type Index interface {
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
	// Index, RevokedGeneration is the number of subjects that joined
	// (Restore joins a snapshot's in its order), so they are the joins
	// numbered above gen. A gen above the ledger's generation is an error.
	RevokedAfter(ctx context.Context, gen uint64) (subjects []string, now uint64, err error)
}

// Deferring is implemented by durable ledgers that can take a write
// the fence needs no durability for without a commit of its own. The
// engine defers only writes that every crash makes moot: a read ticket and
// its settling without an answer (a ticket is refused after any restart:
// its engine and session generation are gone), a pulse, and the opening and
// activating of a subscription generation whose record a restart resumes
// anyway (docs/design.md, "What must be durable when"). Accepts, tombstones,
// closes, revocations and anything with an outbox entry are never deferred.
type Deferring interface {
	// CompareAndSwapDeferred is CompareAndSwap of a write with no outbox
	// entries that need not be durable when it returns. Once it returned
	// ok, next is key's record for every call made after it (Load, Range,
	// Export, the Index answers, compare-and-swap of revision
	// next.Revision). It is durable once the next durable write of key,
	// made from it, is (that write stores the key's state whole), or once
	// Range, Export or a Index answer returned, or the ledger was
	// closed. A crash may lose it, but never keeps a later write of key
	// without it. A ledger may also write it durably at once.
	CompareAndSwapDeferred(ctx context.Context, key string, prev uint64, next *Record) (ok bool, err error)
}

// Batching is implemented by ledgers that commit writes made at once
// together (group commit) and can be handed many of them in one call, so
// that writes one caller decides together share commits without a
// goroutine each. The engine hands it the first subscriptions a
// Client.SubscribeAll opens, which must be durable before their requests
// leave.
type Batching interface {
	// CompareAndSwapAll makes each of swaps as CompareAndSwap would, at
	// once: each is decided on its own (results[i] is swaps[i]'s: refused
	// when its revision moved, failed alone when its write fails), and
	// they may share commits. A key appears at most once in swaps (a
	// second is refused with an error). It returns once every one was
	// decided: each that returned OK is durable.
	CompareAndSwapAll(ctx context.Context, swaps []Swap) (results []SwapResult)
	// LoadAll returns what Load returns for each of keys (records[i] is
	// keys[i]'s, nil for a key it holds no record of), read at once: the
	// reads around a batch cost what its writes do, not a round trip a
	// key. An error fails every read.
	LoadAll(ctx context.Context, keys []string) (records []*Record, err error)
}

// Swap is one write of CompareAndSwapAll: the arguments of a
// CompareAndSwap.
type Swap struct {
	Key     string
	Prev    uint64
	Next    *Record
	Entries []OutboxEntry
}

// SwapResult is what CompareAndSwap returns, for one Swap.
type SwapResult struct {
	FirstSeq uint64
	OK       bool
	Err      error
}

// LoadEach reads keys one at a time with l's Load: the LoadAll of a
// ledger whose reads cost no round trip (the memory ledger, a ledger
// that caches its records).
func LoadEach(ctx context.Context, l Ledger, keys []string) ([]*Record, error) {
	records := make([]*Record, len(keys))
	for i, key := range keys {
		r, err := l.Load(ctx, key)
		if err != nil {
			return nil, err
		}
		records[i] = r
	}
	return records, nil
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
