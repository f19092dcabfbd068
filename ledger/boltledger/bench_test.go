package boltledger_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

const benchURI = "file:///docs/a.md"

func benchEngine(b *testing.B) (*mcpsync.Engine, *boltledger.Ledger) {
	b.Helper()
	return benchEngineOn(b, nil, []string{benchURI})
}

func benchResult(i int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: benchURI, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", i)}})
}

// BenchmarkAccept compares the fence's accept on the bolt ledger - one
// transaction that checks and settles the ticket, raises the watermark,
// stores the version and appends its outbox entry - with a bare bbolt
// Update writing a record of the same size and one outbox key, beside it in
// the same run. Both commit with fsync. In accept the ticket is issued with
// the timer stopped; issue+accept measures both: the ticket is deferred
// (DeferringLedger) and written in the accept's transaction, so a read is
// one fsync'd transaction, as the baseline is.
func BenchmarkAccept(b *testing.B) {
	results := []mcpsync.ReadResult{benchResult(0), benchResult(1)}

	b.Run("baseline=bare-update", func(b *testing.B) {
		e, l := benchEngine(b)
		// A record and an entry as the fence stores them, to write as bytes.
		t, _ := e.IssueTicket(benchURI, mcpsync.TriggerNotification)
		if _, err := e.AcceptResourceVersion(t, results[0]); err != nil {
			b.Fatal(err)
		}
		rec, _ := l.Load(context.Background(), benchURI)
		val, _ := mcpsync.EncodeRecord(rec)
		entries, _ := l.Outbox(context.Background(), 0, 1)
		entry, _ := mcpsync.EncodeOutboxEntry(entries[0])
		db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		_ = db.Update(func(tx *bolt.Tx) error {
			_, _ = tx.CreateBucketIfNotExists([]byte("records"))
			_, err := tx.CreateBucketIfNotExists([]byte("outbox"))
			return err
		})
		b.ReportAllocs()
		var seq uint64
		for b.Loop() {
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
	})
	b.Run("accept", func(b *testing.B) {
		e, _ := benchEngine(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			b.StopTimer()
			t, err := e.IssueTicket(benchURI, mcpsync.TriggerNotification)
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
	b.Run("issue+accept", func(b *testing.B) {
		e, _ := benchEngine(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			t, err := e.IssueTicket(benchURI, mcpsync.TriggerNotification)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.AcceptResourceVersion(t, results[i&1]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
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
// its batch to fill.
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

	b.Run("baseline=bare-batch", func(b *testing.B) {
		e, l := benchEngineOn(b, nil, uris)
		t, _ := e.IssueTicket(uris[0], mcpsync.TriggerNotification)
		if _, err := e.AcceptResourceVersion(t, concurrentResult(uris[0], 0)); err != nil {
			b.Fatal(err)
		}
		rec, _ := l.Load(context.Background(), uris[0])
		val, _ := mcpsync.EncodeRecord(rec)
		entries, _ := l.Outbox(context.Background(), 0, 1)
		entry, _ := mcpsync.EncodeOutboxEntry(entries[0])
		db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		_ = db.Update(func(tx *bolt.Tx) error {
			_, _ = tx.CreateBucketIfNotExists([]byte("records"))
			_, err := tx.CreateBucketIfNotExists([]byte("outbox"))
			return err
		})
		var seq atomic.Uint64
		acceptConcurrently(b, func(w, _ int) error {
			key := binary.BigEndian.AppendUint64(nil, seq.Add(1))
			return db.Batch(func(tx *bolt.Tx) error {
				if err := tx.Bucket([]byte("records")).Put([]byte(uris[w]), val); err != nil {
					return err
				}
				return tx.Bucket([]byte("outbox")).Put(key, entry)
			})
		})
	})
	b.Run("accept", func(b *testing.B) {
		e, _ := benchEngineOn(b, nil, uris)
		acceptConcurrently(b, func(w, i int) error {
			t, err := e.IssueTicket(uris[w], mcpsync.TriggerNotification)
			if err != nil {
				return err
			}
			out, err := e.AcceptResourceVersion(t, concurrentResult(uris[w], i))
			if err != nil {
				return err
			}
			if out.Version.OutboxSeq == 0 {
				return fmt.Errorf("%s: not accepted: %s", uris[w], out.Version.Decision)
			}
			return nil
		})
	})
}

// acceptConcurrently runs b.N calls of accept from concurrentURIs
// goroutines, goroutine w passing its own index and a count of its calls,
// and reports accepted versions per second.
func acceptConcurrently(b *testing.B, accept func(w, i int) error) {
	b.ReportAllocs()
	var claimed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range concurrentURIs {
		wg.Go(func() {
			for i := 0; claimed.Add(1) <= int64(b.N); i++ {
				if err := accept(w, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepts/s")
}

// concurrentResult is the i-th read of uri: consecutive reads differ, so
// each is a changed version with an outbox entry.
func concurrentResult(uri string, i int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", i&1)}})
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
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
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
		if _, err := e.Activate(uri, mcpsync.ModePush); err != nil {
			b.Fatal(err)
		}
	}
	return e, l
}
