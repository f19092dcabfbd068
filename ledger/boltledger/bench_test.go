package boltledger_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

const benchURI = "file:///docs/a.md"

func benchEngine(b *testing.B) (*mcpsync.Engine, *boltledger.Ledger) {
	b.Helper()
	l, err := boltledger.Open(filepath.Join(b.TempDir(), "ledger.db"), nil)
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
	if _, err := e.Subscribe(benchURI, "user:alice"); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Activate(benchURI, mcpsync.ModePush); err != nil {
		b.Fatal(err)
	}
	return e, l
}

func benchResult(i int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: benchURI, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", i)}})
}

// BenchmarkAccept compares the fence's accept on the bolt ledger - one
// transaction that checks and settles the ticket, raises the watermark,
// stores the version and appends its outbox entry - with a bare bbolt
// Update writing a record of the same size and one outbox key, beside it in
// the same run. Both commit with fsync. The ticket is issued with the timer
// stopped: issuing is its own transaction, before the read goes out;
// issue+accept measures both.
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
