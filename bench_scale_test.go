package mcpsync_test

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// scaleSizes are the ledger sizes the scale benchmarks run at: 1k and 100k
// by default; MCPSYNC_BENCH_1M=1 adds 1M URIs, whose setup alone takes
// seconds and which a plain make bench leaves out.
func scaleSizes() []int {
	sizes := []int{1_000, 100_000}
	if os.Getenv("MCPSYNC_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	return sizes
}

func sizeName(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}

// scaleLedger returns a memory ledger holding n discovered URIs, and an
// engine on it in a live session with docURI subscribed by alice and ACTIVE.
func scaleLedger(b *testing.B, n int) (ledger.Ledger, *mcpsync.Engine) {
	b.Helper()
	l := ledger.NewMemory(nil)
	e := activeEngine(b, &mcpsync.EngineOptions{Ledger: l})
	for i := range n {
		if err := e.Discover(fmt.Sprintf("file:///scale/%07d.md", i)); err != nil {
			b.Fatal(err)
		}
	}
	return l, e
}

// acceptLoop issues and accepts reads of docURI on e until stop is closed,
// counting every issue+accept's latency in the histogram of the window
// under way, and the worst of them.
type acceptLoop struct {
	window atomic.Pointer[latencies]
	worst  atomic.Int64
	flying atomic.Int64 // when the issue+accept under way began (UnixNano); 0 between them
	stop   chan struct{}
	done   sync.WaitGroup
}

func startAcceptLoop(b *testing.B, e *mcpsync.Engine) *acceptLoop {
	results := []mcpsync.ReadResult{text(docURI, "version A"), text(docURI, "version B")}
	a := &acceptLoop{stop: make(chan struct{})}
	a.window.Store(new(latencies))
	a.done.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			default:
			}
			start := time.Now()
			a.flying.Store(start.UnixNano())
			tk, err := e.IssueTicket(docURI, ledger.TriggerNotification)
			if err != nil {
				b.Error(err)
				return
			}
			out, err := e.AcceptResourceVersion(tk, results[i&1])
			d := time.Since(start).Nanoseconds()
			a.flying.Store(0)
			if err != nil {
				b.Error(err)
				return
			}
			a.window.Load().add(d)
			for w := a.worst.Load(); d > w && !a.worst.CompareAndSwap(w, d); w = a.worst.Load() {
			}
			if i%1024 == 1023 {
				_ = e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, out.Version.OutboxSeq)
			}
		}
	})
	return a
}

// take ends the window under way, starting next, and returns its
// histogram and the worst latency in it, counting the issue+accept under
// way for as long as it has taken so far.
func (a *acceptLoop) take(next *latencies) (*latencies, int64) {
	h := a.window.Swap(next)
	w := a.worst.Swap(0)
	if s := a.flying.Load(); s != 0 {
		w = max(w, time.Now().UnixNano()-s)
	}
	return h, w
}

func (a *acceptLoop) close() {
	close(a.stop)
	a.done.Wait()
}

// latencies counts latencies in buckets 1/16 of a power of two wide, so a
// percentile read from it is at most 1/16 above the true one.
type latencies [64 * 16]atomic.Int64

func latencyBucket(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 5
	return (e+1)*16 + int(ns>>e) - 16
}

// bucketTop is the largest latency that falls in bucket i.
func bucketTop(i int) int64 {
	if i < 16 {
		return int64(i)
	}
	e := i/16 - 1
	return (int64(i%16+16+1) << e) - 1
}

func (h *latencies) add(ns int64) { h[latencyBucket(ns)].Add(1) }

// merge adds h's counts to sum, and clears h for reuse.
func (h *latencies) merge(sum *[64 * 16]int64) {
	for i := range h {
		sum[i] += h[i].Swap(0)
	}
}

// percentile returns the top of the bucket holding the p-th percentile of
// the latencies counted in sum.
func percentile(sum *[64 * 16]int64, p float64) float64 {
	var n int64
	for _, c := range sum {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p / 100 * float64(n)))
	for i, c := range sum {
		if rank -= c; rank <= 0 {
			return float64(bucketTop(i))
		}
	}
	return float64(bucketTop(len(sum) - 1))
}

// BenchmarkStall measures how long one read's issue+accept can be held up
// by work over the whole ledger: an accept loop runs on docURI while, on the
// same memory ledger of n URIs, another engine walks the subscriptions,
// exports the ledger, begins a session (a reconnect) or revokes a subject
// that read nothing. stall-p99-ns is the 99th percentile of the latencies
// of the accepts made while the operation ran; stall-max-ns the worst of
// them, counting one still under way when it ended; op-ns is the median
// time of the operation itself.
//
// Its baseline, stall-idle-p99-ns and stall-idle-max-ns, is measured in the
// same run: after each operation the benchmark spins, without touching the
// ledger, for as long as the operation took, and counts the loop's
// latencies over that window too. On a shared machine a longer window
// catches longer preemptions, so only a stall beyond that baseline is the
// ledger's.
func BenchmarkStall(b *testing.B) {
	ctx := context.Background()
	for _, n := range scaleSizes() {
		l, hot := scaleLedger(b, n)
		other, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := other.BeginSession(mcpsync.SessionInfo{}); err != nil {
			b.Fatal(err)
		}
		revokes := 0
		ops := []struct {
			name string
			op   func() error
		}{
			{"Subscriptions", func() error {
				for _, err := range other.Subscriptions() {
					if err != nil {
						return err
					}
				}
				return nil
			}},
			{"ExportLedger", func() error {
				_, err := ledger.Export(ctx, l)
				return err
			}},
			{"BeginSession", func() error {
				_, err := other.BeginSession(mcpsync.SessionInfo{})
				return err
			}},
			{"RevokeSubject", func() error {
				revokes++
				_, err := other.RevokeSubject(fmt.Sprintf("user:nobody-%d", revokes))
				return err
			}},
		}
		for _, op := range ops {
			b.Run(fmt.Sprintf("uris=%s/%s", sizeName(n), op.name), func(b *testing.B) {
				loop := startAcceptLoop(b, hot)
				defer loop.close()
				var during, idle, between [64 * 16]int64
				var worst, idleWorst int64
				var took []int64
				next := new(latencies) // the histogram the next window counts in
				for b.Loop() {
					h, _ := loop.take(next)
					h.merge(&between) // between windows: not counted
					start := time.Now()
					if err := op.op(); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					ran, w := loop.take(h)
					ran.merge(&during)
					worst = max(worst, w)
					for start := time.Now(); time.Since(start) < d; {
					}
					h, w = loop.take(ran)
					h.merge(&idle)
					idleWorst = max(idleWorst, w)
					next = h
					took = append(took, d.Nanoseconds())
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2]), "op-ns")
				b.ReportMetric(percentile(&during, 99), "stall-p99-ns")
				b.ReportMetric(float64(worst), "stall-max-ns")
				b.ReportMetric(percentile(&idle, 99), "stall-idle-p99-ns")
				b.ReportMetric(float64(idleWorst), "stall-idle-max-ns")
			})
		}
	}
}
