// Package inplace is the memory ledger's write in place, as the engine
// reaches it: package ledger sets Of, and no package outside this module
// can name it.
package inplace

import "sync"

// Store is a memory ledger's own record of a key written in place under its
// lock, for R its record, E its outbox entry and V its stored version.
//
// A holder of the lock (Lock) reads cur, the key's record, which it must
// neither change nor keep; it may call Prepare for next, a private copy of
// cur one revision on (the ledger's draft), change it in place, append the
// outbox entries of the write to Entries, and Commit, which stores next and
// them in one step, exactly as CompareAndSwap(key, cur's revision, next,
// entries) would. What next points to (its version, subscription,
// corroboration, artifacts) the holder replaces, never modifies; a new
// version goes where VersionFor says. It may change next's tickets in place,
// but must not give next a slice of cur's. It must not call the ledger.
// Once the lock is gone it must keep nothing it was handed.
type Store[R, E, V any] interface {
	// Mutex is the ledger's lock. Its holder may read and write what the
	// engine keeps under it (its audit); Lock and Unlock take and let it go
	// for a write.
	Mutex() *sync.Mutex
	// Lock takes the ledger's lock and returns the record of key (nil when
	// there is none) for a write in place of key.
	Lock(key string) (cur *R)
	// Unlock lets the lock go, writing nothing Commit did not.
	Unlock()
	// Prepare returns next, the private copy of cur (which must not be nil)
	// one revision on that the write changes.
	Prepare() (next *R)
	// Entries is where the write appends its outbox entries.
	Entries() *[]E
	// Commit stores next as the key's record and appends the entries to the
	// outbox, in one step, stamping each with engine, and lets the lock go
	// (also when it fails). It returns the number of the first entry (0:
	// none).
	Commit(engine string) (uint64, error)
	// VersionFor returns where the write that makes next, a copy of cur,
	// puts a new current version: the draft's version cell unless next or
	// cur already points to it.
	VersionFor(cur, next *R) *V
	// NextLocked is the ledger's Next of counter, by the holder of its lock.
	NextLocked(counter string, n uint64) (uint64, error)
	// RevokedGeneration is the ledger's RevokedGeneration, read without its
	// lock.
	RevokedGeneration() uint64
}

// Of returns the Store of l, a Store[R, E, V] of package ledger's types,
// when l is a memory ledger. Package ledger sets it.
var Of func(l any) (any, bool)

// Get returns the Store of l when l is a memory ledger.
func Get[R, E, V any](l any) (Store[R, E, V], bool) {
	if Of == nil {
		return nil, false
	}
	s, ok := Of(l)
	if !ok {
		return nil, false
	}
	st, ok := s.(Store[R, E, V])
	return st, ok
}
