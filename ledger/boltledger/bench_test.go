package boltledger_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

const benchURI = "file:///docs/a.md"

func benchEngine(b *testing.B) (*mcpsync.Engine, *boltledger.Ledger) {
	b.Helper()
	return benchEngineOn(b, nil, []string{benchURI})
}

func benchResult(i int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]ledger.Content{{URI: benchURI, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", i)}})
}

// BenchmarkAccept compares the fence's accept on the bolt ledger - one
// transaction that checks and settles the ticket, raises the watermark,
// stores the version and appends its outbox entry - with a bare bbolt
// Update writing a record of the same size and one outbox key, beside it in
// the same run. Both commit with fsync. In accept the ticket is issued with
// the timer stopped; issue+accept measures both: the ticket is deferred
// (ledger.Deferring) and written in the accept's transaction, so a read is
// one fsync'd transaction, as the baseline is.
//
// Go runs each sub-benchmark's -count repetitions back to back, so on a
// machine whose fsync latency moves by the second the two sides meet
// different disks; interleaved alternates a bare Update and an issue+accept
// in every iteration and reports each side's time and their ratio.
func BenchmarkAccept(b *testing.B) {
	results := []mcpsync.ReadResult{benchResult(0), benchResult(1)}

	b.Run("baseline=bare-update", func(b *testing.B) {
		update := bareUpdate(b)
		b.ReportAllocs()
		for b.Loop() {
			update(b)
		}
	})
	b.Run("accept", func(b *testing.B) {
		e, _ := benchEngine(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			b.StopTimer()
			t, err := e.IssueTicket(benchURI, ledger.TriggerNotification)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			out, err := e.AcceptResourceVersion(t, results[i&1])
			if err != nil || out.Version.OutboxSeq == 0 {
				b.Fatal("not accepted", err)
			}
			i++
		}
	})
	issueAccept := func(b *testing.B, e *mcpsync.Engine, i int) {
		t, err := e.IssueTicket(benchURI, ledger.TriggerNotification)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.AcceptResourceVersion(t, results[i&1]); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("issue+accept", func(b *testing.B) {
		e, _ := benchEngine(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			issueAccept(b, e, i)
			i++
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		update := bareUpdate(b)
		e, _ := benchEngine(b)
		var bare, read time.Duration
		i := 0
		for b.Loop() {
			start := time.Now()
			update(b)
			mid := time.Now()
			issueAccept(b, e, i)
			bare, read, i = bare+mid.Sub(start), read+time.Since(mid), i+1
		}
		b.ReportMetric(float64(bare.Nanoseconds())/float64(i), "bare-update-ns/op")
		b.ReportMetric(float64(read.Nanoseconds())/float64(i), "issue+accept-ns/op")
		b.ReportMetric(float64(read)/float64(bare), "issue+accept/bare-update")
	})
}

// bareUpdate returns a function that commits, in one bbolt Update of a
// file of its own, a record and an outbox entry as the fence stores them
// for benchURI, under a new outbox key each time.
func bareUpdate(b *testing.B) func(*testing.B) {
	val, entry := storedForms(b, benchURI)
	db := bareDB(b)
	var seq uint64
	return func(b *testing.B) {
		seq++
		if err := db.Update(func(tx *bolt.Tx) error {
			if err := tx.Bucket([]byte("records")).Put([]byte(benchURI), val); err != nil {
				return err
			}
			return tx.Bucket([]byte("outbox")).Put(binary.BigEndian.AppendUint64(nil, seq), entry)
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// storedForms returns a record and an outbox entry of uri as the fence
// stores them after an accept, to write as bytes.
func storedForms(b *testing.B, uri string) (record, entry []byte) {
	e, l := benchEngineOn(b, nil, []string{uri})
	t, _ := e.IssueTicket(uri, ledger.TriggerNotification)
	if _, err := e.AcceptResourceVersion(t, concurrentResult(uri, 0)); err != nil {
		b.Fatal(err)
	}
	rec, _ := l.Load(context.Background(), uri)
	record, _ = boltledger.EncodeStored(rec)
	entries, _ := l.Outbox(context.Background(), 0, 1)
	entry, _ = boltledger.StoreEntry(entries[0])
	return record, entry
}

// bareDB opens a bare bbolt file with a records and an outbox bucket,
// closed when b ends.
func bareDB(b *testing.B) *bolt.DB {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		_, _ = tx.CreateBucketIfNotExists([]byte("records"))
		_, err := tx.CreateBucketIfNotExists([]byte("outbox"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return db
}

// concurrentURIs is how many URIs BenchmarkAcceptConcurrent reads at once,
// one goroutine each.
const concurrentURIs = 64

// BenchmarkAcceptConcurrent measures accepted versions per second with 64
// URIs read at once, one goroutine per URI, each issuing a ticket and
// accepting a changed version through one engine on the bolt ledger
// (accept), whose committer commits whatever accepts were queued while it
// wrote the last group, in one transaction (group commit). The baseline,
// beside it in the same run, is 64 goroutines each committing one record
// and one outbox key per bbolt Batch, which waits 10 ms (MaxBatchDelay) for
// its batch to fill. interleaved alternates the two, a round of 640 writes
// (ten per goroutine) of each per iteration, and reports each side's
// accepts/s and their ratio.
//
// The goroutines are started explicitly, not by b.RunParallel, whose count
// is a multiple of GOMAXPROCS: 64 writers at once is the figure asked for,
// whatever the cores. ns/op is wall time per accepted version, across all
// of them.
func BenchmarkAcceptConcurrent(b *testing.B) {
	uris := make([]string, concurrentURIs)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///docs/concurrent/%02d.md", i)
	}
	bareBatch := func(b *testing.B) func(w, i int) error {
		val, entry := storedForms(b, uris[0])
		db := bareDB(b)
		var seq atomic.Uint64
		return func(w, _ int) error {
			key := binary.BigEndian.AppendUint64(nil, seq.Add(1))
			return db.Batch(func(tx *bolt.Tx) error {
				if err := tx.Bucket([]byte("records")).Put([]byte(uris[w]), val); err != nil {
					return err
				}
				return tx.Bucket([]byte("outbox")).Put(key, entry)
			})
		}
	}
	accept := func(b *testing.B) func(w, i int) error {
		e, _ := benchEngineOn(b, nil, uris)
		// Reads of a URI alternate between two texts, across rounds too:
		// goroutine w alone reads uris[w] while a round lasts.
		var reads [concurrentURIs]int
		return func(w, _ int) error {
			t, err := e.IssueTicket(uris[w], ledger.TriggerNotification)
			if err != nil {
				return err
			}
			reads[w]++
			out, err := e.AcceptResourceVersion(t, concurrentResult(uris[w], reads[w]))
			if err != nil {
				return err
			}
			if out.Version.OutboxSeq == 0 {
				return fmt.Errorf("%s: not accepted: %s", uris[w], out.Version.Decision)
			}
			return nil
		}
	}

	b.Run("baseline=bare-batch", func(b *testing.B) {
		acceptConcurrently(b, bareBatch(b))
	})
	b.Run("accept", func(b *testing.B) {
		acceptConcurrently(b, accept(b))
	})
	b.Run("interleaved", func(b *testing.B) {
		bare, read := bareBatch(b), accept(b)
		const round = 10 * concurrentURIs
		var bareTime, readTime time.Duration
		n := 0
		for b.Loop() {
			start := time.Now()
			concurrently(b, round, bare)
			mid := time.Now()
			concurrently(b, round, read)
			bareTime, readTime, n = bareTime+mid.Sub(start), readTime+time.Since(mid), n+round
		}
		b.ReportMetric(float64(n)/bareTime.Seconds(), "bare-batch-accepts/s")
		b.ReportMetric(float64(n)/readTime.Seconds(), "accepts/s")
		b.ReportMetric(bareTime.Seconds()/readTime.Seconds(), "accept/bare-batch")
	})
}

// acceptConcurrently runs b.N calls of accept from concurrentURIs
// goroutines, goroutine w passing its own index and a count of its calls,
// and reports accepted versions per second.
func acceptConcurrently(b *testing.B, accept func(w, i int) error) {
	b.ReportAllocs()
	b.ResetTimer()
	concurrently(b, b.N, accept)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepts/s")
}

// concurrently makes n calls of accept from concurrentURIs goroutines,
// goroutine w passing its own index and a count of its calls.
func concurrently(b *testing.B, n int, accept func(w, i int) error) {
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for w := range concurrentURIs {
		wg.Go(func() {
			for i := 0; claimed.Add(1) <= int64(n); i++ {
				if err := accept(w, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// concurrentResult is the i-th read of uri: consecutive reads differ, so
// each is a changed version with an outbox entry.
func concurrentResult(uri string, i int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", i&1)}})
}

// benchEngineOn is an engine on a new bolt ledger opened with opts, with a
// session and an active push subscription of each of uris.
func benchEngineOn(b *testing.B, opts *boltledger.Options, uris []string) (*mcpsync.Engine, *boltledger.Ledger) {
	b.Helper()
	l, err := boltledger.Open(filepath.Join(b.TempDir(), "ledger.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		b.Fatal(err)
	}
	for _, uri := range uris {
		if _, err := e.Subscribe(uri, "user:alice"); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Activate(uri, ledger.ModePush); err != nil {
			b.Fatal(err)
		}
	}
	return e, l
}
