// Package boltledger is a ledger.Ledger in one file, on go.etcd.io/bbolt.
//
// Every decision of the fence is written in one bbolt transaction: the
// record, the outbox entries it appends and the outbox numbering commit
// together or not at all, and a commit is on disk (fsync) before
// CompareAndSwap returns. Decisions made at once share a transaction and
// its fsync (group commit, with no delay: the next group forms while one
// is written), each still whole and with its own result. A write the
// engine needs no durability for (CompareAndSwapDeferred: a ticket, a
// pulse) waits in memory for the key's next durable write, which stores
// the key's whole state, instead of a commit of its own. A
// process killed at any point reopens the file with every accepted version
// and its outbox entry, or neither. bbolt locks the file: one process (one
// writer) uses it at a time.
//
// Layout: bucket "records" maps a normalized URI to its revision (8 bytes,
// big-endian) followed by the record's body; "outbox" maps an entry number
// (8 bytes, big-endian) to the entry's body (encoding.go: a binary form,
// or the JSON of files written before it); "counters" maps a counter
// name to its last value; "consumers" maps a consumer name to its position;
// "revoked" maps a subject to its revocation; "meta" holds the file's schema
// and what the retention bound dropped. The outbox bucket's sequence is the
// number of the newest entry ever appended.
//
// The index (ledger.Index) is written in the transaction of every
// write of a record or a revocation: "bySubject" holds a bucket for each
// subject records are indexed under (Record.Subjects, as their JSON stores
// it), named by the subject's SHA-256 and holding their keys; a bucket
// with no key left is dropped. "unknownCloses" holds the key
// of each record in UNSUBSCRIBE_UNKNOWN; "indexed" maps a record's key to
// what it is indexed under (indexEntry), for the next write of it to move;
// "revokedLog" maps the number of each subject that joined the revoked set
// (8 bytes, big-endian: RevokedGeneration as it joined) to the subject, and
// its sequence is the number of the last.
package boltledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync/ledger"
)

// Schema names the file's layout. Open upgrades a file of the earlier
// ones in place, and refuses any other.
const Schema = "mcpsync.boltledger.v3"

// schemaV2 is the layout before records and outbox entries were written in
// the binary form (encoding.go): its JSON ones are read as they are, and
// replaced as they are written again.
const schemaV2 = "mcpsync.boltledger.v2"

// schemaV1 is the layout before the index: Open builds it from the records
// and the revocations, in one transaction.
const schemaV1 = "mcpsync.boltledger.v1"

// Bucket and key names, named once.
var (
	bucketRecords   = []byte("records")
	bucketOutbox    = []byte("outbox")
	bucketCounters  = []byte("counters")
	bucketConsumers = []byte("consumers")
	bucketRevoked   = []byte("revoked")
	bucketMeta      = []byte("meta")

	bucketBySubject  = []byte("bySubject")
	bucketUnknown    = []byte("unknownCloses")
	bucketIndexed    = []byte("indexed")
	bucketRevokedLog = []byte("revokedLog")

	keySchema         = []byte("schema")
	keyDropped        = []byte("dropped")
	keyDroppedThrough = []byte("droppedThrough")

	allBuckets = [][]byte{
		bucketRecords, bucketOutbox, bucketCounters, bucketConsumers, bucketRevoked, bucketMeta,
		bucketBySubject, bucketUnknown, bucketIndexed, bucketRevokedLog,
	}

	// present is the value of a key whose presence is what it says: Get
	// of a key stored with an empty value may return nil, as for no key.
	present = []byte{1}
)

// trimStep bounds how many outbox entries one transaction deletes, so that
// a writer never pays for a long backlog at once; the rest go with the next
// writes.
const trimStep = 1024

// rangeStep is how many records Range reads per read transaction: fn runs
// outside any transaction, since a long read transaction would block a
// writer that needs to grow the file.
const rangeStep = 256

// Options configure Open; nil means defaults.
type Options struct {
	// Ledger sets the outbox's retention bound.
	Ledger *ledger.Options
	// Timeout bounds the wait for the file's lock when another process
	// holds it; 0 means one second.
	Timeout time.Duration
	// Batch is ignored: every ledger commits writes made at once in one
	// transaction (group commit), without the fixed delay of bbolt's
	// DB.Batch that this option used to turn on.
	//
	// Deprecated: group commit is always on.
	Batch bool
}

// Ledger is a ledger.Ledger stored in one bbolt file.
type Ledger struct {
	db      *bolt.DB
	retain  uint64
	commits committer

	// cache holds decoded records, so that a Load does not decode JSON.
	// bbolt locks the file, so no other process writes behind it; an entry
	// is only ever replaced by a higher revision, so a writer that stores
	// late cannot put an older record back.
	//
	// bbolt shows a commit to new readers before its commit returns (the
	// meta page is written, then synced), so the cached record of a key
	// whose write is being committed may already be older than what a
	// reader of the outbox has seen: while writing counts a write of a
	// key, Load reads the key from the file and caches nothing, and the
	// cache learns the new record once the commit returned.
	//
	// deferred holds the records CompareAndSwapDeferred wrote and no
	// commit has yet: each is also the key's cached record, until a later
	// write replaces it.
	//
	// committing holds, for a key being written, the record a transaction
	// of the committer stored (not yet committed, perhaps rolled back):
	// while the write is under way, Load finds the file's revision and
	// hands out the one of the cached, deferred or committing records that
	// has it, and decodes the file's only when none has.
	cacheMu    sync.RWMutex // protects cache, writing, deferred, committing and closing
	cache      map[string]*ledger.Record
	writing    map[string]int // writes of each key under way
	deferred   map[string]*deferredRecord
	committing map[string]*ledger.Record
	closing    bool // Close began: no write is deferred any more

	// revokeGen is RevokedGeneration: the subjects in the revoked bucket,
	// counted at Open and raised after each commit that adds one, so the
	// number of the last that joined in bucket revokedLog. bbolt
	// locks the file, so no other process adds one behind it, and an
	// engine's accept reads it without a transaction.
	revokeGen atomic.Uint64

	mu       sync.Mutex    // protects appended
	appended chan struct{} // closed, and replaced, after each commit that appends (or restores)
	closed   chan struct{} // closed by Close
	once     sync.Once
}

var (
	_ ledger.Ledger    = (*Ledger)(nil)
	_ ledger.Index     = (*Ledger)(nil)
	_ ledger.Deferring = (*Ledger)(nil)
	_ ledger.Batching  = (*Ledger)(nil)
)

// Open opens (creating if needed) the ledger file at path. A file of an
// earlier schema is upgraded in place, in one transaction: one of schemaV1
// has its index built from its records, one of schemaV2 is only renamed
// (its JSON records and entries are read as they are). A file of any
// other schema is refused with ledger.ErrLedgerSchema. The ledger commits its writes on a goroutine of
// its own, which Close stops.
func Open(path string, opts *Options) (*Ledger, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	db, revoked, err := openFile(path, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("boltledger: open %s: %w", path, err)
	}
	l := &Ledger{
		db: db, retain: o.Ledger.Retention(),
		cache: map[string]*ledger.Record{}, writing: map[string]int{}, deferred: map[string]*deferredRecord{},
		committing: map[string]*ledger.Record{},
		appended:   make(chan struct{}), closed: make(chan struct{}),
	}
	l.revokeGen.Store(uint64(revoked))
	l.startCommitter()
	return l, nil
}

// openFile opens the bbolt file at path and checks it is a ledger whose
// identity counters can be trusted: a new file becomes one; a file of an
// earlier schema is upgraded (one of schemaV1 has its index built in the
// same transaction); a
// file of another program or schema, one cut short or one whose counters or
// positions are not 8 bytes is refused (ErrLedgerSchema, ErrLedgerCorrupt),
// and so is one whose revocations and their log disagree. bbolt maps the
// file, so reading a page past the end of a truncated one faults: that
// fault is a panic here, not the process's death.
func openFile(path string, timeout time.Duration) (db *bolt.DB, revoked int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, fmt.Errorf("%w: reading the file faulted (%v): is it cut short?", ledger.ErrLedgerCorrupt, r)
		}
	}()
	if db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout}); err != nil {
		return nil, 0, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := checkFile(tx); err != nil {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		upgrade := meta != nil && string(meta.Get(keySchema)) == schemaV1
		// Created here: a file of schemaV1 lacks the index's buckets.
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if upgrade {
			if err := buildIndex(tx); err != nil {
				return fmt.Errorf("upgrade from %s: %w", schemaV1, err)
			}
		}
		revoked = tx.Bucket(bucketRevoked).Stats().KeyN
		if joined := tx.Bucket(bucketRevokedLog).Sequence(); joined != uint64(revoked) {
			return fmt.Errorf("%w: %d subjects revoked, %d joined the revoked set", ledger.ErrLedgerCorrupt, revoked, joined)
		}
		if meta := tx.Bucket(bucketMeta); string(meta.Get(keySchema)) != Schema {
			return meta.Put(keySchema, []byte(Schema))
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return db, revoked, nil
}

// checkFile refuses a file that is not a ledger of this schema, or whose
// size, counters or positions say it is damaged. A file with no buckets at
// all is a new ledger.
func checkFile(tx *bolt.Tx) error {
	if info, err := os.Stat(tx.DB().Path()); err == nil && info.Size() < tx.Size() {
		return fmt.Errorf("%w: the file has %d bytes, its pages need %d: it was cut short", ledger.ErrLedgerCorrupt, info.Size(), tx.Size())
	}
	meta := tx.Bucket(bucketMeta)
	var schema []byte
	if meta != nil {
		schema = meta.Get(keySchema)
	}
	first, _ := tx.Cursor().First()
	switch {
	case schema == nil && first != nil:
		return fmt.Errorf("%w: a bbolt file with no ledger schema (bucket %q): not a ledger", ledger.ErrLedgerSchema, first)
	case schema == nil:
		return nil // new
	case string(schema) != Schema && string(schema) != schemaV2 && string(schema) != schemaV1:
		return fmt.Errorf("%w: file schema %q, want %q", ledger.ErrLedgerSchema, schema, Schema)
	}
	// Identities are allocated from these: a value that is not 8 bytes
	// would read as 0 and hand them out again.
	for _, b := range []*bolt.Bucket{tx.Bucket(bucketCounters), tx.Bucket(bucketConsumers)} {
		if b == nil {
			continue
		}
		if err := b.ForEach(func(k, v []byte) error { return check64(string(k), v) }); err != nil {
			return err
		}
	}
	for _, k := range [][]byte{keyDropped, keyDroppedThrough} {
		if v := meta.Get(k); v != nil {
			if err := check64(string(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// check64 refuses a stored counter or position that is not 8 bytes.
func check64(name string, v []byte) error {
	if len(v) != 8 {
		return fmt.Errorf("%w: %s is %d bytes, not 8", ledger.ErrLedgerCorrupt, name, len(v))
	}
	return nil
}

// Close commits the writes under way and the deferred ones and closes the
// file; it is idempotent. Calls after it fail with ledger.ErrLedgerClosed,
// and waiters in WaitOutbox return it.
func (l *Ledger) Close() error {
	var err error
	l.once.Do(func() {
		err = l.stopCommitter()
		close(l.closed)
		err = errors.Join(err, l.db.Close())
	})
	return err
}

// Path returns the file's path.
func (l *Ledger) Path() string { return l.db.Path() }

func (l *Ledger) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	return l.db.View(fn)
}

func (l *Ledger) usable(ctx context.Context) error {
	select {
	case <-l.closed:
		return ledger.ErrLedgerClosed
	default:
	}
	return ctx.Err()
}

func u64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func key64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Load implements ledger.Ledger. A key being written is read from the
// file: its commit may be visible there, with its outbox entries, before
// the cache learns it. Load then hands out the record of the file's
// revision (the revision prefix tells it without decoding): the cached
// one, the one being committed, or the file's, decoded; or a deferred
// record newer than the file's.
func (l *Ledger) Load(ctx context.Context, key string) (*ledger.Record, error) {
	l.cacheMu.RLock()
	held, ok := l.cache[key]
	busy := l.writing[key] > 0
	l.cacheMu.RUnlock()
	if ok && !busy {
		return held, l.usable(ctx)
	}
	var r *ledger.Record
	err := l.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get([]byte(key))
		if v == nil {
			return nil
		}
		if busy {
			// Read under the file's transaction: what a commit stored is
			// either in the file now or not yet.
			l.cacheMu.RLock()
			r = l.ofRevision(key, u64(v))
			l.cacheMu.RUnlock()
			if r != nil {
				return nil
			}
		}
		var err error
		r, err = decodeRecord(v)
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case r == nil:
		return nil, nil
	case busy:
		return r, nil
	}
	return l.remember(key, r), nil
}

// ofRevision returns, of key's cached, deferred and committing records,
// the one the file holds at revision rev, or a deferred one newer than it;
// nil when none is. Its caller holds cacheMu.
func (l *Ledger) ofRevision(key string, rev uint64) *ledger.Record {
	if d := l.deferred[key]; d != nil && d.rec.Revision > rev {
		return d.rec
	}
	for _, r := range []*ledger.Record{l.committing[key], l.cache[key]} {
		if r != nil && r.Revision == rev {
			return r
		}
	}
	return nil
}

// remember caches r, read from the file, unless a newer revision is cached
// or a write of key is under way (which may have committed since r was
// read), and returns the record to hand out: r, or the newer one cached.
func (l *Ledger) remember(key string, r *ledger.Record) *ledger.Record {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	if held, ok := l.cache[key]; ok && held.Revision >= r.Revision {
		return held
	}
	if l.writing[key] == 0 {
		l.cache[key] = r
	}
	return r
}

// beginWrite counts a write of key under way, until endWrite, which caches
// r, the record as the write left it (nil: unknown), unless a newer one is.
// It returns the deferred record of key (nil: none): a write from revision
// prev made from it supersedes it, and is stored over the record it was
// deferred over; a write from any other revision is stale.
func (l *Ledger) beginWrite(key string) *deferredRecord {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	l.writing[key]++
	return l.deferred[key]
}

// endWrite ends a write of key that committed: r is the record as it left
// it, stored or found (nil: none).
func (l *Ledger) endWrite(key string, r *ledger.Record) {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	if l.writing[key]--; l.writing[key] == 0 {
		delete(l.writing, key)
		delete(l.committing, key)
	}
	if held, ok := l.cache[key]; r != nil && (!ok || held.Revision < r.Revision) {
		l.cache[key] = r
	}
}

// failedWrite ends a write of key that failed: what the cache holds may no
// longer be what the file does (a commit can fail once written), so it
// keeps only a deferred record, which the next commit writes again.
func (l *Ledger) failedWrite(key string) {
	l.cacheMu.Lock()
	defer l.cacheMu.Unlock()
	if l.writing[key]--; l.writing[key] == 0 {
		delete(l.writing, key)
		delete(l.committing, key)
	}
	if d := l.deferred[key]; d != nil {
		l.cache[key] = d.rec
	} else {
		delete(l.cache, key)
	}
}

func revisionOf(r *ledger.Record) uint64 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// CompareAndSwap implements ledger.Ledger: the revision check, the record,
// its outbox entries and their numbering are one transaction.
func (l *Ledger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []ledger.OutboxEntry) (uint64, bool, error) {
	w, err := l.newSwap(ledger.Swap{Key: key, Prev: prev, Next: next, Entries: entries})
	if err != nil {
		return 0, false, err
	}
	if !l.beginSwap(w) {
		return 0, false, nil
	}
	r := l.endSwap(w, l.update(ctx, w.run))
	if r.FirstSeq != 0 {
		l.wake()
	}
	return r.FirstSeq, r.OK, r.Err
}

// LoadAll implements ledger.Batching: each key as Load reads it, most
// from the cache.
func (l *Ledger) LoadAll(ctx context.Context, keys []string) ([]*ledger.Record, error) {
	return ledger.LoadEach(ctx, l, keys)
}

// CompareAndSwapAll implements ledger.Batching: every swap is queued for
// the committer at once, so they share its next group (up to maxGroup
// writes a transaction), each with its own result.
func (l *Ledger) CompareAndSwapAll(ctx context.Context, swaps []ledger.Swap) []ledger.SwapResult {
	results := make([]ledger.SwapResult, len(swaps))
	ws := make([]*swapWrite, 0, len(swaps))
	seen := make(map[string]bool, len(swaps))
	for i, s := range swaps {
		if seen[s.Key] {
			results[i].Err = fmt.Errorf("boltledger: %s: written twice in one batch", s.Key)
			continue
		}
		seen[s.Key] = true
		w, err := l.newSwap(s)
		if err != nil {
			results[i].Err = err
			continue
		}
		if l.beginSwap(w) {
			w.at = i
			ws = append(ws, w)
		}
	}
	// In key order, which the result does not depend on: bbolt splits a
	// node only at commit, so new keys put out of order into one
	// transaction go into the middle of a node that keeps growing (see
	// Restore).
	slices.SortFunc(ws, func(a, b *swapWrite) int { return strings.Compare(a.key, b.key) })
	fns := make([]func(*bolt.Tx) error, len(ws))
	for i, w := range ws {
		fns[i] = w.run
	}
	appended := false
	for i, err := range l.updateAll(ctx, fns) {
		w := ws[i]
		results[w.at] = l.endSwap(w, err)
		appended = appended || results[w.at].FirstSeq != 0
	}
	if appended {
		l.wake()
	}
	return results
}

// swapWrite is one compare-and-swap under way: the record and entries it
// stores, encoded before it is queued (only the entries' numbers are
// written in the committer's transaction), and what it found.
type swapWrite struct {
	l       *Ledger
	at      int // its index in the batch
	key     string
	prev    uint64
	next    *ledger.Record
	val     []byte
	entries [][]byte
	// d is the key's deferred record as the write began, and over the
	// lowest revision the file may hold for the write to be stored
	// (beginSwap).
	d    *deferredRecord
	over uint64

	// Set afresh by each run of the write (run).
	first  uint64
	ok     bool
	stored *ledger.Record // what beat the caller's record, if it was stale
}

// newSwap checks and encodes s.
func (l *Ledger) newSwap(s ledger.Swap) (*swapWrite, error) {
	if s.Next == nil || s.Next.Revision != s.Prev+1 {
		return nil, fmt.Errorf("boltledger: %s: revision must go from %d to %d", s.Key, s.Prev, s.Prev+1)
	}
	val, err := encodeRecord(s.Next)
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, len(s.Entries))
	for i, e := range s.Entries {
		if vals[i], err = encodeEntry(e); err != nil {
			return nil, err
		}
	}
	return &swapWrite{l: l, key: s.Key, prev: s.Prev, next: s.Next, val: val, entries: vals, over: s.Prev}, nil
}

// beginSwap counts w as a write of its key under way and reports whether
// it is to be queued: not when the key's deferred record is newer than
// the record w was made from, which refuses it at once.
//
// Made from a deferred record, the write replaces it: the file holds
// the record it was deferred over, or one of the deferred records
// between (a flush wrote it), each an earlier state of the record the
// write was made from. Made from an older one, it is stale. Made from
// a newer one, the deferred record is one a commit superseded, visible
// in the file before the committer forgets it (committed): it decides
// nothing, and the file must hold prev itself.
func (l *Ledger) beginSwap(w *swapWrite) bool {
	d := l.beginWrite(w.key)
	switch {
	case d == nil || d.rec.Revision < w.prev:
	case d.rec.Revision > w.prev:
		l.endWrite(w.key, d.rec)
		return false
	default:
		w.d, w.over = d, d.base
	}
	return true
}

// run is w in the committer's transaction.
func (w *swapWrite) run(tx *bolt.Tx) error {
	l := w.l
	w.first, w.ok, w.stored = 0, false, nil
	records := tx.Bucket(bucketRecords)
	if v := records.Get([]byte(w.key)); u64(v) < w.over || u64(v) > w.prev {
		if v != nil {
			if r, err := decodeRecord(v); err == nil {
				w.stored = r
			}
		}
		return nil
	}
	if err := records.Put([]byte(w.key), w.val); err != nil {
		return err
	}
	if err := index(tx, []byte(w.key), w.next); err != nil {
		return err
	}
	w.ok = true
	if w.d != nil {
		l.supersede(w.d)
	}
	l.cacheMu.Lock()
	l.committing[w.key] = w.next
	l.cacheMu.Unlock()
	if len(w.entries) == 0 {
		return nil
	}
	out := appendTo(tx)
	last := out.Sequence()
	if _, err := ledger.Reserve(ledger.CounterOutbox, last, uint64(len(w.entries))); err != nil {
		return err // the transaction, and the record with it, is rolled back
	}
	w.first = last + 1
	for _, b := range w.entries {
		last++
		numberEntry(b, last)
		if err := out.Put(key64(last), b); err != nil {
			return err
		}
	}
	if err := out.SetSequence(last); err != nil {
		return err
	}
	return l.trim(tx)
}

// endSwap ends w, which committed or failed with err, and returns its
// result.
func (l *Ledger) endSwap(w *swapWrite, err error) ledger.SwapResult {
	switch {
	case err != nil:
		l.failedWrite(w.key)
		return ledger.SwapResult{Err: fmt.Errorf("boltledger: store %s: %w", w.key, err)}
	case w.ok:
		l.endWrite(w.key, w.next)
	default:
		// The caller's record is stale, perhaps from the cache: cache what
		// is stored, so its retry starts from there.
		l.endWrite(w.key, w.stored)
	}
	return ledger.SwapResult{FirstSeq: w.first, OK: w.ok}
}

// CompareAndSwapDeferred implements ledger.Deferring: when key's
// record is cached at revision prev and no write of it is under way, next
// becomes its record at once, in memory, until the next durable write of
// key, made from it, writes the key's state whole, or a flush (Range,
// Export, the index, Close) writes it; a crash before then loses it.
// Otherwise, and for a new key, it is CompareAndSwap.
func (l *Ledger) CompareAndSwapDeferred(ctx context.Context, key string, prev uint64, next *ledger.Record) (bool, error) {
	if next == nil || next.Revision != prev+1 {
		return false, fmt.Errorf("boltledger: %s: revision must go from %d to %d", key, prev, prev+1)
	}
	if err := l.usable(ctx); err != nil {
		return false, err
	}
	// A write the next commit would refuse is made now, to fail alone; one
	// made as the ledger closes too (its last flush may be behind it).
	if key != "" && len(key) <= bolt.MaxKeySize && prev != 0 {
		l.cacheMu.Lock()
		cur, cached := l.cache[key]
		if cached && l.writing[key] == 0 && !l.closing {
			if cur.Revision != prev {
				l.cacheMu.Unlock()
				return false, nil
			}
			base := prev
			if d := l.deferred[key]; d != nil && d.rec.Revision == prev {
				base = d.base // replaced before any commit wrote it
			}
			l.cache[key] = next
			l.deferred[key] = &deferredRecord{key: key, rec: next, base: base}
			l.cacheMu.Unlock()
			return true, nil
		}
		l.cacheMu.Unlock()
	}
	_, ok, err := l.CompareAndSwap(ctx, key, prev, next, nil)
	return ok, err
}

// appendTo returns tx's outbox to append entries to. Its keys only ever
// grow, so a page it splits is filled whole, where bbolt's default would
// leave each half empty for good and write twice the pages.
func appendTo(tx *bolt.Tx) *bolt.Bucket {
	out := tx.Bucket(bucketOutbox)
	out.FillPercent = 1
	return out
}

// wake wakes every WaitOutbox sleeping on the outbox, after a commit.
func (l *Ledger) wake() {
	l.mu.Lock()
	close(l.appended)
	l.appended = make(chan struct{})
	l.mu.Unlock()
}

// trim deletes, at most trimStep at a time, the entries every consumer
// passed and those beyond the retention bound, counting the latter.
func (l *Ledger) trim(tx *bolt.Tx) error {
	meta, out := tx.Bucket(bucketMeta), tx.Bucket(bucketOutbox)
	last := out.Sequence()
	passed := uint64(0)
	if low, ok := minPosition(tx.Bucket(bucketConsumers)); ok {
		passed = low
	}
	c := out.Cursor()
	dropped, droppedTo := u64(meta.Get(keyDropped)), u64(meta.Get(keyDroppedThrough))
	counted := dropped
	for n, k := 0, firstKey(c); k != nil && n < trimStep; n, k = n+1, firstKey(c) {
		seq := u64(k)
		overBound := last-seq+1 > l.retain
		if seq > passed && !overBound {
			break
		}
		if seq > passed {
			dropped, droppedTo = dropped+1, seq
		}
		if err := out.Delete(k); err != nil {
			return err
		}
	}
	if dropped == counted {
		return nil // leave the meta page clean
	}
	if err := meta.Put(keyDropped, key64(dropped)); err != nil {
		return err
	}
	return meta.Put(keyDroppedThrough, key64(droppedTo))
}

func firstKey(c *bolt.Cursor) []byte {
	k, _ := c.First()
	return k
}

func minPosition(b *bolt.Bucket) (uint64, bool) {
	var low uint64
	found := false
	_ = b.ForEach(func(_, v []byte) error {
		if p := u64(v); !found || p < low {
			low, found = p, true
		}
		return nil
	})
	return low, found
}

// Range implements ledger.Ledger. It reads rangeStep records per read
// transaction, caches them as Load does, and calls fn outside it.
func (l *Ledger) Range(ctx context.Context, fn func(key string, r *ledger.Record) bool) error {
	if err := l.flush(ctx); err != nil {
		return fmt.Errorf("boltledger: range: %w", err)
	}
	var after []byte
	for {
		var keys []string
		var recs []*ledger.Record
		err := l.view(ctx, func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(after)
				if k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for ; k != nil && len(keys) < rangeStep; k, v = c.Next() {
				r, err := decodeRecord(v)
				if err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				keys, recs = append(keys, string(k)), append(recs, r)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("boltledger: range: %w", err)
		}
		// Decoded once: a restart ranges over every record (to resume)
		// and then loads each.
		for i, k := range keys {
			recs[i] = l.remember(k, recs[i])
		}
		for i, k := range keys {
			if !fn(k, recs[i]) {
				return nil
			}
		}
		if len(keys) < rangeStep {
			return nil
		}
		after = []byte(keys[len(keys)-1])
	}
}

// Next implements ledger.Ledger.
func (l *Ledger) Next(ctx context.Context, c ledger.Counter, n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("boltledger: reserve 0 values of %s", c)
	}
	var first uint64
	err := l.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCounters)
		v := b.Get([]byte(c))
		if v != nil {
			if err := check64(string(c), v); err != nil {
				return err
			}
		}
		last := u64(v)
		reserved, err := ledger.Reserve(c, last, n)
		if err != nil {
			return err
		}
		first = last + 1
		return b.Put([]byte(c), key64(reserved))
	})
	if err != nil {
		return 0, fmt.Errorf("boltledger: next %s: %w", c, err)
	}
	return first, nil
}

// Revoke implements ledger.Ledger.
// revocable refuses a subject bucket "revoked" cannot be keyed by.
func revocable(subject string) error {
	if len(subject) > bolt.MaxKeySize {
		return fmt.Errorf("%w: bbolt keys no revocation by a subject of %d bytes, beyond %d",
			ledger.ErrInvalidSubject, len(subject), bolt.MaxKeySize)
	}
	return nil
}

func (l *Ledger) Revoke(ctx context.Context, r ledger.RevokedSubject) error {
	if err := revocable(r.Subject); err != nil {
		return fmt.Errorf("boltledger: revoke: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	added := false
	err = l.update(ctx, func(tx *bolt.Tx) error {
		revoked := tx.Bucket(bucketRevoked)
		added = revoked.Get([]byte(r.Subject)) == nil
		if added {
			if err := logJoin(tx, r.Subject); err != nil {
				return err
			}
		}
		return revoked.Put([]byte(r.Subject), b)
	})
	if err != nil {
		return fmt.Errorf("boltledger: revoke %q: %w", r.Subject, err)
	}
	// Raised after the commit: an engine that sees the new value reads a
	// revoked set that holds the subject.
	if added {
		l.revokeGen.Add(1)
	}
	return nil
}

// RevokedGeneration implements ledger.Ledger without a transaction.
func (l *Ledger) RevokedGeneration(ctx context.Context) (uint64, error) {
	if err := l.usable(ctx); err != nil {
		return 0, err
	}
	return l.revokeGen.Load(), nil
}

// Revoked implements ledger.Ledger.
func (l *Ledger) Revoked(ctx context.Context) ([]ledger.RevokedSubject, error) {
	out := []ledger.RevokedSubject{}
	err := l.view(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = readRevoked(tx)
		return err
	})
	return out, err
}

func readRevoked(tx *bolt.Tx) ([]ledger.RevokedSubject, error) {
	out := []ledger.RevokedSubject{}
	err := tx.Bucket(bucketRevoked).ForEach(func(_, v []byte) error {
		var r ledger.RevokedSubject
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("%w: decode revocation: %w", ledger.ErrLedgerCorrupt, err)
		}
		if r.Schema != ledger.SchemaRevokedSubject {
			return fmt.Errorf("%w: revocation schema %q", ledger.ErrLedgerSchema, r.Schema)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// Outbox implements ledger.Ledger.
func (l *Ledger) Outbox(ctx context.Context, after uint64, max int) ([]ledger.OutboxEntry, error) {
	var out []ledger.OutboxEntry
	err := l.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.Seek(key64(after + 1)); k != nil && (max <= 0 || len(out) < max); k, v = c.Next() {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltledger: outbox: %w", err)
	}
	return out, nil
}

// Ack implements ledger.Ledger.
func (l *Ledger) Ack(ctx context.Context, consumer string, seq uint64) error {
	err := l.update(ctx, func(tx *bolt.Tx) error {
		consumers := tx.Bucket(bucketConsumers)
		upTo := min(seq, tx.Bucket(bucketOutbox).Sequence())
		pos := u64(consumers.Get([]byte(consumer)))
		if consumers.Get([]byte(consumer)) == nil {
			pos = firstRetained(tx) - 1
		}
		if err := consumers.Put([]byte(consumer), key64(max(pos, upTo))); err != nil {
			return err
		}
		return l.trim(tx)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ledger.ErrLedgerClosed):
		return err // the engine says which call it was
	}
	return fmt.Errorf("boltledger: ack %q: %w", consumer, err)
}

// firstRetained returns the number of the oldest retained entry, or one past
// the newest when none is.
func firstRetained(tx *bolt.Tx) uint64 {
	if k := firstKey(tx.Bucket(bucketOutbox).Cursor()); k != nil {
		return u64(k)
	}
	return tx.Bucket(bucketOutbox).Sequence() + 1
}

// OutboxState implements ledger.Ledger.
func (l *Ledger) OutboxState(ctx context.Context) (ledger.OutboxState, error) {
	var st ledger.OutboxState
	err := l.view(ctx, func(tx *bolt.Tx) error {
		st = outboxState(tx)
		return nil
	})
	return st, err
}

func outboxState(tx *bolt.Tx) ledger.OutboxState {
	meta := tx.Bucket(bucketMeta)
	st := ledger.OutboxState{
		Last: tx.Bucket(bucketOutbox).Sequence(), First: firstRetained(tx),
		Dropped: u64(meta.Get(keyDropped)), DroppedThrough: u64(meta.Get(keyDroppedThrough)),
		Consumers: map[string]uint64{},
	}
	_ = tx.Bucket(bucketConsumers).ForEach(func(k, v []byte) error {
		st.Consumers[string(k)] = u64(v)
		return nil
	})
	return st
}

// WaitOutbox implements ledger.Ledger: it sleeps on the signal the next
// appending commit gives, never polling the file.
func (l *Ledger) WaitOutbox(ctx context.Context, after uint64) error {
	for {
		l.mu.Lock()
		ch := l.appended
		l.mu.Unlock()
		var last uint64
		if err := l.view(ctx, func(tx *bolt.Tx) error {
			last = tx.Bucket(bucketOutbox).Sequence()
			return nil
		}); err != nil {
			return err
		}
		if last > after {
			return nil
		}
		select {
		case <-ch:
		case <-l.closed:
			return ledger.ErrLedgerClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Export implements ledger.Ledger: one read transaction.
func (l *Ledger) Export(ctx context.Context) (ledger.Snapshot, error) {
	snap := ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{},
		Counters: map[ledger.Counter]uint64{}, Outbox: []ledger.OutboxEntry{},
	}
	if err := l.flush(ctx); err != nil {
		return ledger.Snapshot{}, fmt.Errorf("boltledger: export: %w", err)
	}
	err := l.view(ctx, func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			r, err := decodeRecord(v)
			snap.Records[string(k)] = r
			return err
		}); err != nil {
			return err
		}
		_ = tx.Bucket(bucketCounters).ForEach(func(k, v []byte) error {
			snap.Counters[ledger.Counter(k)] = u64(v)
			return nil
		})
		var err error
		if snap.Revoked, err = readRevoked(tx); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOutbox).ForEach(func(_, v []byte) error {
			e, err := decodeEntry(v)
			snap.Outbox = append(snap.Outbox, e)
			return err
		}); err != nil {
			return err
		}
		snap.State = outboxState(tx)
		return nil
	})
	if err != nil {
		return ledger.Snapshot{}, fmt.Errorf("boltledger: export: %w", err)
	}
	return snap, nil
}

// Restore implements ledger.Ledger: one write transaction, into an empty
// file.
func (l *Ledger) Restore(ctx context.Context, snap ledger.Snapshot) error {
	snap, err := snap.ForRestore()
	if err != nil {
		return fmt.Errorf("boltledger: restore: %w", err)
	}
	for _, r := range snap.Revoked {
		if err := revocable(r.Subject); err != nil {
			return fmt.Errorf("boltledger: restore: %w", err)
		}
	}
	if err := l.usable(ctx); err != nil {
		return fmt.Errorf("boltledger: restore: %w", err)
	}
	// One large transaction, rare, that must find the file empty: a
	// deferred record, written before it, is found.
	var joined uint64
	err = l.update(ctx, func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if !bytes.Equal(name, bucketMeta) && firstKey(tx.Bucket(name).Cursor()) != nil {
				return ledger.ErrLedgerNotEmpty
			}
		}
		meta := tx.Bucket(bucketMeta)
		if tx.Bucket(bucketOutbox).Sequence() != 0 {
			return ledger.ErrLedgerNotEmpty
		}
		// In key order: bbolt splits a node only at commit, so one
		// transaction putting keys in random order inserts each into the
		// middle of a node that keeps growing, which is quadratic in the
		// records; in order, each goes at the end.
		records := tx.Bucket(bucketRecords)
		x := newIndexer(tx)
		for _, key := range slices.Sorted(maps.Keys(snap.Records)) {
			r := snap.Records[key]
			v, err := encodeRecord(r)
			if err != nil {
				return err
			}
			if err := records.Put([]byte(key), v); err != nil {
				return err
			}
			if err := x.add([]byte(key), r); err != nil {
				return err
			}
		}
		if err := x.finish(); err != nil {
			return err
		}
		for c, v := range snap.Counters {
			if err := tx.Bucket(bucketCounters).Put([]byte(c), key64(v)); err != nil {
				return err
			}
		}
		for _, r := range snap.Revoked {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			// Subjects join in the snapshot's order (by subject), each
			// once: a later revocation of one replaces the earlier.
			if tx.Bucket(bucketRevoked).Get([]byte(r.Subject)) == nil {
				if err := logJoin(tx, r.Subject); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bucketRevoked).Put([]byte(r.Subject), b); err != nil {
				return err
			}
		}
		for _, e := range snap.Outbox {
			b, err := encodeEntry(e)
			if err != nil {
				return err
			}
			if err := appendTo(tx).Put(key64(e.Seq), b); err != nil {
				return err
			}
		}
		for name, pos := range snap.State.Consumers {
			if err := tx.Bucket(bucketConsumers).Put([]byte(name), key64(pos)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketOutbox).SetSequence(snap.State.Last); err != nil {
			return err
		}
		for k, v := range map[string]uint64{string(keyDropped): snap.State.Dropped, string(keyDroppedThrough): snap.State.DroppedThrough} {
			if err := meta.Put([]byte(k), key64(v)); err != nil {
				return err
			}
		}
		joined = tx.Bucket(bucketRevokedLog).Sequence()
		return l.trim(tx)
	})
	if err != nil && !errors.Is(err, ledger.ErrLedgerNotEmpty) {
		return fmt.Errorf("boltledger: restore: %w", err)
	}
	if err != nil {
		return err
	}
	// Into an empty ledger: every restored subject is new.
	l.revokeGen.Add(joined)
	l.wake()
	return nil
}
