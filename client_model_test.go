package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// TestModelClientProgress drives a Client over the mcpsynctest server, in
// either protocol era, through a random schedule of subscribes,
// unsubscribes and unsubscribe-subscribe cycles, reconnects (also racing a
// Subscribe or an Unsubscribe, parked at their requests by the fault kit so
// the race is the same at every run of a seed), server-side changes,
// deletions and recreations, notification faults, failed and timed-out
// reads and, in 2026-07-28, listen streams the server ends. Then the
// faults stop, the server goes quiet, and fake time runs past the published
// staleness bound of every open subscription and two intervals of the kept
// scan. The progress property must hold (see requireProgress and
// requireStaysClosed), and all along no served or accepted version goes
// back and no resource is tombstoned while the server has it.
//
// The server has no snapshot extension, as no third-party server does, and
// the client keeps scanning (KeepScanning) under the default deletion
// policy, so every deletion it confirms is corroborated: a resource the
// server deleted is tombstoned once the faults stop.
//
// A check costs a whole client session, about a hundred times an engine
// model check, so the test runs RAPID_CHECKS/20 of them when RAPID_CHECKS is
// set (100 under make test's 2000) and rapid's default of 100 otherwise;
// the rest of rapid's checks return at once. A failing check turns the
// budget off so that rapid can shrink and replay it.
func TestModelClientProgress(t *testing.T) {
	budget := clientModelChecks()
	ran, failed := 0, false
	synctest.Test(t, func(t *testing.T) {
		// rapid asks a *testing.T for its deadline, which a bubble forbids;
		// wrapped, it assumes none.
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			if ran >= budget && !failed {
				return
			}
			ran++
			defer func() {
				if rt.Failed() {
					failed = true
				}
			}()
			m := newClientModel(rt)
			for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
				m.step(rt, i)
				m.checkSafety(rt)
			}
			m.quiet()
			m.checkSafety(rt)
			m.checkAccepted(rt)
			for _, u := range clientModelURIs {
				switch lc := m.last[u]; {
				case lc == nil || lc.err != nil && !errors.Is(lc.err, mcpsync.ErrNotFound):
					// Never asked for, or the caller was told it failed.
				case lc.op == opSubscribe:
					m.requireProgress(rt, u)
				default:
					m.requireStaysClosed(rt, u, lc.sub)
				}
			}
		})
	})
}

// bubbleTB hides from rapid that it runs on the *testing.T of a
// testing/synctest bubble.
type bubbleTB struct{ *testing.T }

func clientModelChecks() int {
	if n, err := strconv.Atoi(os.Getenv("RAPID_CHECKS")); err == nil && n > 0 {
		return max(n/20, 10)
	}
	return 100
}

var clientModelURIs = []string{"file:///live/a.md", "file:///live/b.md", "file:///live/c.md"}

const (
	clientModelRevalidate = 2 * time.Second
	clientModelTimeout    = time.Second
	clientModelJitter     = 0.2
	// clientModelReview is the interval of the kept scan.
	clientModelReview = 2 * time.Second
)

const (
	opSubscribe   = "Subscribe"
	opUnsubscribe = "Unsubscribe"
)

// lastCall is the caller's last word on a URI.
type lastCall struct {
	op  string
	err error
	sub mcpsync.Subscription // what the call returned
}

type clientModel struct {
	r      *rig
	era    string
	seq    int // server text version; rises at every change, across deletions
	last   map[string]*lastCall
	holds  []*mcpsynctest.Hold
	calls  sync.WaitGroup // calls of the client the model runs on goroutines
	log    []string
	served map[string]servedAt // newest version each URI was served at
	// quietAt is the number of outcomes reported when the faults stopped.
	quietAt int
	// outSeq is the last outbox entry checked for late tombstones.
	outSeq uint64
	// heldReads are the read answers the kit holds back ("read fails" by a
	// hold): the server gave each when its request arrived, and quiet
	// delivers those whose caller still waits.
	heldReads []*heldRead
}

// heldRead is a read answer the kit holds, and whether the server lacked
// the URI when it gave the answer.
type heldRead struct {
	uri      string
	hold     *mcpsynctest.Hold
	answered bool
	absent   bool
	excused  bool // a tombstone rested on it
}

type servedAt struct {
	pos fencePos
	ver int
}

func newClientModel(rt *rapid.T) *clientModel {
	w := rapid.SampledFrom(eras).Draw(rt, "protocol era")
	srv := mcpsynctest.NewServer(nil)
	m := &clientModel{era: w.version, last: map[string]*lastCall{}, served: map[string]servedAt{}}
	for _, u := range clientModelURIs {
		srv.Set(u, "text/plain", m.nextText())
	}
	opts := mcpsync.ClientOptions{
		RevalidateEvery: clientModelRevalidate, PollEvery: clientModelRevalidate, Jitter: clientModelJitter,
		RequestTimeout: clientModelTimeout, Seed: rapid.Uint64Min(1).Draw(rt, "client seed"),
		// The default window, or one long enough for a reconnect or a
		// resubscribe to land inside it.
		CoalesceWindow: rapid.SampledFrom([]time.Duration{0, time.Second}).Draw(rt, "coalescing window"),
		Scanner: &mcpsync.ScannerOptions{
			ReviewAfter: clientModelReview, StaleAfter: 2 * clientModelReview,
			BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		},
	}
	r, err := connectRig(context.Background(), w, rigConfig{opts: opts, srv: srv, kitSeed: rapid.Int64().Draw(rt, "kit seed")})
	require.NoError(rt, err)
	m.r = r
	rt.Cleanup(func() {
		// A check that fails (or that rapid abandons while shrinking) in
		// the middle of a race leaves a call running; Close waits for it,
		// since Close racing a call is a test of its own
		// (TestLivenessCloseBounded), not what this one is about.
		for _, h := range m.holds {
			h.Release()
		}
		m.calls.Wait()
		_ = r.close()
	})
	m.logf("connect %s, coalescing window %s", w.version, opts.CoalesceWindow)
	for _, u := range clientModelURIs {
		if rapid.Bool().Draw(rt, "subscribe "+u+" at start") {
			m.subscribe(u)
		}
	}
	_, err = r.c.KeepScanning(nil)
	require.NoError(rt, err)
	synctest.Wait()
	return m
}

func (m *clientModel) nextText() string {
	m.seq++
	return "v" + strconv.Itoa(m.seq)
}

func (m *clientModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

func (m *clientModel) schedule() string { return "\n  " + strings.Join(m.log, "\n  ") }

func (m *clientModel) modern() bool { return mcpsync.EraOf(m.era) == mcpsync.EraModern }

func (m *clientModel) unsubscribeMethod() string {
	if m.modern() {
		return string(mcp.MethodSubscriptionsListen)
	}
	return string(mcp.MethodResourcesUnsubscribe)
}

func (m *clientModel) subscribe(u string) {
	sub, err := m.r.c.Subscribe(context.Background(), u)
	m.record(u, opSubscribe, sub, err)
}

func (m *clientModel) unsubscribe(u string) {
	sub, err := m.r.c.Unsubscribe(context.Background(), u)
	m.record(u, opUnsubscribe, sub, err)
}

func (m *clientModel) record(u, op string, sub mcpsync.Subscription, err error) {
	m.last[u] = &lastCall{op: op, err: err, sub: sub}
	m.logf("%s(%s) = %s session %d generation %d mode %q, err %v", op, u, sub.State, sub.SessionGeneration, sub.SubscriptionGeneration, sub.Mode, err)
}

func (m *clientModel) reconnect() {
	err := m.r.c.Reconnect(context.Background())
	m.logf("Reconnect() = %v (session %d)", err, m.r.c.Engine().SessionGeneration())
}

// hold parks the next request of method on kit before the server; every
// hold is released by the end of its step (and by Cleanup).
func (m *clientModel) hold(kit *mcpsynctest.Transport, method string) *mcpsynctest.Hold {
	h := kit.HoldNextRequest(method, "")
	m.holds = append(m.holds, h)
	return h
}

// step runs one random action of the schedule and lets the client catch up.
func (m *clientModel) step(rt *rapid.T, i int) {
	u := rapid.SampledFrom(clientModelURIs).Draw(rt, fmt.Sprintf("uri %d", i))
	kit := m.r.faults()
	actions := []string{
		"subscribe", "subscribe", "unsubscribe", "unsubscribe then subscribe", "reconnect",
		"subscribe racing reconnect", "unsubscribe racing reconnect", "reconnect racing a call",
		"change", "change", "change", "delete", "recreate", "read fails", "time passes",
	}
	if m.modern() {
		actions = append(actions, "listen streams end")
	}
	switch action := rapid.SampledFrom(actions).Draw(rt, fmt.Sprintf("action %d", i)); action {
	case "subscribe":
		m.subscribe(u)
	case "unsubscribe":
		m.unsubscribe(u)
	case "unsubscribe then subscribe":
		m.unsubscribe(u)
		m.subscribe(u)
	case "reconnect":
		m.reconnect()
	case "subscribe racing reconnect", "unsubscribe racing reconnect":
		// The call is parked at its request to the server (if it sends
		// one) while the whole reconnect runs, then goes on.
		op, call, method := opSubscribe, m.r.c.Subscribe, m.r.subscribeMethod()
		if action == "unsubscribe racing reconnect" {
			op, call, method = opUnsubscribe, m.r.c.Unsubscribe, m.unsubscribeMethod()
		}
		h := m.hold(kit, method)
		done := make(chan *lastCall, 1)
		m.calls.Go(func() {
			sub, err := call(context.Background(), u)
			done <- &lastCall{op: op, err: err, sub: sub}
		})
		synctest.Wait()
		m.logf("%s(%s) parked at its request: %v", op, u, arrived(h))
		m.reconnect()
		h.Release()
		lc := <-done
		m.record(u, lc.op, lc.sub, lc.err)
	case "reconnect racing a call":
		// The reconnect is parked at its first resubscribe while the
		// caller subscribes or unsubscribes.
		parked := make(chan *mcpsynctest.Hold, 1)
		var first sync.Once
		m.r.setOnDial(func(_ int, kit *mcpsynctest.Transport) {
			// Only the first dial parks: healing may dial on its own too.
			first.Do(func() { parked <- kit.HoldNextRequest(m.r.subscribeMethod(), "") })
		})
		done := make(chan error, 1)
		m.calls.Go(func() { done <- m.r.c.Reconnect(context.Background()) })
		synctest.Wait()
		m.r.setOnDial(nil)
		var h *mcpsynctest.Hold
		select {
		case h = <-parked:
			m.holds = append(m.holds, h)
		default:
		}
		m.logf("Reconnect parked at its first resubscribe: %v", h != nil && arrived(h))
		if h != nil && !arrived(h) {
			h.Release() // nothing to resubscribe: the call below must not meet the hold
		}
		if rapid.Bool().Draw(rt, fmt.Sprintf("subscribe during reconnect %d", i)) {
			m.subscribe(u)
		} else {
			m.unsubscribe(u)
		}
		if h != nil {
			h.Release()
		}
		m.logf("Reconnect() = %v (session %d)", <-done, m.r.c.Engine().SessionGeneration())
	case "change", "recreate":
		switch rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("notification fault %d", i)) {
		case 1:
			kit.DropNext(u, 1)
			m.logf("drop the next notification of %s", u)
		case 2:
			kit.DuplicateNext(u, 1)
			m.logf("duplicate the next notification of %s", u)
		case 3:
			kit.ReorderNext(u)
			m.logf("reorder the next notification of %s", u)
		}
		text := m.nextText()
		if action == "recreate" {
			m.r.srv.Recreate(u, text)
		} else {
			m.r.srv.Set(u, "text/plain", text)
		}
		m.logf("server: %s %s to %q", action, u, text)
	case "delete":
		m.r.srv.Delete(u)
		m.logf("server: delete %s", u)
	case "read fails":
		read := string(mcp.MethodResourcesRead)
		switch kind := rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("read fault %d", i)); kind {
		case 0:
			kit.FailNext(read, u, -32603, "internal error")
		case 1:
			kit.BreakNext(read, u, errors.New("connection reset"))
		default:
			// Times out after RequestTimeout, unless quiet delivers it.
			m.heldReads = append(m.heldReads, &heldRead{uri: u, hold: kit.HoldNext(read, u)})
		}
		m.logf("the next read of %s fails", u)
	case "listen streams end":
		kit.EndListenStreams()
		m.logf("server: end listen streams")
	case "time passes":
		d := time.Duration(rapid.IntRange(1, 30).Draw(rt, fmt.Sprintf("tenths of a second %d", i))) * 100 * time.Millisecond
		time.Sleep(d)
		m.logf("%s pass", d)
	}
	synctest.Wait()
}

// quiet stops every fault, leaves the server alone and lets fake time run
// past the published staleness bound of every open subscription, plus one
// request timeout (a read in flight at the last fault may take that long
// to fail) and a coalescing window.
func (m *clientModel) quiet() {
	m.r.faults().Heal()
	for _, h := range m.holds {
		h.Release()
	}
	synctest.Wait()
	m.quietAt = len(m.r.outcomesSoFar())
	bound := time.Duration(float64(clientModelRevalidate) * (1 + clientModelJitter))
	for sub, err := range m.r.c.Engine().Subscriptions() {
		if err == nil && openState(sub.State) {
			bound = max(bound, time.Duration(sub.StalenessBoundMs)*time.Millisecond)
		}
	}
	// A deletion is confirmed by the second kept scan after the faults
	// stop at the latest, and its second read.
	wait := max(bound, 2*clientModelReview) + clientModelTimeout + 2*time.Second
	m.logf("quiet: faults healed, %s of fake time", wait)
	time.Sleep(wait)
	synctest.Wait()
}

// The progress property for a URI whose last call was a successful
// Subscribe (or one that said the server has no such resource), once the
// server is quiet. While the server has the resource: the subscription is
// open (ACTIVE or a read sub-state) in the current session generation and
// Lookup serves exactly the server's text. Once the server deleted it: the
// subscription is TOMBSTONED in the current session (or reading the
// tombstone again), its deletion confirmed by the kept scan, and Lookup
// serves nothing. Otherwise the URI
// must be visibly failing, which only counts when Lookup serves nothing:
// Lookup refuses with a reason of its own (revoked, forbidden,
// quarantined), or the fence refused a read of the current generation
// since the server went quiet. Old text served with a nil error is always
// a failure (silently stale); so is a subscription left in an older
// session, or one the server has that serves nothing (stuck).
func (m *clientModel) requireProgress(rt *rapid.T, u string) {
	rt.Helper()
	e := m.r.c.Engine()
	sub, err := e.Subscription(u)
	require.NoError(rt, err)
	want, exists := m.r.srv.Text(u)
	text, lerr := m.r.text(u)
	current := sub.SessionGeneration == e.SessionGeneration()
	fail := func(what string) {
		rt.Fatalf("progress: %s; last call %s; %s\nschedule:%s", what, m.lastWord(u), m.r.describe(u), m.schedule())
	}
	switch {
	case lerr == nil && (!exists || text != want):
		fail("silently stale, old text served with a nil error")
	case !current:
		fail("stuck, subscribed in an older session")
	case exists && !openState(sub.State):
		fail("stuck, the server has the resource but the subscription is not open")
	case !exists && sub.State != ledger.StateTombstoned && (!openState(sub.State) || sub.TombstonedAt.IsZero()):
		// Open with TombstonedAt set: a read of the tombstone in flight.
		fail("stuck, the resource is gone but its deletion is not confirmed")
	case exists && lerr != nil && !m.visiblyFailing(u, sub, lerr):
		fail("stuck, the server has the resource and nothing is served, with no reason given")
	}
}

func (m *clientModel) visiblyFailing(u string, sub mcpsync.Subscription, lerr error) bool {
	if errors.Is(lerr, mcpsync.ErrRevoked) || errors.Is(lerr, mcpsync.ErrForbidden) || errors.Is(lerr, mcpsync.ErrQuarantined) {
		return true
	}
	for _, o := range m.r.outcomesSoFar()[m.quietAt:] {
		s := o.Stale
		if !o.Accepted && s.URI == u && s.SessionGeneration == sub.SessionGeneration && s.SubscriptionGeneration == sub.SubscriptionGeneration {
			return true
		}
	}
	return false
}

// A URI whose last call was a successful Unsubscribe stays closed: the
// generation that call closed is still the URI's, CLOSED or
// UNSUBSCRIBE_UNKNOWN, and the server has no subscription for it.
func (m *clientModel) requireStaysClosed(rt *rapid.T, u string, closed mcpsync.Subscription) {
	rt.Helper()
	sub, err := m.r.c.Engine().Subscription(u)
	require.NoError(rt, err)
	if sub.SubscriptionGeneration != closed.SubscriptionGeneration ||
		(sub.State != ledger.StateClosed && sub.State != ledger.StateUnsubscribeUnknown) || m.r.srv.Subscribed(u) {
		rt.Fatalf("progress: unsubscribed but watched again; last call %s; %s\nschedule:%s", m.lastWord(u), m.r.describe(u), m.schedule())
	}
}

// lateNotFound reports whether a held answer that the server gave while it
// lacked u reached the client, and takes it: the not-found a tombstone of
// u may rest on after u was created again.
func (m *clientModel) lateNotFound(u string) bool {
	for _, h := range m.heldReads {
		select {
		case <-h.hold.Passed():
			if h.uri == u && h.absent && !h.excused {
				h.excused = true
				return true
			}
		default:
		}
	}
	return false
}

func (m *clientModel) lastWord(u string) string {
	lc := m.last[u]
	return fmt.Sprintf("%s = %s session %d generation %d, err %v", lc.op, lc.sub.State, lc.sub.SessionGeneration, lc.sub.SubscriptionGeneration, lc.err)
}

// checkSafety: what Lookup serves never goes back, neither in the fence's
// order nor in the server's versions; and no deletion is confirmed while the
// server has the resource. It runs between steps, when the client has done
// all it can (synctest.Wait): the server changes only within a step, before
// the client acts on it, so a tombstone written during a step after which
// the server has the resource rests on no read of this step (each found
// it), and is a resource deleted and recreated around the evidence. The one
// answer that crosses steps is a held one: the server gave it when its
// request arrived, as the URI was then, and quiet delivers it after a step
// that may have created the URI again. A tombstone may rest on such an
// answer, given while the server lacked the URI (the evidence was true
// when it was gathered, and no newer read was out); each excuses one.
func (m *clientModel) checkSafety(rt *rapid.T) {
	rt.Helper()
	for _, h := range m.heldReads {
		select {
		case <-h.hold.Arrived():
			if !h.answered {
				_, exists := m.r.srv.Text(h.uri)
				h.answered, h.absent = true, !exists
			}
		default:
		}
	}
	entries, err := m.r.c.Engine().PullOutbox(m.outSeq, 0)
	require.NoError(rt, err)
	for _, en := range entries {
		m.outSeq = en.Seq
		if en.Reason != ledger.InvalidateTombstoned {
			continue
		}
		if _, exists := m.r.srv.Text(en.URI); exists && !m.lateNotFound(en.URI) {
			rt.Fatalf("safety: %s tombstoned (outbox entry %d, evidence %+v) while the server has it\nschedule:%s", en.URI, en.Seq, en.Evidence, m.schedule())
		}
		if en.Evidence == nil || en.Evidence.Kind != ledger.EvidenceCorroborated || len(en.Evidence.Reads) != 2 || len(en.Evidence.Scans) != 2 {
			rt.Fatalf("safety: %s tombstoned with evidence %+v; only corroboration is possible here\nschedule:%s", en.URI, en.Evidence, m.schedule())
		}
	}
	for _, u := range clientModelURIs {
		entry, err := m.r.c.Lookup(u)
		if err != nil {
			continue
		}
		now := servedAt{pos: posOf(entry.Version), ver: textVersion(entry.Contents[0].Text)}
		if last, ok := m.served[u]; ok && (last.pos.after(now.pos) || last.ver > now.ver) {
			rt.Fatalf("safety: %s served %+v after %+v\nschedule:%s", u, now, last, m.schedule())
		}
		m.served[u] = now
	}
}

// checkAccepted: no result passes the fence twice (OnOutcome reports
// every fenced read, in no particular order, since it runs on the reads'
// goroutines), and the outbox, which is in the fence's order, announces the
// versions of each URI strictly forward.
func (m *clientModel) checkAccepted(rt *rapid.T) {
	rt.Helper()
	seen := map[string]map[fencePos]bool{}
	for _, o := range m.r.outcomesSoFar() {
		if !o.Accepted {
			continue
		}
		v := o.Version.Version
		if seen[v.URI] == nil {
			seen[v.URI] = map[fencePos]bool{}
		}
		if seen[v.URI][posOf(v)] {
			rt.Fatalf("safety: %s accepted twice at %+v\nschedule:%s", v.URI, posOf(v), m.schedule())
		}
		seen[v.URI][posOf(v)] = true
	}
	entries, err := m.r.c.Engine().PullOutbox(0, 0)
	require.NoError(rt, err)
	newest := map[string]fencePos{}
	for _, en := range entries {
		if en.Reason != ledger.InvalidateUpdated {
			continue
		}
		pos := posOf(en.Version)
		if last, ok := newest[en.URI]; ok && !pos.after(last) {
			rt.Fatalf("safety: outbox entry %d announces %s at %+v, not after %+v\nschedule:%s", en.Seq, en.URI, pos, last, m.schedule())
		}
		newest[en.URI] = pos
	}
}

func textVersion(text string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(text, "v"))
	return n
}
