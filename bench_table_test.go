package mcpsync_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// BenchmarkScale is the scale table: each operation of the engine on a
// ledger holding 1k and 100k URIs (1M with MCPSYNC_BENCH_1M=1), on the
// memory and the bolt ledger, each beside a baseline measured in the same
// run:
//
//	BenchmarkScale/<ledger>/<size>/<op>/{baseline,mcpsync}
//
// Every URI of the ledger holds a served version read by a subject of its
// own, as an engine leaves it (the records are copies of one the engine
// wrote, with the URI, subject and digest of each). A ledger is filled once
// per ledger and size through Restore (one transaction), and the operations
// then run through a new Engine on it, as after a restart:
//
//   - lookup: Lookup of a served version, visiting every URI in turn;
//   - issue+accept: IssueTicket and AcceptResourceVersion of a changed
//     version (a version and an outbox entry), on 256 URIs spread over the
//     ledger that the engine subscribed in its session;
//   - notify+complete: Notify, Sending and FinishRead of a changed version,
//     on the same URIs;
//   - export: ledger.Export, the outbox acknowledged;
//   - reconnect: BeginSession;
//   - revoke: RevokeSubject of a subject that read one URI.
//
// They run in that order: a reconnect ends the session the writes use, and
// each revocation adds a subject to the ledger for good.
//
// Per-key operations should cost the same at every size; only export reads
// the whole ledger. The memory baselines are what a bare mutex-guarded map
// of the same N records does for the operation (export: a walk copying
// it); the bolt baselines are a bare bbolt transaction on a file holding
// the same N records as the ledger stores them: a View reading one record
// for lookup, an Update writing one record (and one outbox key where the
// operation appends one) for each write, and a View walking and copying
// every record for export.
//
// docs/performance.md's table is the median of runs with -count=1, so that each
// operation and its baseline alternate in time:
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench BenchmarkScale -benchmem -count=1 .; done
//	for i in 1 2 3; do MCPSYNC_BENCH_1M=1 go test -run '^$' -bench 'BenchmarkScale//1M' -benchmem -count=1 -timeout 120m .; done
func BenchmarkScale(b *testing.B) {
	for _, kind := range scaleKinds {
		b.Run(kind.name, func(b *testing.B) {
			for _, n := range scaleSizes() {
				b.Run(sizeName(n), func(b *testing.B) {
					fx := scaleFixtureOf(b, n)
					start := time.Now()
					rig := newScaleRig(b, fx, kind.open(b, fx))
					b.Logf("%s ledger of %d URIs filled and opened in %v", kind.name, n, time.Since(start).Round(time.Millisecond))
					rig.run(b, kind.baseline(b, fx))
				})
			}
		})
	}
}

// scaleKinds are the ledgers the table covers, with how to fill one and
// the baseline beside it.
var scaleKinds = []struct {
	name     string
	open     func(*testing.B, *scaleFixture) ledger.Ledger
	baseline func(*testing.B, *scaleFixture) scaleBaseline
}{
	{"memory", openMemoryScale, newMapBaseline},
	{"bolt", openBoltScale, newBoltBaseline},
}

// scaleHot is how many URIs the per-key writes visit in turn.
const scaleHot = 256

// scaleBody is every fixture version's text: one length, so every record's
// byte count is the template's.
const scaleBody = "version 1 of the document"

// scaleFixture is a ledger snapshot of n URIs, each with a served version
// read by a subject of its own; built once per size and shared by the
// ledgers (records are immutable).
type scaleFixture struct {
	n        int
	keys     []string // in key order
	subjects []string // subject of keys[i]
	snap     ledger.Snapshot
	tpl      *ledger.Record
}

var scaleFixtures = struct {
	sync.Mutex
	bySize map[int]*scaleFixture
}{bySize: map[int]*scaleFixture{}}

func scaleFixtureOf(b *testing.B, n int) *scaleFixture {
	scaleFixtures.Lock()
	defer scaleFixtures.Unlock()
	if fx := scaleFixtures.bySize[n]; fx != nil {
		return fx
	}
	start := time.Now()
	// The template: a URI subscribed, activated and read once by an engine.
	l := ledger.NewMemory(nil)
	e := newEngine(b, &mcpsync.EngineOptions{Ledger: l})
	const tplURI = "file:///scale/template.md"
	if _, err := e.Subscribe(tplURI, alice); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Activate(tplURI, ledger.ModePush); err != nil {
		b.Fatal(err)
	}
	t, err := e.IssueTicket(tplURI, ledger.TriggerInitial)
	if err != nil {
		b.Fatal(err)
	}
	if out, err := e.AcceptResourceVersion(t, text(tplURI, scaleBody)); err != nil || !out.Changed() {
		b.Fatal("template not accepted", err)
	}
	snap, err := ledger.Export(context.Background(), l)
	if err != nil {
		b.Fatal(err)
	}
	fx := &scaleFixture{n: n, keys: make([]string, n), subjects: make([]string, n), tpl: snap.Records[tplURI]}
	snap.Records = make(map[string]*ledger.Record, n)
	for i := range n {
		fx.keys[i] = fmt.Sprintf("file:///scale/%07d.md", i)
		fx.subjects[i] = fmt.Sprintf("user:%07d", i)
		snap.Records[fx.keys[i]] = scaleRecord(fx.tpl, fx.keys[i], fx.subjects[i], 0)
	}
	fx.snap = snap
	scaleFixtures.bySize[n] = fx
	b.Logf("fixture of %d URIs built in %v", n, time.Since(start).Round(time.Millisecond))
	return fx
}

// scaleRecord is tpl for key, read by subject, at revision rev (0: tpl's):
// the record an engine would have written had subject read key.
func scaleRecord(tpl *ledger.Record, key, subject string, rev uint64) *ledger.Record {
	r := *tpl
	if rev != 0 {
		r.Revision = rev
	}
	sub := *tpl.Sub
	sub.URI, sub.RawURI, sub.Subject = key, "", subject
	r.Sub = &sub
	res := text(key, scaleBody)
	cur := *tpl.Current
	cur.Version.URI, cur.Version.Subject, cur.Version.Digest = key, subject, res.Digest()
	cur.Contents = res.Contents()
	cur.Status = ledger.VersionServed
	r.Current = &cur
	r.LastAcceptedDigest = res.Digest()
	r.Tickets, r.Artifacts = nil, nil
	return &r
}

func openMemoryScale(b *testing.B, fx *scaleFixture) ledger.Ledger {
	l, err := ledger.NewMemoryFrom(fx.snap)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func openBoltScale(b *testing.B, fx *scaleFixture) ledger.Ledger {
	l, err := boltledger.Open(filepath.Join(b.TempDir(), "ledger.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if err := ledger.Restore(context.Background(), l, fx.snap); err != nil {
		b.Fatal(err)
	}
	return l
}

// scaleRig is an engine on a filled ledger, in a session of its own, with
// scaleHot URIs subscribed in it.
type scaleRig struct {
	fx       *scaleFixture
	ledger   ledger.Ledger
	e        *mcpsync.Engine
	subjects []string // subject of each key now (revoke re-arms keys under new ones)
	hot      []int    // keys the per-key writes visit
	results  [][2]mcpsync.ReadResult
	flips    []int // reads of each hot key so far: the next changes it
	pool     []int // keys revoke visits, one subject each
	next     int   // next of pool
	rounds   int   // times pool was re-armed
	warm     bool  // every key looked up once
}

func newScaleRig(b *testing.B, fx *scaleFixture, l ledger.Ledger) *scaleRig {
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, ConfirmSends: true})
	if err != nil {
		b.Fatal(err)
	}
	r := &scaleRig{fx: fx, ledger: l, e: e, subjects: slices.Clone(fx.subjects)}
	if err := r.begin(); err != nil {
		b.Fatal(err)
	}
	hot := min(scaleHot, fx.n/4)
	isHot := make(map[int]bool, hot)
	for j := range hot {
		i := j * fx.n / hot
		r.hot = append(r.hot, i)
		isHot[i] = true
		k := fx.keys[i]
		r.results = append(r.results, [2]mcpsync.ReadResult{text(k, "version A of the document"), text(k, "version B of the document")})
	}
	r.flips = make([]int, len(r.hot))
	for _, i := range strideOrder(fx.n) {
		if !isHot[i] {
			r.pool = append(r.pool, i)
		}
	}
	return r
}

// result is the next read of hot key j: a change from the last one.
func (r *scaleRig) result(j int) mcpsync.ReadResult {
	r.flips[j]++
	return r.results[j][r.flips[j]&1]
}

// ackAll acknowledges every outbox entry, as a consumer keeping up does.
func (r *scaleRig) ackAll() error {
	st, err := r.e.OutboxState(context.Background())
	if err != nil {
		return err
	}
	return r.e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, st.Last)
}

func (r *scaleRig) begin() error {
	_, err := r.e.BeginSession(legacySession(testServer))
	return err
}

// ensureHot opens the hot keys in the engine's current session, where
// they are not already (after a reconnect).
func (r *scaleRig) ensureHot(b *testing.B) {
	for _, i := range r.hot {
		s, err := r.e.Subscribe(r.fx.keys[i], r.subjects[i])
		if err != nil {
			b.Fatal(err)
		}
		if s.State == ledger.StateSubscribing {
			if _, err := r.e.Activate(r.fx.keys[i], ledger.ModePush); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// strideOrder is 0..n-1 visited by a stride prime to n, so that
// consecutive visits are far apart in the key order.
func strideOrder(n int) []int {
	const stride = 7919 // prime, and no size is a multiple of it
	out := make([]int, n)
	for i, j := 0, 0; i < n; i, j = i+1, (j+stride)%n {
		out[i] = j
	}
	return out
}

// scaleBaseline is the bare store each operation is measured beside.
type scaleBaseline struct {
	lookup  func(key, subject string) error
	write   func(key string, outbox bool) error // one decision's write
	reissue func(key string) error              // issue+raise
	session func() error
	revoke  func(key, subject string) error
	export  func() (int, error)
}

type scaleOp struct {
	name     string
	baseline func(i int) error
	mcpsync  func(b *testing.B, i int) error
	setup    func(b *testing.B)
}

func (r *scaleRig) run(b *testing.B, base scaleBaseline) {
	ctx := context.Background()
	order := strideOrder(r.fx.n)
	var acked int
	ack := func(seq uint64) {
		if acked++; acked%1024 == 0 {
			_ = r.e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, seq)
		}
	}
	ops := []scaleOp{
		{
			name: "lookup",
			setup: func(b *testing.B) {
				if !r.warm { // a long-running process has looked up every key once
					for i := range r.fx.n {
						if _, err := r.e.Lookup(r.subjects[i], r.fx.keys[i]); err != nil {
							b.Fatal(err)
						}
					}
					r.warm = true
				}
			},
			baseline: func(i int) error {
				k := order[i%r.fx.n]
				return base.lookup(r.fx.keys[k], r.subjects[k])
			},
			mcpsync: func(b *testing.B, i int) error {
				k := order[i%r.fx.n]
				_, err := r.e.Lookup(r.subjects[k], r.fx.keys[k])
				return err
			},
		},
		{
			name:  "issue+accept",
			setup: r.ensureHot,
			baseline: func(i int) error {
				return base.reissue(r.fx.keys[r.hot[i%len(r.hot)]])
			},
			mcpsync: func(b *testing.B, i int) error {
				j := i % len(r.hot)
				t, err := r.e.IssueTicket(r.fx.keys[r.hot[j]], ledger.TriggerNotification)
				if err != nil {
					return err
				}
				out, err := r.e.AcceptResourceVersion(t, r.result(j))
				if err != nil {
					return err
				}
				if !out.Changed() {
					return fmt.Errorf("not changed: %v", out.Decision())
				}
				ack(out.Version.OutboxSeq)
				return nil
			},
		},
		{
			name:  "notify+complete",
			setup: r.ensureHot,
			baseline: func(i int) error {
				return base.write(r.fx.keys[r.hot[i%len(r.hot)]], true)
			},
			mcpsync: func(b *testing.B, i int) error {
				j := i % len(r.hot)
				t, ok, err := r.e.Notify(r.fx.keys[r.hot[j]])
				if err != nil || !ok {
					return fmt.Errorf("no read issued: %v", err)
				}
				r.e.Sending(t)
				out, err := r.e.FinishRead(t, r.result(j))
				if err != nil {
					return err
				}
				if !out.Changed() || out.FollowUp != nil {
					return fmt.Errorf("not changed (%v) or a follow-up", out.Decision())
				}
				ack(out.Version.OutboxSeq)
				return nil
			},
		},
		{
			name: "export",
			setup: func(b *testing.B) {
				if err := r.ackAll(); err != nil {
					b.Fatal(err)
				}
			},
			baseline: func(int) error {
				n, err := base.export()
				if err == nil && n < r.fx.n {
					err = fmt.Errorf("walked %d records, want %d", n, r.fx.n)
				}
				return err
			},
			mcpsync: func(*testing.B, int) error {
				snap, err := ledger.Export(ctx, r.ledger)
				if err == nil && len(snap.Records) < r.fx.n {
					err = fmt.Errorf("exported %d records, want %d", len(snap.Records), r.fx.n)
				}
				return err
			},
		},
		{
			name:     "reconnect",
			baseline: func(int) error { return base.session() },
			mcpsync:  func(*testing.B, int) error { return r.begin() },
		},
		{
			name: "revoke",
			baseline: func(i int) error {
				k := r.pool[i%len(r.pool)]
				return base.revoke(r.fx.keys[k], r.subjects[k])
			},
			mcpsync: func(b *testing.B, _ int) error {
				if r.next == len(r.pool) {
					b.StopTimer()
					r.rearm(b)
					b.StartTimer()
				}
				k := r.pool[r.next]
				r.next++
				rc, err := r.e.RevokeSubject(r.subjects[k])
				if err != nil {
					return err
				}
				if len(rc.Versions) != 1 {
					return fmt.Errorf("revoked %d versions, want 1", len(rc.Versions))
				}
				if r.next%1024 == 0 {
					return r.ackAll()
				}
				return nil
			},
		},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			b.Run("baseline", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := op.baseline(i); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("mcpsync", func(b *testing.B) {
				if op.setup != nil {
					op.setup(b)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := op.mcpsync(b, i); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// rearm gives every key of the revoke pool a served version of a subject
// of its own again, written straight to the ledger, so revoke can go on.
func (r *scaleRig) rearm(b *testing.B) {
	ctx := context.Background()
	r.rounds++
	for _, i := range r.pool {
		key := r.fx.keys[i]
		cur, err := r.ledger.Load(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		subject := fmt.Sprintf("%s.%d", r.fx.subjects[i], r.rounds)
		next := scaleRecord(cur, key, subject, cur.Revision+1)
		next.Sub = cur.Sub
		if _, ok, err := r.ledger.CompareAndSwap(ctx, key, cur.Revision, next, nil); err != nil || !ok {
			b.Fatal("re-arm", key, err)
		}
		r.subjects[i] = subject
	}
	r.next = 0
}

// mapBaseline is the least an in-memory store does: one mutex over maps
// of the same N records.
type mapBaseline struct {
	mu      sync.Mutex
	records map[string]*ledger.Record
	issued  map[string]uint64
	marks   map[string]uint64
	revoked map[string]bool
	gen     uint64
}

func newMapBaseline(b *testing.B, fx *scaleFixture) scaleBaseline {
	m := &mapBaseline{
		records: make(map[string]*ledger.Record, fx.n),
		issued:  make(map[string]uint64, fx.n), marks: make(map[string]uint64, fx.n),
		revoked: map[string]bool{},
	}
	for k, r := range fx.snap.Records {
		m.records[k] = r
		m.issued[k], m.marks[k] = r.LastIssued, r.Watermark
	}
	return scaleBaseline{
		lookup: func(key, subject string) error {
			m.mu.Lock()
			r := m.records[key]
			revoked := m.revoked[subject]
			m.mu.Unlock()
			if r == nil || revoked || r.Current.Version.Subject != subject || r.Current.Status != ledger.VersionServed {
				return fmt.Errorf("%s not served to %s", key, subject)
			}
			return nil
		},
		write: func(key string, _ bool) error {
			m.mu.Lock()
			m.issued[key]++
			m.marks[key] = m.issued[key]
			m.mu.Unlock()
			return nil
		},
		reissue: func(key string) error {
			m.mu.Lock()
			m.issued[key]++
			n := m.issued[key]
			m.mu.Unlock()
			m.mu.Lock()
			defer m.mu.Unlock()
			if n <= m.marks[key] {
				return errors.New("stale")
			}
			m.marks[key] = n
			return nil
		},
		session: func() error {
			m.mu.Lock()
			m.gen++
			m.mu.Unlock()
			return nil
		},
		revoke: func(key, subject string) error {
			m.mu.Lock()
			m.revoked[subject] = true
			delete(m.marks, key)
			m.mu.Unlock()
			return nil
		},
		export: func() (int, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			out := make(map[string]*ledger.Record, len(m.records))
			for k, r := range m.records {
				out[k] = r
			}
			return len(out), nil
		},
	}
}

var (
	bareRecords = []byte("records")
	bareOutbox  = []byte("outbox")
)

// newBoltBaseline opens a bare bbolt file holding the fixture's records as
// the bolt ledger stores them (the revision, 8 bytes, then the record's
// JSON), written in key order, 10,000 a transaction.
func newBoltBaseline(b *testing.B, fx *scaleFixture) scaleBaseline {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.NoSync = true // while filling only
	var value []byte
	for from := 0; from < fx.n; from += 10_000 {
		err := db.Update(func(tx *bolt.Tx) error {
			records, err := tx.CreateBucketIfNotExists(bareRecords)
			if err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists(bareOutbox); err != nil {
				return err
			}
			for _, k := range fx.keys[from:min(from+10_000, fx.n)] {
				r := fx.snap.Records[k]
				js, err := ledger.EncodeRecord(r)
				if err != nil {
					return err
				}
				v := append(binary.BigEndian.AppendUint64(nil, r.Revision), js...)
				if value == nil {
					value = v
				}
				if err := records.Put([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	db.NoSync = false
	entry := make([]byte, 512) // about an invalidation.v1 entry
	var seq uint64
	write := func(key string, outbox bool) error {
		return db.Update(func(tx *bolt.Tx) error {
			if err := tx.Bucket(bareRecords).Put([]byte(key), value); err != nil {
				return err
			}
			if !outbox {
				return nil
			}
			seq++
			return tx.Bucket(bareOutbox).Put(binary.BigEndian.AppendUint64(nil, seq), entry)
		})
	}
	return scaleBaseline{
		lookup: func(key, _ string) error {
			return db.View(func(tx *bolt.Tx) error {
				v := tx.Bucket(bareRecords).Get([]byte(key))
				if v == nil {
					return fmt.Errorf("%s missing", key)
				}
				_ = slices.Clone(v)
				return nil
			})
		},
		write:   write,
		reissue: func(key string) error { return write(key, true) },
		session: func() error { return write("session", false) },
		revoke:  func(key, _ string) error { return write(key, true) },
		export: func() (int, error) {
			n := 0
			out := make(map[string][]byte, fx.n)
			err := db.View(func(tx *bolt.Tx) error {
				return tx.Bucket(bareRecords).ForEach(func(k, v []byte) error {
					out[string(k)] = slices.Clone(v)
					n++
					return nil
				})
			})
			return n, err
		},
	}
}
