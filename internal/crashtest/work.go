package crashtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// envRun is the run a worker process is: Run sets it, and its presence is
// what tells Work it runs in a worker process.
const envRun = "MCPSYNC_CRASH_WORKER_RUN"

// URIs are the resources the worker reads.
var URIs = []string{
	"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md", "file:///docs/d.md",
	"file:///docs/e.md", "file:///docs/f.md",
}

// Work is the body of a crash test's worker test (Test.Worker), which is not
// a test: run by Test.Run in a child process, it opens the ledger with open
// and works on it until it is killed, announcing on stdout each step that
// committed. Run anywhere else, it skips t.
//
// lost, when not nil, says which errors the worker survives: its connection
// to the ledger died under a call. It announces each and goes on (a step of
// its setup is tried again, a step of its run is given up). Any other error
// ends the process with status 3 after an "error" line.
func Work(t *testing.T, open func() (ledger.Ledger, error), lost func(error) bool) {
	v := os.Getenv(envRun)
	if v == "" {
		t.Skip("run by a crash test in a child process")
	}
	run, _ := strconv.Atoi(v)
	if err := work(open, lost, run); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func work(open func() (ledger.Ledger, error), lost func(error) bool, run int) error {
	survive := func(err error) bool {
		if err == nil || lost == nil || !lost(err) {
			return false
		}
		fmt.Printf("lost %q\n", err)
		return true
	}
	// again calls step until it returns an error the worker does not
	// survive, or none.
	again := func(step func() error) error {
		for {
			if err := step(); !survive(err) {
				return err
			}
		}
	}
	l, err := open()
	if err != nil {
		return err
	}
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		return err
	}
	if err := again(func() error {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		return err
	}); err != nil {
		return err
	}
	fmt.Printf("session %d\n", e.SessionGeneration())
	subject := func(i int) string { return fmt.Sprintf("user:r%d-%d", run, i%3) }
	for i, uri := range URIs {
		// Subscribing again in the same session changes nothing, and a
		// subscription activated by a try whose answer was lost is left
		// as it is.
		if err := again(func() error {
			sub, err := e.Subscribe(uri, subject(i))
			if err != nil || sub.State != ledger.StateSubscribing {
				return err
			}
			_, err = e.Activate(uri, ledger.ModePush)
			return err
		}); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(uint64(run), 15))
	for n := 0; ; n++ {
		if err := step(e, rng, subject, run, n); err != nil && !survive(err) {
			return err
		}
	}
}

// step takes one random step of the worker's run: a change, a deletion or
// its confirmation, a revocation, or a derived artifact.
func step(e *mcpsync.Engine, rng *rand.Rand, subject func(int) string, run, n int) error {
	i := rng.IntN(len(URIs))
	uri := URIs[i]
	switch op := rng.IntN(20); {
	case op == 0:
		s := subject(rng.IntN(3))
		if _, err := e.RevokeSubject(s); err != nil {
			return err
		}
		fmt.Printf("revoked %s\n", s)
	case op <= 2:
		sub, err := e.Subscription(uri)
		if err != nil {
			return err
		}
		if sub.State == ledger.StateTombstonePending {
			if _, _, err := e.ApplyListing(uri, false, time.Now()); err != nil {
				return err
			}
			fmt.Printf("tombstoned %s\n", uri)
			return nil
		}
		return read(e, uri, mcpsync.NotFoundResult())
	case op <= 4:
		entry, err := e.Lookup(subject(i), uri)
		if err != nil {
			if slices.ContainsFunc(unservable, func(u error) bool { return errors.Is(err, u) }) {
				return nil // nothing to derive from
			}
			return err
		}
		if err := e.RecordDerived(ledger.DerivedArtifact{Index: "chunks", ArtifactID: fmt.Sprintf("%d-%d", run, n), Version: entry.Version}); err != nil && !errors.Is(err, mcpsync.ErrRevoked) {
			return err
		}
	default:
		body := fmt.Sprintf("run %d step %d", run, n)
		return read(e, uri, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: body}}))
	}
	return nil
}

// unservable are Lookup's answers for a version it may not serve.
var unservable = []error{
	mcpsync.ErrNoVersion, mcpsync.ErrRevoked, mcpsync.ErrForbidden, mcpsync.ErrQuarantined,
	mcpsync.ErrTombstonePending, mcpsync.ErrTombstoned,
}

// read issues a ticket and hands the fence its result; refusals are part of
// the run (a revoked subject, a pending tombstone), errors are not.
func read(e *mcpsync.Engine, uri string, res mcpsync.ReadResult) error {
	t, err := e.IssueTicket(uri, ledger.TriggerNotification)
	switch {
	case errors.Is(err, mcpsync.ErrIllegalTransition):
		return nil
	case err != nil:
		return err
	}
	fmt.Printf("ticket %d\n", t.RequestID)
	out, err := e.AcceptResourceVersion(t, res)
	if err != nil && !errors.Is(err, mcpsync.ErrRefused) {
		return err
	}
	if out.Accepted {
		fmt.Printf("accepted %s %d %d\n", uri, out.Version.Version.SubscriptionGeneration, out.Version.Version.ReadOrdinal)
	}
	return nil
}
