package boltledger_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// stormURIs and stormPulses are the storm of the library's
// BenchmarkNotificationStorm: 10 pulses to each of 10,000 URIs.
const stormURIs, stormPulses = 10_000, 10

// stormReaders is how many reads a Client has out at once: the read
// workers that drain its read queue (readWorkers in reads.go).
const stormReaders = 64

// BenchmarkNotificationStorm sends 10 pulses to each of 10,000 URIs and
// completes the reads they issue until the engine is quiescent, on the bolt
// ledger (bolt) beside the same storm on the memory ledger in the same run
// (baseline=memory). The pulses all arrive before the reads go out, as in a
// burst (they are coalesced to one read per URI); the reads are completed
// by 64 workers, as a Client's read workers send them, each worker one read
// at a time, the follow-up of a URI after its read. On the bolt ledger the
// pulses and tickets are deferred and the accepts of the reads completed
// together share commits. -short storms 1,000 URIs.
func BenchmarkNotificationStorm(b *testing.B) {
	n := stormURIs
	if testing.Short() {
		n = 1_000
	}
	uris := make([]string, n)
	// Two answers per URI, one for odd runs and one for even: every read
	// of a run gives new text.
	var results [2]map[string]mcpsync.ReadResult
	for i := range results {
		results[i] = make(map[string]mcpsync.ReadResult, n)
	}
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///storm/%05d.md", i)
		for r := range results {
			results[r][uris[i]] = mcpsync.NewReadResult([]ledger.Content{{URI: uris[i], MIMEType: "text/markdown", Text: fmt.Sprintf("answer %d of %s", r, uris[i])}})
		}
	}
	for _, name := range []string{"baseline=memory", "bolt"} {
		b.Run(name, func(b *testing.B) {
			opts := &mcpsync.EngineOptions{ConfirmSends: true}
			var bolt *boltledger.Ledger
			if name == "bolt" {
				bolt = openBench(b)
				opts.Ledger = bolt
			}
			e, err := mcpsync.NewEngine(opts)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
				b.Fatal(err)
			}
			subscribeAll(b, e, uris)
			reads, run := 0, 0
			var commits uint64
			for b.Loop() {
				if bolt != nil {
					commits -= boltledger.Commits(bolt)
				}
				run++
				answers := results[run%2]
				pending := make(chan ledger.Ticket, n)
				for _, u := range uris {
					for range stormPulses {
						t, ok, err := e.Notify(u)
						if err != nil {
							b.Fatal(err)
						}
						if ok {
							pending <- t
						}
					}
				}
				reads += len(pending)
				close(pending)
				var wg sync.WaitGroup
				var followUps atomic.Int64
				var read func(t ledger.Ticket)
				read = func(t ledger.Ticket) {
					e.Sending(t)
					out, err := e.FinishRead(t, answers[t.URI])
					if err != nil || !out.Changed() {
						b.Error("not accepted", err)
						return
					}
					if out.FollowUp != nil {
						followUps.Add(1)
						read(*out.FollowUp)
					}
				}
				for range stormReaders {
					wg.Go(func() {
						for t := range pending {
							read(t)
						}
					})
				}
				wg.Wait()
				reads += int(followUps.Load())
				if bolt != nil {
					commits += boltledger.Commits(bolt)
				}
			}
			b.ReportMetric(float64(reads)/float64(b.N)/float64(n), "reads/URI")
			if bolt != nil {
				b.ReportMetric(float64(commits)/float64(b.N), "commits/op")
			}
		})
	}
}

// openBench opens a bolt ledger in a new file, closed when b ends.
// subscribeAll subscribes and activates every URI of uris, 64 at a time, so
// that their decisions share commits.
func subscribeAll(b *testing.B, e *mcpsync.Engine, uris []string) {
	b.Helper()
	errs := make([]error, len(uris))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(uris); i = int(next.Add(1)) - 1 {
				if _, err := e.Subscribe(uris[i], "user:alice"); err != nil {
					errs[i] = err
					continue
				}
				_, errs[i] = e.Activate(uris[i], ledger.ModePush)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

func openBench(b *testing.B) *boltledger.Ledger {
	b.Helper()
	l, err := boltledger.Open(b.TempDir()+"/ledger.db", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}
