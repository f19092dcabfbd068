package boltledger_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
	kills := 20
	if v, err := strconv.Atoi(os.Getenv(envKills)); err == nil && v > 0 {
		kills = v
	}
	path := filepath.Join(t.TempDir(), "worker.db")
	rng := rand.New(rand.NewPCG(15, uint64(time.Now().UnixNano())))
	c := crashChecker{current: map[string]mcpsync.ResourceVersion{}, tickets: map[uint64]bool{}, revoked: map[string]bool{}}
	for run := range kills {
		steps := 1 + rng.IntN(60)
		ev := runWorker(t, path, run, steps)
		t.Logf("run %d: killed after %q", run, ev[len(ev)-1])
		c.events(t, ev)
		c.check(t, path)
	}
}

// runWorker starts the worker, kills it after it announced steps lines (or
// after a deadline), and returns what it announced.
func runWorker(t *testing.T, path string, run, steps int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWorker$")
	cmd.Env = append(os.Environ(), envWorkerLedger+"="+path, envWorkerRun+"="+strconv.Itoa(run))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	var got []string
	for len(got) < steps {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("run %d: the worker exited on its own: %v", run, got)
			}
			require.False(t, strings.HasPrefix(line, "error"), "run %d: %s", run, line)
			got = append(got, line)
		case <-deadline.C:
			t.Fatalf("run %d: %d of %d steps before the deadline", run, len(got), steps)
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	// Drain what it printed before it died: those steps committed too.
	for line := range lines {
		got = append(got, line)
	}
	err = cmd.Wait()
	killed = true
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "run %d", run)
	return got
}

type crashChecker struct {
	session uint64
	current map[string]mcpsync.ResourceVersion // newest version seen per URI
	tickets map[uint64]bool                    // request ids handed out
	revoked map[string]bool                    // revocations that returned
}

func (c *crashChecker) events(t *testing.T, lines []string) {
	t.Helper()
	for _, line := range lines {
		f := strings.Fields(line)
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

func (c *crashChecker) check(t *testing.T, path string) {
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
	for i, en := range entries {
		require.Equal(t, snap.State.First+uint64(i), en.Seq, "no entry lost or numbered twice")
		if en.Version.Schema != "" {
			lastVersion[en.URI] = en.Version
		}
	}
	for key, r := range snap.Records {
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
		for _, uri := range crashURIs {
			_, err := e.Lookup(s, uri)
			assert.Error(t, err, "%s served to revoked %s", uri, s)
		}
	}
	assert.GreaterOrEqual(t, snap.Counters[mcpsync.CounterSession], c.session)
}

func firstSeq(entries []mcpsync.OutboxEntry, last uint64) uint64 {
	if len(entries) == 0 {
		return last + 1
	}
	return entries[0].Seq
}
