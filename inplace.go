package mcpsync

// The fence's writes in place on the memory ledger (internal/inplace), and
// the copies of a record a compare-and-swap writes.

import (
	"github.com/mcpsync/mcpsync/internal/inplace"
	"github.com/mcpsync/mcpsync/ledger"
)

// memStore is the memory ledger written in place (internal/inplace).
type memStore = inplace.Store[ledger.Record, ledger.OutboxEntry, ledger.StoredVersion]

// memTx is a write in place on the memory ledger (inplace.Store), from
// the Lock that took the ledger's lock to commit or end, which let it go.
// It lives on its holder's stack; once the lock is gone, its holder must
// keep nothing it handed out. cur is the key's record (nil when there is
// none), which the holder must not change.
type memTx struct {
	s    memStore
	cur  *ledger.Record
	held bool
}

// end lets the ledger's lock go, writing nothing commit did not; after
// commit it does nothing.
func (tx *memTx) end() {
	if tx.held {
		tx.held = false
		tx.s.Unlock()
	}
}

// prepare returns next, the ledger's private copy of cur (which must not
// be nil) one revision on, for the write to change.
func (tx *memTx) prepare() *ledger.Record { return tx.s.Prepare() }

// entries is where the write appends its outbox entries.
func (tx *memTx) entries() *[]OutboxEntry { return tx.s.Entries() }

// commit stores next and the entries, stamping each with engine, and lets
// the lock go. It returns the number of the first entry (0: none).
func (tx *memTx) commit(engine string) (uint64, error) {
	tx.held = false
	return tx.s.Commit(engine)
}

// inspect runs fn, under the memory ledger's lock, on the record stored
// under key (nil when there is none), which fn must neither change nor
// keep: it may be the ledger's private copy. It costs no copy.
func inspect(s memStore, key string, fn func(cur *ledger.Record)) {
	cur := s.Lock(key)
	defer s.Unlock()
	fn(cur)
}

// memUpdate runs fn as a write in place of key (memTx): on cur, and on
// next, a private copy of cur (nil when cur is), storing next and the
// entries fn appended when fn returns true.
func memUpdate(s memStore, key, engine string, fn stepFunc) (uint64, error) {
	tx := memTx{s: s, cur: s.Lock(key), held: true}
	defer tx.end()
	var next *ledger.Record
	if tx.cur != nil {
		next = tx.prepare()
	}
	write, err := fn(tx.cur, next, tx.entries())
	if err != nil || !write {
		return 0, err
	}
	return tx.commit(engine)
}

// versionFor returns where the step that writes next, a copy of cur, puts
// a new current version: on the memory ledger, where its draft keeps one
// (inplace.Store.VersionFor); otherwise a new StoredVersion.
func (e *Engine) versionFor(cur, next *ledger.Record) *ledger.StoredVersion {
	if e.mem != nil {
		return e.mem.VersionFor(cur, next)
	}
	return new(ledger.StoredVersion)
}

// clone returns a copy of r, one revision on, for a writer to change. r is
// a record a ledger handed out (Load), never the memory ledger's private
// copy.
func clone(r *ledger.Record) *ledger.Record {
	c := *r
	c.Revision++
	return &c
}

// revisionOf is r's revision, 0 when there is no record.
func revisionOf(r *ledger.Record) uint64 {
	if r == nil {
		return 0
	}
	return r.Revision
}
