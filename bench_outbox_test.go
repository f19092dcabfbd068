package mcpsync_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// BenchmarkOutboxAck acknowledges a backlog of 64k outbox entries on the
// memory ledger, 1,024 at a time (what a consumer catching up does), beside
// a baseline that acknowledges each entry as it is appended (no backlog).
// ack-ns is the mean time of one Ack, the longest the ledger's lock is
// held by it; retained-B is the heap the ledger still holds once the whole
// backlog is acknowledged, beyond what it held before the backlog.
func BenchmarkOutboxAck(b *testing.B) {
	ctx := context.Background()
	entry := []mcpsync.OutboxEntry{{Schema: mcpsync.SchemaInvalidation, URI: docURI, Reason: ledger.InvalidateUpdated}}
	var rev uint64
	appendOne := func(b *testing.B, l ledger.Ledger) uint64 {
		seq, ok, err := l.CompareAndSwap(ctx, docURI, rev, &ledger.Record{Revision: rev + 1}, entry)
		if err != nil || !ok {
			b.Fatal("append", err)
		}
		rev++
		return seq
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	b.Run("baseline=ack-each", func(b *testing.B) {
		l := ledger.NewMemory(&ledger.Options{OutboxRetention: 1 << 20})
		rev = 0
		var acks time.Duration
		n := 0
		for b.Loop() {
			seq := appendOne(b, l)
			start := time.Now()
			if err := l.Ack(ctx, mcpsync.DefaultConsumer, seq); err != nil {
				b.Fatal(err)
			}
			acks += time.Since(start)
			n++
		}
		b.ReportMetric(float64(acks.Nanoseconds())/float64(n), "ack-ns")
	})
	b.Run("backlog=64k/step=1024", func(b *testing.B) {
		const backlog, step = 1 << 16, 1 << 10
		l := ledger.NewMemory(&ledger.Options{OutboxRetention: 1 << 20})
		rev = 0
		var acks time.Duration
		n := 0
		var retained int64
		// Each iteration appends the backlog and acknowledges it: ns/op is
		// both, ack-ns the acknowledgements alone.
		for b.Loop() {
			before := heap()
			var last uint64
			for range backlog {
				last = appendOne(b, l)
			}
			for seq := last - backlog + step; seq <= last; seq += step {
				start := time.Now()
				if err := l.Ack(ctx, mcpsync.DefaultConsumer, seq); err != nil {
					b.Fatal(err)
				}
				acks += time.Since(start)
				n++
			}
			retained = int64(heap()) - int64(before)
		}
		b.ReportMetric(float64(acks.Nanoseconds())/float64(n), "ack-ns")
		b.ReportMetric(float64(retained), "retained-B")
	})
}
