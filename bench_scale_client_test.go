package mcpsync_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// scaleSubscriptions is how many subscriptions the scale benchmarks open:
// 1,000 unless MCPSYNC_SCALE_N says otherwise, so make bench stays fast.
// The figure is taken with
//
//	MCPSYNC_SCALE_N=10000 go test -run '^$' -bench 'SubscribeMany|SubscriptionMemory|EraReads' -benchtime 1x -count 5 .
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

// scaleParallel is how many Subscribes are in flight at once, in both eras
// alike: a caller subscribing to a catalog does so in parallel, through a
// pool of workers or a goroutine per URI (0 here: every one at once), or
// hands them all to SubscribeAll (scaleBatch).
var scaleParallel = []int{scaleBatch, 64, 0}

// scaleBatch stands for one SubscribeAll of every URI.
const scaleBatch = -1

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
	c, err := mcpsync.Connect(b.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: version, NoResume: true})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// subscribeAll subscribes every URI, parallel at a time (0: all at once),
// and fails unless each came back open, in push mode, with its first
// version.
func subscribeAll(b *testing.B, c *mcpsync.Client, uris []string, parallel int) {
	b.Helper()
	if parallel == scaleBatch {
		subs, err := c.SubscribeAll(b.Context(), uris)
		if err != nil {
			b.Fatal(err)
		}
		for i, sub := range subs {
			if !scaleOpen(sub.State) || sub.Mode != ledger.ModePush {
				b.Fatalf("%s: %s in mode %s", uris[i], sub.State, sub.Mode)
			}
			if _, err := c.Lookup(uris[i]); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	inFlight(b, len(uris), parallel, func(i int) error {
		sub, err := c.Subscribe(b.Context(), uris[i])
		if err == nil && (!scaleOpen(sub.State) || sub.Mode != ledger.ModePush) {
			err = fmt.Errorf("%s: %s in mode %s", uris[i], sub.State, sub.Mode)
		}
		if err == nil {
			_, err = c.Lookup(uris[i])
		}
		return err
	})
}

// inFlight runs fn for 0 to n-1, parallel at a time (0: all at once),
// and fails b with the first error; a worker stops at its error.
func inFlight(b *testing.B, n, parallel int, fn func(i int) error) {
	b.Helper()
	if parallel <= 0 || parallel > n {
		parallel = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, parallel)
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
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
func scaleOpen(s ledger.SubscriptionState) bool {
	switch s {
	case ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending, ledger.StateVersionAccepted:
		return true
	}
	return false
}

// BenchmarkSubscribeMany opens N subscriptions (ACTIVE, first version
// read) over the in-process transport to one mcpsynctest server, in the
// legacy era (resources/subscribe per URI) and in the 2026-07-28 era (one
// subscriptions/listen stream carrying every URI), with 64 Subscribes in
// flight at a time and with all of them at once. Each op is all N; the
// modern sub-benchmark reports its time as a ratio of the legacy one at
// the same parallelism in the same run (goal: at most 1.2). A stream
// carries every URI, so each replacement costs O(N): with P Subscribes in
// flight, at least N/P replacements are needed, and the ratio grows with
// N/P.
func BenchmarkSubscribeMany(b *testing.B) {
	n := scaleSubscriptions(b)
	for _, parallel := range scaleParallel {
		var legacy []time.Duration // one per -count, median taken
		for _, era := range scaleEras {
			b.Run(fmt.Sprintf("n=%d/parallel=%s/%s", n, parallelName(parallel), era.name), func(b *testing.B) {
				per, calls := timeOnFreshClients(b, n, era.version, func(c *mcpsync.Client, uris []string) {
					subscribeAll(b, c, uris, parallel)
				})
				b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/subscription")
				// resources/subscribe calls (legacy) or subscriptions/listen
				// streams (2026-07-28) the server received: batching shows here.
				b.ReportMetric(calls, "subscribe-requests")
				reportAgainstLegacy(b, &legacy, era.version, per)
			})
		}
	}
}

// BenchmarkEraReads reads N resources through mcp-go alone, 64 at a time,
// over the transport and server of BenchmarkSubscribeMany, in each era:
// the baseline that says what a request costs the transport itself in
// each era, beside which that benchmark's ratios are read (every
// subscription there sends at least its first read).
func BenchmarkEraReads(b *testing.B) {
	n := scaleSubscriptions(b)
	var legacy []time.Duration
	for _, era := range scaleEras {
		b.Run(fmt.Sprintf("n=%d/%s", n, era.name), func(b *testing.B) {
			per, _ := timeOnFreshClients(b, n, era.version, func(c *mcpsync.Client, uris []string) {
				mc, err := c.Session()
				if err != nil {
					b.Fatal(err)
				}
				inFlight(b, len(uris), 64, func(i int) error {
					req := mcp.ReadResourceRequest{}
					req.Params.URI = uris[i]
					_, err := mc.ReadResource(b.Context(), req)
					return err
				})
			})
			b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/read")
			reportAgainstLegacy(b, &legacy, era.version, per)
		})
	}
}

// timeOnFreshClients runs run once an op on a client of its own, connected
// in version to a server of its own holding n URIs (both set up and closed
// off the clock), and returns the mean time of a run and the mean number
// of subscribe requests the server received.
func timeOnFreshClients(b *testing.B, n int, version string, run func(c *mcpsync.Client, uris []string)) (time.Duration, float64) {
	var total time.Duration
	ops, calls := 0, 0
	for b.Loop() {
		b.StopTimer()
		srv, uris := scaleServer(n)
		c := scaleConnect(b, srv, version)
		b.StartTimer()
		start := time.Now()
		run(c, uris)
		total += time.Since(start)
		calls += srv.SubscribeCalls()
		ops++
		b.StopTimer()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	return total / time.Duration(ops), float64(calls) / float64(ops)
}

// reportAgainstLegacy keeps per, a legacy run's time, in legacy, or
// reports a 2026-07-28 run's per against the median of those (x-legacy).
func reportAgainstLegacy(b *testing.B, legacy *[]time.Duration, version string, per time.Duration) {
	if version == scaleEras[0].version {
		*legacy = append(*legacy, per)
	} else if len(*legacy) > 0 {
		slices.Sort(*legacy)
		b.ReportMetric(float64(per)/float64((*legacy)[len(*legacy)/2]), "x-legacy")
	}
}

func parallelName(p int) string {
	switch {
	case p == scaleBatch:
		return "SubscribeAll"
	case p <= 0:
		return "all"
	}
	return strconv.Itoa(p)
}

// BenchmarkSubscriptionMemory reports what N open subscriptions cost the
// whole process, client and in-process server: heap (and stack) bytes,
// resident bytes and goroutines per subscription, measured after a GC
// with every subscription ACTIVE, against the same process with the
// client connected and nothing subscribed.
func BenchmarkSubscriptionMemory(b *testing.B) {
	n := scaleSubscriptions(b)
	for _, era := range scaleEras {
		b.Run(fmt.Sprintf("n=%d/%s", n, era.name), func(b *testing.B) {
			var heap, rss, goroutines float64
			ops := 0
			for b.Loop() {
				b.StopTimer()
				srv, uris := scaleServer(n)
				c := scaleConnect(b, srv, era.version)
				heap0, rss0, g0 := heapInUse(), residentBytes(b), runtime.NumGoroutine()
				b.StartTimer()
				subscribeAll(b, c, uris, 64)
				b.StopTimer()
				heap += (float64(heapInUse()) - float64(heap0)) / float64(n)
				rss += (float64(residentBytes(b)) - float64(rss0)) / float64(n)
				goroutines += float64(runtime.NumGoroutine()-g0) / float64(n)
				ops++
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(heap/float64(ops), "heap-B/subscription")
			b.ReportMetric(rss/float64(ops), "rss-B/subscription")
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

// residentBytes returns the process's resident set after a collection that
// returns freed memory to the system (Linux: VmRSS of /proc/self/status).
func residentBytes(b *testing.B) uint64 {
	debug.FreeOSMemory()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Skip("no VmRSS in /proc/self/status")
	return 0
}
