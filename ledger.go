package mcpsync

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Ledger stores the engine's durable state: one Record per normalized URI and
// the invalidation outbox. Its one write is CompareAndSwap, which replaces a
// record and appends outbox entries in a single atomic step, so that a
// watermark can never rise without its version and its invalidation (or the
// other way round), whatever store sits behind it.
//
// Records are immutable once stored: Load hands out shared pointers, and a
// writer builds a new record instead of changing one. The default ledger,
// NewMemoryLedger, keeps everything in memory; a durable ledger implements the
// same methods over a transactional store.
type Ledger interface {
	// Load returns the record stored under key, or nil if there is none.
	Load(key string) (*Record, error)
	// CompareAndSwap stores next under key if the stored record's revision is
	// still prev (0 when there is no record) and appends entries to the
	// outbox, numbering them consecutively; it returns the first number (0
	// when entries is empty).
	// next.Revision must be prev+1. When another writer got there first it
	// writes nothing and returns ok == false.
	CompareAndSwap(key string, prev uint64, next *Record, entries []OutboxEntry) (firstSeq uint64, ok bool, err error)
	// Range calls fn for every record, in key order, until fn returns false.
	Range(fn func(key string, r *Record) bool) error
	// Outbox returns up to max entries numbered above after, in order.
	// Entries already acknowledged are never returned.
	Outbox(after uint64, max int) ([]OutboxEntry, error)
	// Ack discards every entry numbered up to and including seq.
	Ack(seq uint64) error
	// Acked returns the highest acknowledged entry number.
	Acked() (uint64, error)
}

// Record is the ledger's row for one normalized URI: its subscription
// generation, the fence of that generation, and the version consumers see.
type Record struct {
	// Revision rises by one at every write; CompareAndSwap compares it.
	Revision uint64

	// Sub describes the current subscription generation; nil while the URI
	// has only been discovered.
	Sub   *SubscriptionInfo
	State SubscriptionState
	// LastNotificationSeq counts resources/updated pulses seen for this
	// generation (a local counter: the protocol has none).
	LastNotificationSeq uint64
	// LastAcceptedDigest is the digest of the newest read this generation
	// accepted (changed or not).
	LastAcceptedDigest string

	// The fence of the current subscription generation.
	LastIssued   uint64 // highest read ordinal handed out
	Watermark    uint64 // highest read ordinal that passed the fence
	CloseOrdinal uint64 // LastIssued when the close began
	CloseEpoch   uint64 // non-zero once the close began
	// ClosedGeneration is the newest subscription generation whose close
	// began; results of it and of older generations are STALE_AFTER_CLOSE.
	ClosedGeneration uint64
	// ValidatedAt is when a read last confirmed Current (accepted,
	// changed or unchanged).
	ValidatedAt time.Time
	// NotFoundAt is when the newest fenced not-found was accepted; only
	// evidence gathered since then may confirm its tombstone.
	NotFoundAt time.Time
	Tickets    []Ticket // issued and unsettled, each above Watermark, ascending

	// Current is the newest version that passed the fence, of any generation;
	// nil if none did. Its Status says whether it may be served.
	Current *StoredVersion
	// Artifacts are what consumers recorded as derived from versions of this
	// URI (RecordDerived); revocation invalidates them.
	Artifacts []DerivedArtifact
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
	return &c
}

// StoredVersion is a version with its contents and whether it may be served.
type StoredVersion struct {
	Version  ResourceVersion
	Contents []Content
	Status   VersionStatus
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

// NewMemoryLedger returns a Ledger kept in memory.
func NewMemoryLedger() Ledger {
	return &memoryLedger{records: make(map[string]*Record)}
}

type memoryLedger struct {
	mu      sync.Mutex         // protects every field below
	records map[string]*Record // records are never modified once stored
	outbox  []OutboxEntry      // entries ascending by Seq; those before head are acknowledged
	head    int
	lastSeq uint64 // number of the newest entry ever appended
	acked   uint64
}

func (l *memoryLedger) Load(key string) (*Record, error) {
	l.mu.Lock()
	r := l.records[key]
	l.mu.Unlock()
	return r, nil
}

func (l *memoryLedger) CompareAndSwap(key string, prev uint64, next *Record, entries []OutboxEntry) (uint64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records[key].revision() != prev {
		return 0, false, nil
	}
	l.records[key] = next
	if len(entries) == 0 {
		return 0, true, nil
	}
	first := l.lastSeq + 1
	for _, e := range entries {
		l.lastSeq++
		e.Seq = l.lastSeq
		l.outbox = append(l.outbox, e)
	}
	return first, true, nil
}

func (l *memoryLedger) Range(fn func(string, *Record) bool) error {
	l.mu.Lock()
	keys := make([]string, 0, len(l.records))
	for k := range l.records {
		keys = append(keys, k)
	}
	recs := make([]*Record, len(keys))
	sort.Strings(keys)
	for i, k := range keys {
		recs[i] = l.records[k]
	}
	l.mu.Unlock()
	// fn runs without the lock: it may call back into the ledger.
	for i, k := range keys {
		if !fn(k, recs[i]) {
			break
		}
	}
	return nil
}

func (l *memoryLedger) Outbox(after uint64, max int) ([]OutboxEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pending := l.outbox[l.head:]
	i := sort.Search(len(pending), func(i int) bool { return pending[i].Seq > after })
	end := len(pending)
	if max > 0 && end-i > max {
		end = i + max
	}
	return append([]OutboxEntry(nil), pending[i:end]...), nil
}

func (l *memoryLedger) Ack(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.lastSeq {
		seq = l.lastSeq
	}
	if seq <= l.acked {
		return nil
	}
	l.acked = seq
	pending := l.outbox[l.head:]
	l.head += sort.Search(len(pending), func(i int) bool { return pending[i].Seq > seq })
	// Compact once half the slice is acknowledged: amortized O(1) per entry,
	// and acknowledged entries do not stay reachable.
	if l.head > len(l.outbox)/2 {
		n := copy(l.outbox, l.outbox[l.head:])
		clear(l.outbox[n:])
		l.outbox, l.head = l.outbox[:n], 0
	}
	return nil
}

func (l *memoryLedger) Acked() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked, nil
}

// SchemaLedgerSnapshot is the schema of exported ledgers.
const SchemaLedgerSnapshot = "ledgerSnapshot.v1"

// LedgerSnapshot is a ledger's whole state: every record (watermarks,
// issued tickets, close ordinals and epochs, current versions, derived
// artifacts) and the unacknowledged outbox. It marshals to JSON, so a
// rollback or a restart can carry the fence with it.
type LedgerSnapshot struct {
	Schema  string             `json:"schema"`
	Records map[string]*Record `json:"records"`
	Outbox  []OutboxEntry      `json:"outbox"`
	Acked   uint64             `json:"acked"`
}

// ExportLedger reads l into a snapshot. Records are immutable, so the
// snapshot shares them; a ledger written meanwhile may be exported partly
// before and partly after a write of another key (each record is whole).
func ExportLedger(l Ledger) (LedgerSnapshot, error) {
	snap := LedgerSnapshot{Schema: SchemaLedgerSnapshot, Records: make(map[string]*Record)}
	if err := l.Range(func(key string, r *Record) bool {
		snap.Records[key] = r
		return true
	}); err != nil {
		return LedgerSnapshot{}, err
	}
	acked, err := l.Acked()
	if err != nil {
		return LedgerSnapshot{}, err
	}
	if snap.Outbox, err = l.Outbox(acked, 0); err != nil {
		return LedgerSnapshot{}, err
	}
	snap.Acked = acked
	return snap, nil
}

// NewMemoryLedgerFrom returns a memory ledger holding snap. An Engine opened
// on it continues generations, close epochs, request ids and outbox numbers
// from where they were, and starts with no live session: every ticket issued
// before the export is refused (GENERATION_MISMATCH), whatever it answers.
func NewMemoryLedgerFrom(snap LedgerSnapshot) (Ledger, error) {
	if snap.Schema != SchemaLedgerSnapshot {
		return nil, fmt.Errorf("mcpsync: ledger snapshot schema %q, want %q", snap.Schema, SchemaLedgerSnapshot)
	}
	l := &memoryLedger{records: make(map[string]*Record, len(snap.Records)), acked: snap.Acked, lastSeq: snap.Acked}
	for key, r := range snap.Records {
		if r == nil || r.Revision == 0 {
			return nil, fmt.Errorf("mcpsync: ledger snapshot: record %q has no revision", key)
		}
		l.records[key] = r
	}
	for i, e := range snap.Outbox {
		if e.Seq <= l.lastSeq {
			return nil, fmt.Errorf("mcpsync: ledger snapshot: outbox entry %d numbered %d after %d", i, e.Seq, l.lastSeq)
		}
		l.lastSeq = e.Seq
	}
	l.outbox = append([]OutboxEntry(nil), snap.Outbox...)
	return l, nil
}
