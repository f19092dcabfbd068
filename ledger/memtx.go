package ledger

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/mcpsync/mcpsync/internal/inplace"
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

// memTx is the write in place (inplace.Store) the holder of the memory
// ledger's lock is making: from Lock, which takes the lock, to Commit or
// Unlock, which let it go. It is a field of the ledger, written only under
// its lock.
//
// The record is never seen half written: nothing reads it without the
// lock, and next is not the key's record until Commit.
type memTx struct {
	key  string
	cur  *Record
	next *Record  // once prepared: the draft's record
	slot *memSlot // once prepared: the key's slot
}

// memStore is the memory ledger as the engine writes it in place
// (inplace.Store), through internal/inplace only.
type memStore memoryLedger

var _ inplace.Store[Record, OutboxEntry, StoredVersion] = (*memStore)(nil)

func init() {
	inplace.Of = func(l any) (any, bool) {
		m, ok := l.(*memoryLedger)
		if !ok {
			return nil, false
		}
		return (*memStore)(m), true
	}
}

func (l *memStore) Mutex() *sync.Mutex { return &l.mu }

func (l *memStore) RevokedGeneration() uint64 { return l.revokeGen.Load() }

func (l *memStore) NextLocked(counter string, n uint64) (uint64, error) {
	return (*memoryLedger)(l).nextLocked(Counter(counter), n)
}

// VersionFor puts a new current version in the draft's version cell
// unless next or cur already points to it; a record not written in place
// gets a new StoredVersion.
func (l *memStore) VersionFor(cur, next *Record) *StoredVersion {
	if s := next.slot; s != nil {
		if v := &s.ver; v != cur.Current && v != next.Current {
			return v
		}
	}
	return new(StoredVersion)
}

func (l *memStore) Lock(key string) *Record {
	l.mu.Lock()
	cur := l.records[key]
	l.tx = memTx{key: key, cur: cur}
	return cur
}

func (l *memStore) Unlock() {
	// The scratch and the draft keep their room; what they point to stays
	// reachable until the next write overwrites them.
	l.scratch = l.scratch[:0]
	l.tx = memTx{}
	l.mu.Unlock()
}

// Entries is the ledger's scratch, which only the holder of its lock
// touches.
func (l *memStore) Entries() *[]OutboxEntry { return &l.scratch }

// Prepare returns the ledger's draft, with tickets of its own.
func (l *memStore) Prepare() *Record {
	tx := &l.tx
	if tx.next != nil {
		return tx.next
	}
	cur := tx.cur
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

func (m *memStore) Commit(engine string) (uint64, error) {
	defer m.Unlock()
	l := (*memoryLedger)(m)
	tx := &l.tx
	cur, next, s, d := tx.cur, tx.next, tx.slot, &l.draft
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
