package mcpsync_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpsync/mcpsync"
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
func scaleLedger(b *testing.B, n int) (mcpsync.Ledger, *mcpsync.Engine) {
	b.Helper()
	l := mcpsync.NewMemoryLedger(nil)
	e := activeEngine(b, &mcpsync.Options{Ledger: l})
	for i := range n {
		if err := e.Discover(fmt.Sprintf("file:///scale/%07d.md", i)); err != nil {
			b.Fatal(err)
		}
	}
	return l, e
}

// acceptLoop issues and accepts reads of docURI on e until stop is closed,
// recording the worst issue+accept latency seen since the last take.
type acceptLoop struct {
	worst  atomic.Int64
	flying atomic.Int64 // when the issue+accept under way began (UnixNano); 0 between them
	stop   chan struct{}
	done   sync.WaitGroup
}

func startAcceptLoop(b *testing.B, e *mcpsync.Engine) *acceptLoop {
	results := []mcpsync.ReadResult{text(docURI, "version A"), text(docURI, "version B")}
	a := &acceptLoop{stop: make(chan struct{})}
	a.done.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			default:
			}
			start := time.Now()
			a.flying.Store(start.UnixNano())
			tk, err := e.IssueTicket(docURI, mcpsync.TriggerNotification)
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
			for w := a.worst.Load(); d > w && !a.worst.CompareAndSwap(w, d); w = a.worst.Load() {
			}
			if i%1024 == 1023 {
				_ = e.AckOutbox(out.Version.OutboxSeq)
			}
		}
	})
	return a
}

// take returns the worst latency since the last take, counting the
// issue+accept under way for as long as it has taken so far, and resets it.
func (a *acceptLoop) take() int64 {
	w := a.worst.Swap(0)
	if s := a.flying.Load(); s != 0 {
		w = max(w, time.Now().UnixNano()-s)
	}
	return w
}

func (a *acceptLoop) close() {
	close(a.stop)
	a.done.Wait()
}

// BenchmarkStall measures how long one read's issue+accept can be held up
// by work over the whole ledger: an accept loop runs on docURI while, on the
// same memory ledger of n URIs, another engine walks the subscriptions,
// exports the ledger, begins a session (a reconnect) or revokes a subject
// that read nothing. stall-p99-ns is the 99th percentile, over the
// operations run, of the worst issue+accept latency during each; op-ns is
// the median time of the operation itself.
//
// Its baseline, stall-idle-p99-ns, is measured in the same run: after each
// operation the benchmark spins, without touching the ledger,
// for as long as the operation took, and takes the loop's worst latency
// over that window too. On a shared machine a longer window catches longer
// preemptions, so only a stall beyond that baseline is the ledger's.
func BenchmarkStall(b *testing.B) {
	ctx := context.Background()
	for _, n := range scaleSizes() {
		l, hot := scaleLedger(b, n)
		other, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
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
				_, err := mcpsync.ExportLedger(ctx, l)
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
				var stalls, idle, took []int64
				for b.Loop() {
					loop.take()
					start := time.Now()
					if err := op.op(); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					stalls = append(stalls, loop.take())
					for start := time.Now(); time.Since(start) < d; {
					}
					idle = append(idle, loop.take())
					took = append(took, d.Nanoseconds())
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2]), "op-ns")
				b.ReportMetric(p99(stalls), "stall-p99-ns")
				b.ReportMetric(p99(idle), "stall-idle-p99-ns")
			})
		}
	}
}

func p99(ns []int64) float64 {
	slices.Sort(ns)
	return float64(ns[(len(ns)-1)*99/100])
}
