package mcpsync_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// scaleSubscriptions is how many subscriptions the scale benchmarks open:
// 1,000 unless MCPSYNC_SCALE_N says otherwise, so make bench stays fast.
// The figure is taken with
//
//	MCPSYNC_SCALE_N=10000 go test -run '^$' -bench 'SubscribeMany|SubscriptionMemory' -benchtime 1x -count 5 .
func scaleSubscriptions(b *testing.B) int {
	if s := os.Getenv("MCPSYNC_SCALE_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("MCPSYNC_SCALE_N=%q is not a positive count", s)
		}
		return n
	}
	return 1000
}

// scaleParallel is how many Subscribes are in flight at once: a caller
// subscribing to a catalog does so in parallel, in both eras alike.
const scaleParallel = 64

// scaleEras are the protocol revisions compared, the legacy baseline first.
var scaleEras = []struct{ name, version string }{
	{"legacy=2025-11-25", "2025-11-25"},
	{"modern=2026-07-28", "2026-07-28"},
}

func scaleServer(n int) (*mcpsynctest.Server, []string) {
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///scale/%06d.txt", i)
		srv.Set(uris[i], "text/plain", "v1 of "+uris[i])
	}
	return srv, uris
}

func scaleConnect(b *testing.B, srv *mcpsynctest.Server, version string) *mcpsync.Client {
	b.Helper()
	c, err := mcpsync.Connect(b.Context(), func(context.Context) (transport.Interface, error) {
		return srv.NewInProcessTransport(), nil
	}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: version, NoResume: true})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// subscribeAll subscribes every URI, scaleParallel at a time, and fails
// unless each came back ACTIVE with its first version.
func subscribeAll(b *testing.B, c *mcpsync.Client, uris []string) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, scaleParallel)
	for range scaleParallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(uris) {
					return
				}
				sub, err := c.Subscribe(b.Context(), uris[i])
				if err == nil && (!scaleOpen(sub.State) || sub.Mode != mcpsync.ModePush) {
					err = fmt.Errorf("%s: %s in mode %s", uris[i], sub.State, sub.Mode)
				}
				if err == nil {
					_, err = c.Lookup(uris[i])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// scaleOpen reports whether s is ACTIVE or one of its read sub-states.
func scaleOpen(s mcpsync.SubscriptionState) bool {
	switch s {
	case mcpsync.StateActive, mcpsync.StateUpdateSeen, mcpsync.StateReadPending, mcpsync.StateVersionAccepted:
		return true
	}
	return false
}

// BenchmarkSubscribeMany opens N subscriptions (ACTIVE, first version
// read) over the in-process transport to one mcpsynctest server, in the
// legacy era (resources/subscribe per URI) and in the 2026-07-28 era (one
// subscriptions/listen stream carrying every URI). Each op is all N; the
// modern sub-benchmark reports its time as a ratio of the legacy one
// measured in the same run (goal: at most 1.2).
func BenchmarkSubscribeMany(b *testing.B) {
	n := scaleSubscriptions(b)
	var legacy []time.Duration // one per -count, median taken
	for _, era := range scaleEras {
		b.Run(fmt.Sprintf("n=%d/%s", n, era.name), func(b *testing.B) {
			var total time.Duration
			ops, calls := 0, 0
			for b.Loop() {
				b.StopTimer()
				srv, uris := scaleServer(n)
				c := scaleConnect(b, srv, era.version)
				b.StartTimer()
				start := time.Now()
				subscribeAll(b, c, uris)
				total += time.Since(start)
				calls += srv.SubscribeCalls()
				ops++
				b.StopTimer()
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			per := total / time.Duration(ops)
			b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/subscription")
			// resources/subscribe calls (legacy) or subscriptions/listen
			// streams (2026-07-28) the server received: batching shows here.
			b.ReportMetric(float64(calls)/float64(ops), "subscribe-requests")
			if era.version == scaleEras[0].version {
				legacy = append(legacy, per)
			} else if len(legacy) > 0 {
				slices.Sort(legacy)
				b.ReportMetric(float64(per)/float64(legacy[len(legacy)/2]), "x-legacy")
			}
		})
	}
}

// BenchmarkSubscriptionMemory reports what N open subscriptions cost the
// whole process: heap bytes and goroutines per subscription, measured
// after a GC with every subscription ACTIVE, against the same process with
// the client connected and nothing subscribed.
func BenchmarkSubscriptionMemory(b *testing.B) {
	n := scaleSubscriptions(b)
	for _, era := range scaleEras {
		b.Run(fmt.Sprintf("n=%d/%s", n, era.name), func(b *testing.B) {
			var heap, goroutines float64
			ops := 0
			for b.Loop() {
				b.StopTimer()
				srv, uris := scaleServer(n)
				c := scaleConnect(b, srv, era.version)
				heap0, g0 := heapInUse(), runtime.NumGoroutine()
				b.StartTimer()
				subscribeAll(b, c, uris)
				b.StopTimer()
				heap += (float64(heapInUse()) - float64(heap0)) / float64(n)
				goroutines += float64(runtime.NumGoroutine()-g0) / float64(n)
				ops++
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(heap/float64(ops), "heap-B/subscription")
			b.ReportMetric(goroutines/float64(ops), "goroutines/subscription")
		})
	}
}

// heapInUse returns the heap and stacks in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
