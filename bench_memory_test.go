package mcpsync_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// BenchmarkEngineMemory reports the heap an engine on the memory ledger
// holds per subscription, at 1k and 100k URIs (1M with MCPSYNC_BENCH_1M=1),
// beside a baseline: a map from each URI to its watermark, the least a
// client keeping reads ordered holds.
//
//   - B/subscription: every URI subscribed and ACTIVE, nothing read yet.
//   - B/version: what one accepted version adds to it, beyond the bytes of
//     its contents' text, with its outbox entry acknowledged.
//   - B/outbox-entry: what the version's outbox entry adds while it is
//     pending (the same run, its entries not acknowledged).
//
// Each figure is the difference of HeapAlloc after a collection, divided
// by the number of URIs; the keys themselves are built before the first
// measurement, as a caller holds them.
func BenchmarkEngineMemory(b *testing.B) {
	const body = "x" // one byte of text: its payload is negligible
	for _, n := range scaleSizes() {
		keys := numbered("file:///scale/%07d.md", n)
		b.Run(fmt.Sprintf("uris=%s/baseline=watermarks", sizeName(n)), func(b *testing.B) {
			var per float64
			for b.Loop() {
				before := heapAlloc()
				w := make(map[string]uint64)
				for _, k := range keys {
					w[k] = 1
				}
				per = float64(heapAlloc()-before) / float64(n)
				runtime.KeepAlive(w)
			}
			b.ReportMetric(per, "B/subscription")
		})
		b.Run(fmt.Sprintf("uris=%s/engine", sizeName(n)), func(b *testing.B) {
			var sub, version, entry float64
			for b.Loop() {
				// Two engines built alike: one acknowledges each version's
				// outbox entry, the other leaves them pending.
				for _, pending := range []bool{false, true} {
					start := heapAlloc()
					l := ledger.NewMemory(&ledger.Options{OutboxRetention: 2 * n})
					e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
						b.Fatal(err)
					}
					for _, k := range keys {
						if _, err := e.Subscribe(k, alice); err != nil {
							b.Fatal(err)
						}
						if _, err := e.Activate(k, ledger.ModePush); err != nil {
							b.Fatal(err)
						}
					}
					subscribed := heapAlloc()
					for _, k := range keys {
						tk, err := e.IssueTicket(k, ledger.TriggerInitial)
						if err != nil {
							b.Fatal(err)
						}
						out, err := e.AcceptResourceVersion(tk, text(k, body))
						if err != nil || !out.Changed() {
							b.Fatal("not accepted", err)
						}
						if !pending {
							if err := e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, out.Version.OutboxSeq); err != nil {
								b.Fatal(err)
							}
						}
					}
					read := heapAlloc()
					if pending {
						entry = (float64(read)-float64(subscribed))/float64(n) - version - float64(len(body))
					} else {
						sub = (float64(subscribed) - float64(start)) / float64(n)
						version = (float64(read)-float64(subscribed))/float64(n) - float64(len(body))
					}
					runtime.KeepAlive(e)
				}
			}
			b.ReportMetric(sub, "B/subscription")
			b.ReportMetric(version, "B/version")
			b.ReportMetric(entry, "B/outbox-entry")
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
