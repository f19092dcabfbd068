package boltledger_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"
	"golang.org/x/time/rate"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// resumeURIs is how many URIs BenchmarkRestartResumed resumes. Each run
// of each side takes tens of seconds at 10,000 (every URI costs a few
// fsync'd writes), so -count=6 takes about ten minutes on two cores;
// -short resumes 1,000.
const resumeURIs = 10_000

// BenchmarkRestartResumed measures a worker restarted on its bolt ledger
// with 10,000 open subscriptions, until every one is ACTIVE again in the new
// session with a first read accepted: open the file, a new engine, Connect
// (which resumes them) and WaitForSync (restart). Beside it in the same run,
// the baseline builds the same state from nothing: a fresh engine on a fresh
// file, Connect, SubscribeAll of the 10,000 and WaitForSync (cold).
//
// The server is in process and pinned to protocol 2025-11-25: a 2026-07-28
// session subscribes by replacing its listen stream, which carries every
// URI, so subscribing n URIs costs O(n²) there; that is tracked apart, and
// would swamp what is measured here.
//
// ReconnectReads is rate.Inf in both: the pacing of reconnect reads by a
// rate is a policy, not a cost. A restart's reads are paced by the read
// window whatever it is (8 out at first, one more with each answer). The
// case defaults is the restart with ClientOptions at their defaults (no
// ReconnectReads, and so no rate bound since the window replaced the
// 100 reads a second that bounded a restart of 10,000 URIs to 100 s).
func BenchmarkRestartResumed(b *testing.B) {
	n := resumeURIs
	if testing.Short() {
		n = 1_000
	}
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///docs/resume/%05d.md", i)
		srv.Set(uris[i], "text/markdown", fmt.Sprintf("document %d", i))
	}

	// stopped is what a worker leaves behind when it stops: every URI
	// subscribed and read once, in a session that ended. The baseline
	// leaves it, once per run, for restart to start from.
	dir := b.TempDir()
	stopped := ""
	subscribeAll := func(b *testing.B, path string) {
		w := startBenchWorker(b, srv, path)
		if _, err := w.client.SubscribeAll(b.Context(), uris); err != nil {
			b.Fatal(err)
		}
		if err := w.client.WaitForSync(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		w.close(b)
		stopped = path
		b.StartTimer()
	}

	b.Run("baseline=cold", func(b *testing.B) {
		run := 0
		for b.Loop() {
			run++
			subscribeAll(b, filepath.Join(dir, fmt.Sprintf("cold-%d.db", run)))
		}
		reportPerURI(b, n)
	})

	restart := func(b *testing.B, opts *mcpsync.ClientOptions) {
		if stopped == "" { // the baseline did not run
			b.StopTimer()
			subscribeAll(b, filepath.Join(dir, "stopped.db"))
		}
		run := 0
		for b.Loop() {
			b.StopTimer()
			run++
			path := filepath.Join(b.TempDir(), fmt.Sprintf("restart-%d.db", run))
			copyFile(b, stopped, path)
			b.StartTimer()
			w := startBenchWorkerWith(b, srv, path, opts)
			if err := w.client.WaitForSync(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if run == 1 {
				w.mustHaveResumed(b, uris)
			}
			w.close(b)
			b.StartTimer()
		}
		reportPerURI(b, n)
	}
	b.Run("restart", func(b *testing.B) { restart(b, benchOptions()) })
	b.Run("defaults", func(b *testing.B) {
		restart(b, &mcpsync.ClientOptions{Subject: "svc:indexer", ProtocolVersion: "2025-11-25"})
	})
}

// benchOptions are the client options of the benchmark's workers.
func benchOptions() *mcpsync.ClientOptions {
	return &mcpsync.ClientOptions{Subject: "svc:indexer", ProtocolVersion: "2025-11-25", ReconnectReads: rate.Inf}
}

// reportPerURI reports the URIs of each run and the time per URI.
func reportPerURI(b *testing.B, n int) {
	b.ReportMetric(float64(n), "uris")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "us/uri")
}

// benchWorker is a process's worth of mcpsync on a bolt ledger: the file, an
// engine on it and a client of the test server.
type benchWorker struct {
	ledger *boltledger.Ledger
	engine *mcpsync.Engine
	client *mcpsync.Client
}

// startBenchWorker opens the ledger at path, builds an engine on it and connects,
// as a worker does when it starts.
func startBenchWorker(b *testing.B, srv *mcpsynctest.Server, path string) *benchWorker {
	return startBenchWorkerWith(b, srv, path, benchOptions())
}

// startBenchWorkerWith is startBenchWorker with the client options opts
// (their Engine is set here).
func startBenchWorkerWith(b *testing.B, srv *mcpsynctest.Server, path string, opts *mcpsync.ClientOptions) *benchWorker {
	b.Helper()
	l, err := boltledger.Open(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		b.Fatal(err)
	}
	o := *opts
	o.Engine = e
	opts = &o
	c, err := mcpsync.Connect(b.Context(), func(context.Context) (transport.Interface, error) {
		return srv.NewInProcessTransport(), nil
	}, opts)
	if err != nil {
		b.Fatal(err)
	}
	return &benchWorker{ledger: l, engine: e, client: c}
}

func (w *benchWorker) close(b *testing.B) {
	b.Helper()
	if err := w.client.Close(); err != nil {
		b.Fatal(err)
	}
	if err := w.ledger.Close(); err != nil {
		b.Fatal(err)
	}
}

// mustHaveResumed checks that WaitForSync waited for what is measured: every
// URI open in the new session with a read accepted in it.
func (w *benchWorker) mustHaveResumed(b *testing.B, uris []string) {
	b.Helper()
	gen := w.engine.SessionGeneration()
	for _, u := range uris {
		sub, err := w.engine.Subscription(u)
		if err != nil {
			b.Fatal(err)
		}
		if sub.SessionGeneration != gen || sub.State != ledger.StateActive || sub.Watermark == 0 {
			b.Fatalf("%s not resumed: session %d of %d, %s, watermark %d", u, sub.SessionGeneration, gen, sub.State, sub.Watermark)
		}
	}
}

func copyFile(b *testing.B, from, to string) {
	b.Helper()
	src, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}
