package boltledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/internal/crashtest"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Environment of the resuming worker: its ledger file, the file its server
// is built from, and the run it is.
const (
	envResumeLedger = "MCPSYNC_CRASH_RESUME_LEDGER"
	envResumeServer = "MCPSYNC_CRASH_RESUME_SERVER"
	envResumeRun    = "MCPSYNC_CRASH_RESUME_RUN"
)

const (
	// indexConsumer is the outbox consumer of the worker, which acknowledges
	// what it reads; auditConsumer is the parent's, which never does, so
	// that every entry stays in the file for the checks.
	indexConsumer = "index"
	auditConsumer = "audit"
	// workerWait bounds each wait of the worker on its client; shorter than
	// crashtest.Deadline, so the worker says what it waited for before the
	// parent gives up on it.
	workerWait = 10 * time.Second
)

// serverState is what the worker's server holds. The parent changes it only
// while no worker runs; each worker builds its in-process server from it, so
// what the parent changes is what happened while nothing watched.
type serverState struct {
	Resources map[string]string `json:"resources"` // URI -> text
	Deleted   []string          `json:"deleted"`   // URIs the server had and no longer has
}

func readServerState(path string) (serverState, error) {
	var s serverState
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

func (s serverState) clone() serverState {
	return serverState{Resources: maps.Clone(s.Resources), Deleted: slices.Clone(s.Deleted)}
}

// downtime changes what the server holds while no worker runs: it deletes
// one or two resources (keeping two), sometimes recreates one deleted
// earlier with new text, and sometimes changes one.
func (s *serverState) downtime(rng *rand.Rand, run int) {
	if len(s.Deleted) > 0 && (len(s.Deleted) >= 3 || rng.IntN(3) == 0) {
		i := rng.IntN(len(s.Deleted))
		s.Resources[s.Deleted[i]] = fmt.Sprintf("recreated before run %d", run)
		s.Deleted = slices.Delete(s.Deleted, i, i+1)
	}
	present := slices.Sorted(maps.Keys(s.Resources))
	if rng.IntN(2) == 0 {
		uri := present[rng.IntN(len(present))]
		s.Resources[uri] = fmt.Sprintf("changed before run %d", run)
	}
	rng.Shuffle(len(present), func(i, j int) { present[i], present[j] = present[j], present[i] })
	// Two resources stay, so the worker has something to work on.
	for _, uri := range present[:max(0, min(1+rng.IntN(2), len(present)-2))] {
		delete(s.Resources, uri)
		s.Deleted = append(s.Deleted, uri)
	}
	slices.Sort(s.Deleted)
}

// TestCrashResumeWorker is not a test: run by TestCrashResume as a child
// process, it keeps a client on the bolt ledger in sync with a server built
// from the server file, announcing on stdout each step that committed, until
// it is killed or its stdin ends (then it stops cleanly, and the package's
// TestMain checks that nothing of it is left running).
func TestCrashResumeWorker(t *testing.T) {
	path := os.Getenv(envResumeLedger)
	if path == "" {
		t.Skip("run by TestCrashResume")
	}
	run, _ := strconv.Atoi(os.Getenv(envResumeRun))
	ctx, stop := untilStdinEnds()
	defer stop(nil)
	if err := resumeWorker(ctx, stop, path, os.Getenv(envResumeServer), run); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	fmt.Println("stopped")
}

// errStopped is the cause of the worker's context once its stdin ended.
var errStopped = errors.New("stdin ended")

// untilStdinEnds returns a crash worker's context: it ends, with the cause
// errStopped, once the test that runs the worker closes its stdin.
func untilStdinEnds() (context.Context, context.CancelCauseFunc) {
	ctx, stop := context.WithCancelCause(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop(errStopped)
	}()
	return ctx, stop
}

// resumer is the state of the resuming worker.
type resumer struct {
	run  int
	srv  *mcpsynctest.Server
	e    *mcpsync.Engine
	fail context.CancelCauseFunc // ends the run with an error

	// c and principal change when the worker revokes its principal; only
	// the worker's own goroutine uses them.
	c         *mcpsync.Client
	principal string
	// kit is the fault kit of the client's current connection.
	kit atomic.Pointer[mcpsynctest.Transport]

	wake wakeup // a transition, an outcome or an outbox entry
	out  sync.Mutex
}

// say announces one step that committed.
func (w *resumer) say(format string, args ...any) {
	w.out.Lock()
	defer w.out.Unlock()
	fmt.Printf(format+"\n", args...)
}

// principalOf is the worker's k-th principal: a revoked principal is never
// used again, so the worker moves on to the next.
func principalOf(k int) string { return fmt.Sprintf("user:w%d", k) }

func resumeWorker(ctx context.Context, fail context.CancelCauseFunc, ledgerPath, statePath string, run int) (err error) {
	state, err := readServerState(statePath)
	if err != nil {
		return err
	}
	w := &resumer{run: run, fail: fail, srv: mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: true})}
	for _, uri := range slices.Sorted(maps.Keys(state.Resources)) {
		w.srv.Set(uri, "text/plain", state.Resources[uri])
	}
	l, err := boltledger.Open(ledgerPath, &boltledger.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	w.e, err = mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, OnTransition: func(t mcpsync.Transition) {
		if t.To == ledger.StateUnsubscribing {
			w.say("closing %s %d", t.URI, t.SubscriptionGeneration) // the write that closes it committed
		}
		w.wake.notify()
	}})
	if err != nil {
		return err
	}
	revoked, err := l.Revoked(ctx)
	if err != nil {
		return err
	}
	k := 0
	for slices.ContainsFunc(revoked, func(r ledger.RevokedSubject) bool { return r.Subject == principalOf(k) }) {
		k++
	}
	w.principal = principalOf(k)
	var resumed []string
	for sub, err := range w.e.ResumableSubscriptions() {
		if err != nil {
			return err
		}
		if sub.Subject == w.principal {
			resumed = append(resumed, sub.URI)
		}
	}
	w.say("principal %s", w.principal)
	w.say("resuming %s", strings.Join(resumed, " "))

	consuming := make(chan struct{})
	cctx, stopConsuming := context.WithCancel(ctx)
	go func() {
		defer close(consuming)
		w.consume(cctx)
	}()
	defer func() {
		stopConsuming()
		<-consuming
	}()
	if err := w.connect(ctx, run%2 == 1); err != nil {
		return w.ended(ctx, err)
	}
	defer func() { err = errors.Join(err, w.c.Close()) }()
	// Only what the ledger does not list as left open is subscribed by
	// hand: a first run, or a principal that replaced a revoked one before
	// it had subscribed everything.
	if err := w.subscribe(ctx, func(uri string) bool { return !slices.Contains(resumed, uri) }); err != nil {
		return w.ended(ctx, err)
	}
	if err := w.sync(ctx); err != nil {
		return w.ended(ctx, err)
	}
	if err := w.checkResumed(resumed); err != nil {
		return err
	}
	w.say("synced")
	if err := w.awaitReconciled(ctx, resumed); err != nil {
		return w.ended(ctx, err)
	}
	w.say("reconciled")
	if reopens(run) {
		if err := w.reestablish(ctx); err != nil {
			return w.ended(ctx, err)
		}
	}
	return w.ended(ctx, w.work(ctx))
}

// ended is nil for an error that only says the worker was asked to stop,
// and the error otherwise (a failure of the consumer, if one ended the run).
func (w *resumer) ended(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errStopped):
		return nil
	case cause != nil:
		return cause
	}
	return err
}

// connect connects a client for the current principal; legacy pins the last
// protocol revision with resources/subscribe, otherwise the era is
// negotiated (subscriptions/listen).
func (w *resumer) connect(ctx context.Context, legacy bool) error {
	version := ""
	if legacy {
		version = "2025-11-25"
	}
	srv := w.srv
	c, err := mcpsync.Connect(ctx, func(context.Context) (transport.Interface, error) {
		kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), int64(w.run)+1)
		w.kit.Store(kit)
		return kit, nil
	}, &mcpsync.ClientOptions{
		Engine: w.e, Subject: w.principal, ProtocolVersion: version, Seed: uint64(w.run) + 1,
		OnOutcome: w.outcome,
		OnError:   func(err error) { w.say("client %q", err.Error()) },
	})
	if err != nil {
		return err
	}
	w.c = c
	w.say("session %d", c.Capabilities().SessionGeneration)
	return nil
}

// subscribe subscribes the URIs that want says, announcing each.
func (w *resumer) subscribe(ctx context.Context, want func(string) bool) error {
	for _, uri := range crashtest.URIs {
		if !want(uri) {
			continue
		}
		// A resource deleted during the downtime is subscribed all the
		// same: Subscribe says it is not there, and the subscription stays
		// open to pick it up when it is back.
		if _, err := w.c.Subscribe(ctx, uri); err != nil && !errors.Is(err, mcpsync.ErrNotFound) {
			return fmt.Errorf("subscribe %s: %w", uri, err)
		}
		w.say("subscribed %s %s", w.principal, uri)
	}
	return nil
}

// sync waits until every subscription had its first read in this session.
func (w *resumer) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, workerWait)
	defer cancel()
	if err := w.c.WaitForSync(ctx); err != nil {
		return fmt.Errorf("WaitForSync: %w", err)
	}
	return nil
}

// checkResumed checks, once WaitForSync returned, that it covered every
// resumed subscription: each is open in this session and serves what the
// server has, or has had its not-found.
func (w *resumer) checkResumed(resumed []string) error {
	gen := w.c.Capabilities().SessionGeneration
	for _, uri := range resumed {
		sub, err := w.e.Subscription(uri)
		if err != nil {
			return err
		}
		if sub.SessionGeneration != gen {
			return fmt.Errorf("after WaitForSync %s is %s in session %d, not resumed in session %d", uri, sub.State, sub.SessionGeneration, gen)
		}
		text, present := w.srv.Text(uri)
		switch {
		case present:
			if got, err := w.served(uri); err != nil || got != text {
				return fmt.Errorf("after WaitForSync %s (%s) serves %q (%v), its server has %q", uri, sub.State, got, err, text)
			}
		case sub.Watermark == 0 && sub.State != ledger.StateTombstoned:
			// A read that follows the not-found may be in flight (READ_PENDING).
			return fmt.Errorf("after WaitForSync %s is %s with no read passed, its server has no such resource", uri, sub.State)
		}
	}
	return nil
}

// awaitReconciled waits until the resume confirmed the deletion of every
// resumed resource its server no longer has.
func (w *resumer) awaitReconciled(ctx context.Context, resumed []string) error {
	gen := w.c.Capabilities().SessionGeneration
	var gone []string
	for _, uri := range resumed {
		if _, ok := w.srv.Text(uri); !ok {
			gone = append(gone, uri)
		}
	}
	return w.await(ctx, "the resume to confirm the deletions of "+strings.Join(gone, " "), func() (bool, string) {
		var states []string
		done := true
		for _, uri := range gone {
			sub, err := w.e.Subscription(uri)
			if err != nil {
				return false, err.Error()
			}
			if sub.SessionGeneration != gen || sub.State != ledger.StateTombstoned {
				done = false
			}
			states = append(states, fmt.Sprintf("%s %s in session %d", uri, sub.State, sub.SessionGeneration))
		}
		return done, strings.Join(states, ", ")
	})
}

// work changes the server and the ledger at random until ctx ends.
func (w *resumer) work(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(uint64(w.run), 16))
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		uri := crashtest.URIs[rng.IntN(len(crashtest.URIs))]
		_, present := w.srv.Text(uri)
		var err error
		switch op := rng.IntN(30); {
		case op == 0:
			err = w.rotate(ctx)
		case op <= 3 && present:
			err = w.delete(ctx, uri)
		case op <= 7:
			err = w.derive(uri, n)
		default:
			// A change, or the recreation of a resource the server lacks.
			err = w.change(ctx, uri, fmt.Sprintf("run %d step %d", w.run, n))
		}
		if err != nil {
			return err
		}
	}
}

// change sets uri's text on the server and waits until the client serves it.
func (w *resumer) change(ctx context.Context, uri, text string) error {
	w.srv.Set(uri, "text/plain", text)
	if err := w.await(ctx, fmt.Sprintf("%s to serve %q", uri, text), func() (bool, string) {
		got, err := w.served(uri)
		return err == nil && got == text, fmt.Sprintf("serves %q (%v); %s", got, err, w.diagnose(uri))
	}); err != nil {
		return err
	}
	w.say("changed %s", uri)
	return nil
}

// reopens reports whether run reopens what it watches once it reconciled
// (reestablish), to be killed right after the first generation it closes:
// a 2026-07-28 run (an even one), one in four.
func reopens(run int) bool { return run%4 == 2 }

// reestablish has the server end the 2026-07-28 listen streams and waits
// until the client opened every URI they carried in a new generation. A
// kill anywhere in between leaves each of them resumed by the next run
// (announced): the old generation's close and the new one's opening are
// one write.
func (w *resumer) reestablish(ctx context.Context) error {
	gens := map[string]uint64{}
	for sub, err := range w.e.Subscriptions() {
		if err != nil {
			return err
		}
		if sub.Subject == w.principal && sub.State.Open() && sub.Mode == ledger.ModePush {
			gens[sub.URI] = sub.SubscriptionGeneration
		}
	}
	w.kit.Load().EndListenStreams()
	w.say("ended listen streams")
	if err := w.await(ctx, "the URIs of the ended streams to be reopened", func() (bool, string) {
		var left []string
		for _, uri := range slices.Sorted(maps.Keys(gens)) {
			sub, err := w.e.Subscription(uri)
			if err != nil {
				return false, err.Error()
			}
			if sub.SubscriptionGeneration <= gens[uri] || sub.State == ledger.StateSubscribing {
				left = append(left, fmt.Sprintf("%s %s gen %d", uri, sub.State, sub.SubscriptionGeneration))
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	}); err != nil {
		return err
	}
	w.say("reopened %d", len(gens))
	return nil
}

// diagnose describes uri's subscription and what its server knows of it.
func (w *resumer) diagnose(uri string) string {
	sub, err := w.e.Subscription(uri)
	if err != nil {
		return err.Error()
	}
	text, present := w.srv.Text(uri)
	return fmt.Sprintf("%s gen %d in session %d (now %d), mode %q (%s), watermark %d, issued %d, server subscribed %v, has %v %q, reads %d, health %+v",
		sub.State, sub.SubscriptionGeneration, sub.SessionGeneration, w.c.Capabilities().SessionGeneration, sub.Mode, sub.ModeReason,
		sub.Watermark, sub.LastIssuedOrdinal, w.srv.Subscribed(uri), present, text, w.srv.Reads(uri), w.c.Health())
}

// delete deletes uri on the server, waits for the fenced not-found, and has
// a catalog confirm the tombstone. A read that follows the not-found (a
// revalidation the client asked for earlier, say) can leave the verdict to
// a later scan: the catalog began before that read's not-found, or found
// the read in flight. The worker then scans again, as any caller of
// Reconcile must.
func (w *resumer) delete(ctx context.Context, uri string) error {
	w.srv.Delete(uri)
	for range 10 {
		if err := w.awaitState(ctx, uri, ledger.StateTombstonePending, ledger.StateTombstoned); err != nil {
			return err
		}
		cat, err := w.c.Scan(ctx, mcpsync.KindResources)
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		// A read that moved the state meanwhile is a transition error;
		// the next pass waits for its answer.
		if _, err := w.c.Reconcile(cat); err != nil && !errors.Is(err, mcpsync.ErrIllegalTransition) {
			return fmt.Errorf("reconcile: %w", err)
		}
		sub, err := w.e.Subscription(uri)
		if err != nil {
			return err
		}
		if sub.State == ledger.StateTombstoned {
			w.say("deleted %s", uri)
			return nil
		}
	}
	return fmt.Errorf("%s: ten catalogs confirmed no tombstone", uri)
}

// derive records an artifact derived from uri's current version, if it
// serves one.
func (w *resumer) derive(uri string, n int) error {
	entry, err := w.e.Lookup(w.principal, uri)
	if err != nil {
		return nil // nothing to derive from
	}
	id := fmt.Sprintf("%d-%d", w.run, n)
	if err := w.e.RecordDerived(ledger.DerivedArtifact{Index: "chunks", ArtifactID: id, Version: entry.Version}); err != nil {
		return fmt.Errorf("record derived %s: %w", id, err)
	}
	w.say("derived %s %s", uri, id)
	return nil
}

// rotate revokes the worker's principal and goes on as the next one: a new
// client, which subscribes everything again for it.
func (w *resumer) rotate(ctx context.Context) error {
	if _, err := w.e.RevokeSubject(w.principal); err != nil {
		return err
	}
	w.say("revoked %s", w.principal)
	if err := w.c.Close(); err != nil {
		return err
	}
	k, _ := strconv.Atoi(strings.TrimPrefix(w.principal, "user:w"))
	w.principal = principalOf(k + 1)
	w.say("principal %s", w.principal)
	if err := w.connect(ctx, w.run%2 == 1); err != nil {
		return err
	}
	if err := w.subscribe(ctx, func(string) bool { return true }); err != nil {
		return err
	}
	if err := w.sync(ctx); err != nil {
		return err
	}
	w.say("resynced")
	return nil
}

// served returns the text uri serves to the worker's principal.
func (w *resumer) served(uri string) (string, error) {
	entry, err := w.e.Lookup(w.principal, uri)
	if err != nil {
		return "", err
	}
	if len(entry.Contents) != 1 {
		return "", fmt.Errorf("%d contents", len(entry.Contents))
	}
	return entry.Contents[0].Text, nil
}

// awaitState waits until uri's subscription in the current session is in
// one of states.
func (w *resumer) awaitState(ctx context.Context, uri string, states ...ledger.SubscriptionState) error {
	gen := w.c.Capabilities().SessionGeneration
	return w.await(ctx, fmt.Sprintf("%s to be %v", uri, states), func() (bool, string) {
		sub, err := w.e.Subscription(uri)
		if err != nil {
			return false, err.Error()
		}
		return sub.SessionGeneration == gen && slices.Contains(states, sub.State),
			fmt.Sprintf("%s in session %d", sub.State, sub.SessionGeneration)
	})
}

// await waits, at most workerWait, until done reports true; it checks again
// at every wake-up. The error names what it waited for and the last status
// done gave.
func (w *resumer) await(ctx context.Context, what string, done func() (bool, string)) error {
	deadline := time.NewTimer(workerWait)
	defer deadline.Stop()
	for {
		wake := w.wake.wait()
		ok, status := done()
		if ok {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("waited %v for %s: %s", workerWait, what, status)
		}
	}
}

// outcome announces each fenced read: its request id, and the version it
// accepted.
func (w *resumer) outcome(out mcpsync.Outcome) {
	if out.Accepted {
		v := out.Version
		w.say("ticket %d", v.RequestID)
		w.say("accepted %s %d %d %s", v.Version.URI, v.Version.SubscriptionGeneration, v.Version.ReadOrdinal, v.Decision)
	} else if out.Stale.RequestID != 0 {
		w.say("ticket %d", out.Stale.RequestID)
	}
	w.wake.notify()
}

// consume reads the outbox as a downstream index would, acknowledging each
// entry, and announces the tombstones it finds. A failure ends the run.
func (w *resumer) consume(ctx context.Context) {
	for en, err := range w.e.Consume(ctx, indexConsumer) {
		if err == nil {
			err = w.e.Acknowledge(ctx, indexConsumer, en.Seq)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.fail(fmt.Errorf("consume: %w", err))
			}
			return
		}
		if en.Reason == ledger.InvalidateTombstoned {
			w.say("tombstoned %s %d", en.URI, en.Seq)
		}
		w.wake.notify()
	}
}

// wakeup wakes every goroutine waiting for the next change.
type wakeup struct {
	mu sync.Mutex    // protects ch
	ch chan struct{} // closed by the next notify; nil while nobody waits
}

func (s *wakeup) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *wakeup) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Crash with resume: a worker process keeps a client on the bolt ledger in
// sync with a server whose state outlives it, and is killed with SIGKILL at
// random points of a run with changes, deletions, recreations, revocations
// and derived artifacts, or (one run in four) right after the first write
// of the reopens that follow listen streams the server ended. Between runs
// resources are deleted, recreated and changed while nothing watches. Each
// restart resumes what the earlier process left open, without subscribing
// again. After each kill the ledger passes every check of
// TestCrashConsistency, and:
//   - a restarted worker resumes every subscription its principal made;
//   - once a restart synced, a resource recreated during the downtime is
//     served again, with no tombstone before it;
//   - once it reconciled, every resumed resource its server lacks is
//     tombstoned, its outbox entry written by that run unless an earlier
//     one already told consumers to delete it.
func TestCrashResume(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	kills := crashtest.Kills(20)
	dir := t.TempDir()
	ledgerPath, statePath := filepath.Join(dir, "worker.db"), filepath.Join(dir, "server.json")
	rng := rand.New(rand.NewPCG(16, uint64(time.Now().UnixNano())))

	l, err := boltledger.Open(ledgerPath, nil)
	require.NoError(t, err)
	require.NoError(t, l.Ack(t.Context(), auditConsumer, 0))
	require.NoError(t, l.Close())

	state := serverState{Resources: map[string]string{}}
	for _, uri := range crashtest.URIs {
		state.Resources[uri] = "first text of " + uri
	}
	c := crashtest.NewChecker(crashtest.URIs)
	r := resumeChecker{subscribed: map[string]map[string]bool{}}
	var prev ledger.Snapshot
	for run := range kills + 1 {
		before := state.clone()
		if run > 0 {
			state.downtime(rng, run)
		}
		writeServerState(t, statePath, state)
		label := fmt.Sprintf("run %d", run)
		w := crashtest.Start(t, "TestCrashResumeWorker",
			envResumeLedger+"="+ledgerPath, envResumeServer+"="+statePath, envResumeRun+"="+strconv.Itoa(run))
		var ev []string
		switch {
		case run < kills && reopens(run):
			// Killed as the reopen of what it watches closes the first
			// generation: the next run must resume every URI all the same.
			ev = w.Kill(t, w.AwaitMatch(t, label, func(line string) bool {
				return strings.HasPrefix(line, "closing ") || strings.HasPrefix(line, "reopened ")
			}))
			t.Logf("%s: killed after %q", label, crashtest.Last(ev))
		case run < kills:
			ev = w.Kill(t, w.Await(t, label, 1+rng.IntN(90)))
			t.Logf("%s: killed after %q", label, crashtest.Last(ev))
		default:
			// The last run is asked to stop once it reconciled: it must
			// exit cleanly, with none of its goroutines left (TestMain).
			ev = w.Stop(t, label, w.AwaitLine(t, label, "reconciled"))
			require.Contains(t, ev, "stopped", "%s: a clean stop", label)
		}
		a := parseResumeRun(ev)
		r.announced(t, label, a, c.Revoked())
		c.Events(t, ev)
		snap := checkFile(t, c, ledgerPath)
		r.check(t, label, a, before, state, prev, snap)
		prev = snap
	}
}

func writeServerState(t *testing.T, path string, s serverState) {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// resumeRun is what one run of the worker announced about its resume.
type resumeRun struct {
	principal  string
	session    uint64   // the session the run resumed in
	resuming   []string // what the ledger listed as left open for principal
	synced     bool
	reconciled bool
	// subscribed lists, per principal, the URIs the run subscribed by hand.
	subscribed map[string][]string
}

func parseResumeRun(lines []string) resumeRun {
	var a resumeRun
	a.subscribed = map[string][]string{}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "principal" && a.principal == "":
			a.principal = f[1]
		case f[0] == "resuming":
			a.resuming = f[1:]
		case f[0] == "session" && a.session == 0:
			a.session, _ = strconv.ParseUint(f[1], 10, 64)
		case f[0] == "subscribed":
			a.subscribed[f[1]] = append(a.subscribed[f[1]], f[2])
		case line == "synced":
			a.synced = true
		case line == "reconciled":
			a.reconciled = true
		}
	}
	return a
}

// resumeChecker holds what earlier runs subscribed.
type resumeChecker struct {
	subscribed map[string]map[string]bool // principal -> URIs it subscribed or resumed
}

// announced checks what the run said about its start against earlier runs:
// its principal was not revoked, and the ledger listed as left open every
// subscription that principal made.
func (r *resumeChecker) announced(t *testing.T, label string, a resumeRun, revoked map[string]bool) {
	t.Helper()
	if a.principal == "" {
		return // killed before it said
	}
	assert.False(t, revoked[a.principal], "%s: works as %s, which was revoked", label, a.principal)
	if a.resuming != nil {
		for uri := range r.subscribed[a.principal] {
			assert.Contains(t, a.resuming, uri, "%s: %s subscribed %s and never unsubscribed it: it is resumed", label, a.principal, uri)
		}
		r.add(a.principal, a.resuming...)
	}
	for p, uris := range a.subscribed {
		r.add(p, uris...)
	}
}

func (r *resumeChecker) add(principal string, uris ...string) {
	if r.subscribed[principal] == nil {
		r.subscribed[principal] = map[string]bool{}
	}
	for _, uri := range uris {
		r.subscribed[principal][uri] = true
	}
}

// check checks the run's outbox entries (those after prev's) against the
// downtime before it, which turned before into now.
func (r *resumeChecker) check(t *testing.T, label string, a resumeRun, before, now serverState, prev, snap ledger.Snapshot) {
	t.Helper()
	var entries []ledger.OutboxEntry
	for _, en := range snap.Outbox {
		if en.Seq > prev.State.Last {
			entries = append(entries, en)
		}
	}
	if a.synced {
		for _, uri := range a.resuming {
			_, had := before.Resources[uri]
			_, has := now.Resources[uri]
			if had || !has {
				continue
			}
			i := slices.IndexFunc(entries, func(en ledger.OutboxEntry) bool { return en.URI == uri })
			require.GreaterOrEqual(t, i, 0, "%s: %s, recreated during the downtime, has no outbox entry after the run synced", label, uri)
			en := entries[i]
			assert.Equal(t, ledger.InvalidateUpdated, en.Reason, "%s: %s, recreated during the downtime, is served again first (entry %d)", label, uri, en.Seq)
			assert.Equal(t, a.session, en.Version.SessionGeneration, "%s: %s, recreated during the downtime, is read in the resumed session", label, uri)
		}
	}
	if a.reconciled {
		for _, uri := range a.resuming {
			if _, has := now.Resources[uri]; has {
				continue
			}
			if rec := prev.Records[uri]; rec == nil || rec.Current == nil ||
				rec.Current.Status == ledger.VersionTombstoned || rec.Current.Status == ledger.VersionRevoked {
				continue // consumers were already told to delete what it fed
			}
			assert.True(t, slices.ContainsFunc(entries, func(en ledger.OutboxEntry) bool {
				return en.URI == uri && en.Reason == ledger.InvalidateTombstoned
			}), "%s: %s, deleted while nothing watched, has no tombstone in the outbox", label, uri)
		}
	}
}
