package boltledger_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// Environment of the crash worker: the ledger file it writes, the run it is,
// and the seed of its choices.
const (
	envWorkerLedger = "MCPSYNC_CRASH_WORKER_LEDGER"
	envWorkerRun    = "MCPSYNC_CRASH_WORKER_RUN"
	// MCPSYNC_CRASH_KILLS sets how many times TestCrashConsistency kills
	// its worker; the default keeps make test short.
	envKills = "MCPSYNC_CRASH_KILLS"
)

var crashURIs = []string{
	"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md", "file:///docs/d.md",
	"file:///docs/e.md", "file:///docs/f.md",
}

// TestCrashWorker is not a test: run by TestCrashConsistency as a child
// process (the os/exec TestHelperProcess pattern), it works on the ledger
// until it is killed, announcing on stdout each step that committed.
func TestCrashWorker(t *testing.T) {
	path := os.Getenv(envWorkerLedger)
	if path == "" {
		t.Skip("run by TestCrashConsistency")
	}
	run, _ := strconv.Atoi(os.Getenv(envWorkerRun))
	if err := crashWorker(path, run); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func crashWorker(path string, run int) error {
	l, err := boltledger.Open(path, &boltledger.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	if err != nil {
		return err
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		return err
	}
	fmt.Printf("session %d\n", e.SessionGeneration())
	subject := func(i int) string { return fmt.Sprintf("user:r%d-%d", run, i%3) }
	for i, uri := range crashURIs {
		if _, err := e.Subscribe(uri, subject(i)); err != nil {
			return err
		}
		if _, err := e.Activate(uri, mcpsync.ModePush); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(uint64(run), 15))
	for n := 0; ; n++ {
		i := rng.IntN(len(crashURIs))
		uri := crashURIs[i]
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
			if sub.State == mcpsync.StateTombstonePending {
				if _, _, err := e.Reconcile(uri, false, time.Now()); err != nil {
					return err
				}
				fmt.Printf("tombstoned %s\n", uri)
				continue
			}
			if err := read(e, uri, mcpsync.NotFoundResult()); err != nil {
				return err
			}
		case op <= 4:
			if entry, err := e.Lookup(subject(i), uri); err == nil {
				if err := e.RecordDerived(mcpsync.DerivedArtifact{Index: "chunks", ArtifactID: fmt.Sprintf("%d-%d", run, n), Version: entry.Version}); err != nil && !errors.Is(err, mcpsync.ErrRevoked) {
					return err
				}
			}
		default:
			body := fmt.Sprintf("run %d step %d", run, n)
			if err := read(e, uri, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: body}})); err != nil {
				return err
			}
		}
	}
}

// read issues a ticket and hands the fence its result; refusals are part of
// the run (a revoked subject, a pending tombstone), errors are not.
func read(e *mcpsync.Engine, uri string, res mcpsync.ReadResult) error {
	t, err := e.IssueTicket(uri, mcpsync.TriggerNotification)
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

// Crash: a worker on the bolt ledger is killed with SIGKILL at random points
// of a run with changes, deletions, revocations and derived artifacts. After
// each kill the file holds no accepted version without its outbox entry, no
// entry lost or numbered twice, no reused request id or session generation,
// no version regression, and every revocation the worker saw committed.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	kills := crashKills(20)
	path := filepath.Join(t.TempDir(), "worker.db")
	rng := rand.New(rand.NewPCG(15, uint64(time.Now().UnixNano())))
	c := newCrashChecker(crashURIs)
	for run := range kills {
		steps := 1 + rng.IntN(60)
		w := startWorker(t, "TestCrashWorker", envWorkerLedger+"="+path, envWorkerRun+"="+strconv.Itoa(run))
		ev := w.kill(t, w.await(t, fmt.Sprintf("run %d", run), steps))
		t.Logf("run %d: killed after %q", run, ev[len(ev)-1])
		c.events(t, ev)
		c.check(t, path)
	}
}

// crashKills is how many times a crash test kills its worker: def, or
// MCPSYNC_CRASH_KILLS when it is set.
func crashKills(def int) int {
	if v, err := strconv.Atoi(os.Getenv(envKills)); err == nil && v > 0 {
		return v
	}
	return def
}

// workerDeadline bounds every wait of the parent on its worker.
const workerDeadline = 30 * time.Second

// worker is a child process running one of this package's worker tests (the
// os/exec TestHelperProcess pattern). It reads its stdin until the parent
// closes it, and announces on stdout, one line each, the steps that
// committed.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer  // read only once the process was waited for
	lines  chan string   // closed at the end of stdout
	done   chan struct{} // closed when nobody reads lines any more
	waited bool
}

// startWorker runs the test named test in a child process with env added to
// the parent's environment. The child is killed and waited for when the test
// ends, whatever happened.
func startWorker(t *testing.T, test string, env ...string) *worker {
	t.Helper()
	w := &worker{lines: make(chan string), done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	require.NoError(t, err)
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case w.lines <- sc.Text():
			case <-w.done:
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
	}()
	t.Cleanup(func() {
		if w.waited {
			return
		}
		_ = w.cmd.Process.Kill()
		close(w.done)
		<-eof
		_ = w.cmd.Wait()
	})
	return w
}

// await returns the first n lines the worker announces. It fails the test
// when the worker reports an error, exits, or takes longer than
// workerDeadline; label names the run in those messages.
func (w *worker) await(t *testing.T, label string, n int) []string {
	t.Helper()
	return w.awaitUntil(t, label, func(got []string) bool { return len(got) >= n })
}

// awaitLine returns what the worker announced up to and including line.
func (w *worker) awaitLine(t *testing.T, label, line string) []string {
	t.Helper()
	return w.awaitUntil(t, label, func(got []string) bool { return len(got) > 0 && got[len(got)-1] == line })
}

func (w *worker) awaitUntil(t *testing.T, label string, enough func([]string) bool) []string {
	t.Helper()
	deadline := time.NewTimer(workerDeadline)
	defer deadline.Stop()
	var got []string
	defer func() {
		if t.Failed() {
			t.Logf("%s announced:\n%s", label, strings.Join(got, "\n"))
		}
	}()
	for !enough(got) {
		select {
		case line, ok := <-w.lines:
			if !ok {
				err := w.cmd.Wait()
				w.waited = true
				t.Fatalf("%s: the worker exited on its own (%v) after %q\n%s", label, err, got, w.stderr.String())
			}
			require.False(t, strings.HasPrefix(line, "error"), "%s: %s", label, line)
			got = append(got, line)
		case <-deadline.C:
			t.Fatalf("%s: still waiting after %v; the worker announced %d lines, the last %q", label, workerDeadline, len(got), last(got))
		}
	}
	return got
}

// kill kills the worker with SIGKILL and returns got with what it announced
// before it died: those steps committed too.
func (w *worker) kill(t *testing.T, got []string) []string {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	for line := range w.lines {
		got = append(got, line)
	}
	err := w.cmd.Wait()
	w.waited = true
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the worker was killed")
	return got
}

// stop closes the worker's stdin, which asks it to finish cleanly, and
// returns got with what it announced until it exited. The worker must exit
// with status 0 within workerDeadline.
func (w *worker) stop(t *testing.T, label string, got []string) []string {
	t.Helper()
	require.NoError(t, w.stdin.Close())
	deadline := time.NewTimer(workerDeadline)
	defer deadline.Stop()
	for open := true; open; {
		select {
		case line, ok := <-w.lines:
			if open = ok; ok {
				require.False(t, strings.HasPrefix(line, "error"), "%s: %s", label, line)
				got = append(got, line)
			}
		case <-deadline.C:
			t.Fatalf("%s: the worker did not stop within %v; it announced %q last", label, workerDeadline, last(got))
		}
	}
	err := w.cmd.Wait()
	w.waited = true
	require.NoError(t, err, "%s: the worker's exit; it announced %q last\n%s", label, last(got), w.stderr.String())
	return got
}

func last(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// crashChecker holds what a crash test learned from its worker's
// announcements and from the ledger after earlier kills, and checks each
// kill's ledger against it.
type crashChecker struct {
	uris    []string                           // every URI the worker touches
	session uint64                             // newest session generation announced
	current map[string]mcpsync.ResourceVersion // newest version seen per URI
	fences  map[string]fence                   // newest fence seen per URI
	tickets map[uint64]bool                    // request ids handed out
	revoked map[string]bool                    // revocations that returned
}

// fence is the part of a record that must only move forward: the
// subscription generation, and within it the ordinals handed out and passed.
type fence struct{ gen, issued, watermark uint64 }

func newCrashChecker(uris []string) *crashChecker {
	return &crashChecker{
		uris: uris, current: map[string]mcpsync.ResourceVersion{}, fences: map[string]fence{},
		tickets: map[uint64]bool{}, revoked: map[string]bool{},
	}
}

func (c *crashChecker) events(t *testing.T, lines []string) {
	t.Helper()
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "session":
			gen, _ := strconv.ParseUint(f[1], 10, 64)
			require.Greater(t, gen, c.session, "session generation reused")
			c.session = gen
		case "ticket":
			id, _ := strconv.ParseUint(f[1], 10, 64)
			require.False(t, c.tickets[id], "request id %d handed out twice", id)
			c.tickets[id] = true
		case "revoked":
			c.revoked[f[1]] = true
		}
	}
}

// check opens the ledger at path, checks it and returns its export.
func (c *crashChecker) check(t *testing.T, path string) mcpsync.LedgerSnapshot {
	t.Helper()
	ctx := context.Background()
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	// Opening an engine finishes a revocation sweep the kill cut short.
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	snap, err := l.Export(ctx)
	require.NoError(t, err)

	entries := snap.Outbox
	require.Equal(t, snap.State.First, firstSeq(entries, snap.State.Last), "entries are retained from First")
	lastVersion := map[string]mcpsync.ResourceVersion{}
	tombstoned := map[string]uint64{} // URI -> its tombstone entry, until a newer version
	for i, en := range entries {
		require.Equal(t, snap.State.First+uint64(i), en.Seq, "no entry lost or numbered twice")
		if en.Version.Schema != "" {
			lastVersion[en.URI] = en.Version
			delete(tombstoned, en.URI)
		}
		if en.Reason == mcpsync.InvalidateTombstoned {
			require.Zero(t, tombstoned[en.URI], "%s: tombstoned by entries %d and %d with no version between", en.URI, tombstoned[en.URI], en.Seq)
			tombstoned[en.URI] = en.Seq
		}
	}
	for key, r := range snap.Records {
		if r.Sub != nil {
			f := fence{r.Sub.Generation, r.LastIssued, r.Watermark}
			prev := c.fences[key]
			require.GreaterOrEqual(t, f.gen, prev.gen, "%s: subscription generation reused", key)
			if f.gen == prev.gen {
				require.GreaterOrEqual(t, f.issued, prev.issued, "%s: read ordinal reused in generation %d", key, f.gen)
				require.GreaterOrEqual(t, f.watermark, prev.watermark, "%s: watermark went back in generation %d", key, f.gen)
			}
			c.fences[key] = f
		}
		if r.Current == nil {
			continue
		}
		v := r.Current.Version
		require.Equal(t, v, lastVersion[key], "%s: the current version is the one the outbox announced last", key)
		if prev, ok := c.current[key]; ok {
			require.False(t, prev.After(v), "%s regressed from %d/%d to %d/%d", key,
				prev.SubscriptionGeneration, prev.ReadOrdinal, v.SubscriptionGeneration, v.ReadOrdinal)
		}
		c.current[key] = v
		if c.revoked[v.Subject] {
			assert.Equal(t, mcpsync.VersionRevoked, r.Current.Status, "%s: a revoked subject's version", key)
		}
		for _, tk := range r.Tickets {
			assert.LessOrEqual(t, tk.RequestID, snap.Counters[mcpsync.CounterRequest], "%s: a ticket the counter did not allocate", key)
		}
	}
	revoked := map[string]bool{}
	for _, r := range snap.Revoked {
		revoked[r.Subject] = true
		assert.True(t, r.Swept, "%s: sweep finished on open", r.Subject)
	}
	for s := range c.revoked {
		require.True(t, revoked[s], "revocation of %s lost", s)
		for _, uri := range c.uris {
			_, err := e.Lookup(s, uri)
			assert.Error(t, err, "%s served to revoked %s", uri, s)
		}
	}
	assert.GreaterOrEqual(t, snap.Counters[mcpsync.CounterSession], c.session)
	return snap
}

func firstSeq(entries []mcpsync.OutboxEntry, last uint64) uint64 {
	if len(entries) == 0 {
		return last + 1
	}
	return entries[0].Seq
}
