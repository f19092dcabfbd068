package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// The orderings scenario drives the Engine directly (no MCP, no time): each
// ordering is a short random interleaving of subscriptions, notifications,
// reads issued and completed in any order, duplicate deliveries, closes with
// their ack kept or lost, reconciliation, new sessions, server-side changes
// and deletions, derived artifacts and revocations, on one to three URIs.
//
// What the engine does is judged by a checker that keeps its own record of
// what the harness asked for (which generations it began closing, which
// session is current, which server version each read carried), never by
// the engine's own verdicts. Once an ordering's operations are done the
// harness goes quiet and settles it (settle), and each live subscription is
// judged for progress: converged, stuck or silently stale.

// fencePos is a place in the fence's order of one URI: subscription
// generation, then read ordinal.
type fencePos struct{ gen, ord uint64 }

func (p fencePos) after(q fencePos) bool {
	if p.gen != q.gen {
		return p.gen > q.gen
	}
	return p.ord > q.ord
}

func posOf(v mcpsync.ResourceVersion) fencePos {
	return fencePos{v.SubscriptionGeneration, v.ReadOrdinal}
}

// orderingStats are the counts of a batch of orderings.
type orderingStats struct {
	Orderings  int `json:"orderings"`
	Operations int `json:"operations"`
	Deliveries int `json:"deliveries"`
	Accepted   int `json:"accepted"`
	// DeliveriesAfterClose are results delivered for a generation whose
	// close had begun (or whose session had ended): the cases the three
	// figures are about.
	DeliveriesAfterClose int `json:"deliveriesAfterClose"`
	// NotFoundAfterClose are those of them that said not found: each one a
	// chance for a late tombstone.
	NotFoundAfterClose int `json:"notFoundAfterClose"`
	OutboxEntries      int `json:"outboxEntries"`

	// VersionRegressions: an accepted result not after the previous accepted
	// one of its URI, an accepted read carrying an older server version than
	// the previous one, a served version older than one served before, or an
	// "updated" outbox entry not after the previous one of its URI.
	VersionRegressions int `json:"versionRegressions"`
	// LateTombstones: a tombstone decision (TOMBSTONE_PENDING or a
	// tombstoned outbox entry) for a generation whose close had begun.
	LateTombstones int `json:"lateTombstones"`
	// OutboxAfterClosed: an outbox entry other than a revocation for a
	// generation whose close had begun or whose session had ended.
	OutboxAfterClosed int `json:"outboxAfterClosed"`
	// AcceptsAfterClose: a result of such a generation that passed the
	// fence at all (UNCHANGED included, which writes no outbox entry).
	AcceptsAfterClose int `json:"acceptsAfterClose"`

	// Progress, judged once each ordering is over and the harness has
	// settled it (settle): LiveSubscriptions are the subscriptions judged,
	// open (or a tombstone) in the current session with their close not
	// begun and their subject not revoked.
	LiveSubscriptions int `json:"liveSubscriptions"`
	// StuckSubscriptions: live subscriptions that never reached the server's
	// current content: nothing is served, or the subscription is not open,
	// while the server has the resource.
	StuckSubscriptions int `json:"stuckSubscriptions"`
	// SilentlyStale: live subscriptions whose Lookup serves, with no error,
	// content older than the server's (or of a resource the server deleted).
	SilentlyStale int `json:"silentlyStale"`
}

func (s *orderingStats) add(o orderingStats) {
	s.Orderings += o.Orderings
	s.Operations += o.Operations
	s.Deliveries += o.Deliveries
	s.Accepted += o.Accepted
	s.DeliveriesAfterClose += o.DeliveriesAfterClose
	s.NotFoundAfterClose += o.NotFoundAfterClose
	s.OutboxEntries += o.OutboxEntries
	s.VersionRegressions += o.VersionRegressions
	s.LateTombstones += o.LateTombstones
	s.OutboxAfterClosed += o.OutboxAfterClosed
	s.AcceptsAfterClose += o.AcceptsAfterClose
	s.LiveSubscriptions += o.LiveSubscriptions
	s.StuckSubscriptions += o.StuckSubscriptions
	s.SilentlyStale += o.SilentlyStale
}

// checker counts violations in a history of one ordering. Its inputs are
// the harness's own facts; a test feeds it forged histories.
type checker struct {
	stats *orderingStats

	lastAccepted  map[string]fencePos
	lastServerVer map[string]uint64
	lastServed    map[string]fencePos
	lastUpdated   map[string]fencePos
}

func newChecker(stats *orderingStats) *checker {
	return &checker{
		stats:         stats,
		lastAccepted:  map[string]fencePos{},
		lastServerVer: map[string]uint64{},
		lastServed:    map[string]fencePos{},
		lastUpdated:   map[string]fencePos{},
	}
}

// accepted records a result that passed the fence at pos. serverVer is the
// server version the read carried (0 for a not-found). closed says whether
// the harness had begun closing the result's generation, or ended its
// session, before the delivery; tombstone whether the decision was
// TOMBSTONE_PENDING.
func (c *checker) accepted(uri string, pos fencePos, serverVer uint64, closed, tombstone bool) {
	c.stats.Accepted++
	if last, ok := c.lastAccepted[uri]; ok && !pos.after(last) {
		c.stats.VersionRegressions++
	}
	c.lastAccepted[uri] = pos
	if serverVer != 0 {
		if serverVer < c.lastServerVer[uri] {
			c.stats.VersionRegressions++
		}
		c.lastServerVer[uri] = serverVer
	}
	if closed {
		c.stats.AcceptsAfterClose++
		if tombstone {
			c.stats.LateTombstones++
		}
	}
}

// hiddenTombstone records that a not-found delivery the engine reported as
// refused left a generation the harness had begun closing in
// TOMBSTONE_PENDING: a tombstone decision the outcome did not admit to.
func (c *checker) hiddenTombstone() { c.stats.LateTombstones++ }

// served records the version Lookup served for uri; it may stay, never go
// back.
func (c *checker) served(uri string, pos fencePos) {
	if last, ok := c.lastServed[uri]; ok && last.after(pos) {
		c.stats.VersionRegressions++
	}
	c.lastServed[uri] = pos
}

// outbox records one new outbox entry. closed says whether the generation
// the entry belongs to (the entry's version for updates, the URI's current
// generation for tombstones) had begun closing or lost its session.
func (c *checker) outbox(e mcpsync.OutboxEntry, closed bool) {
	c.stats.OutboxEntries++
	if e.Reason == ledger.InvalidateRevoked {
		return
	}
	if closed {
		c.stats.OutboxAfterClosed++
		if e.Reason == ledger.InvalidateTombstoned {
			c.stats.LateTombstones++
		}
	}
	if e.Reason == ledger.InvalidateUpdated || e.Reason == ledger.InvalidateQuarantined {
		pos := posOf(e.Version)
		if last, ok := c.lastUpdated[e.URI]; ok && !pos.after(last) {
			c.stats.VersionRegressions++
		}
		c.lastUpdated[e.URI] = pos
	}
}

// settled judges one live subscription once the harness has settled the
// ordering. exists and serverVer are the server's truth; open says whether
// the subscription is open; served and servedVer what Lookup serves for its
// subject (servedVer 0 for content the harness cannot date).
func (c *checker) settled(exists bool, serverVer uint64, open, served bool, servedVer uint64) {
	c.stats.LiveSubscriptions++
	switch {
	case served && (!exists || servedVer != serverVer):
		c.stats.SilentlyStale++
	case exists && (!open || !served):
		c.stats.StuckSubscriptions++
	}
}

var (
	orderingSubjects = []string{"user:alice", "user:bob"}
	orderingTriggers = []ledger.Trigger{
		ledger.TriggerRevalidate, ledger.TriggerPoll, ledger.TriggerReconnect, ledger.TriggerInitial,
	}
)

type genKey struct {
	uri string
	gen uint64
}

// resource is the harness's view of one URI: the server's side and the
// generation the engine last handed out.
type resource struct {
	key    string
	exists bool   // on the server
	ver    uint64 // server version, rises at every change, across deletions
	gen    uint64 // current subscription generation (0: never subscribed)
}

// flight is a read the harness has sent and not yet answered, with what the
// server answered at the moment it was sent.
type flight struct {
	t         ledger.Ticket
	notFound  bool
	serverVer uint64
}

type harness struct {
	e   *mcpsync.Engine
	rng *rand.Rand
	c   *checker

	uris     []*resource
	session  uint64
	closed   map[genKey]bool // BeginClose succeeded for that generation
	inflight []flight
	answered []flight
	outSeq   uint64
}

// runOrdering runs one ordering of ops operations and adds its counts to
// stats.
func runOrdering(seed, index uint64, stats *orderingStats) error {
	rng := rand.New(rand.NewPCG(seed, index))
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{AuditCapacity: 8, MaxReadsInFlight: 4})
	if err != nil {
		return err
	}
	h := &harness{e: e, rng: rng, c: newChecker(stats), closed: map[genKey]bool{}}
	n := 1 + rng.IntN(3)
	for i := range n {
		h.uris = append(h.uris, &resource{key: fmt.Sprintf("file:///gate/doc%d.md", i), exists: true, ver: 1})
	}
	stats.Orderings++
	if err := h.beginSession(); err != nil {
		return err
	}
	for _, u := range h.uris {
		if rng.IntN(4) != 0 {
			h.subscribe(u, true)
		}
	}
	ops := 20 + rng.IntN(41)
	for range ops {
		if err := h.step(); err != nil {
			return err
		}
		stats.Operations++
		if err := h.observe(); err != nil {
			return err
		}
	}
	return h.settle()
}

// settleRounds bounds how often settle asks again for the reads a Client
// would send; a subscription that needs more has not converged.
const settleRounds = 3

// settle ends an ordering the way a Client goes on after the last fault,
// with the server quiet: every read in flight is answered in the order it
// was sent, and each live subscription gets what the Client would send it:
// a revalidation read while it is open, list reconciliation's verdict (the
// server's truth) while its tombstone is pending. Then each live
// subscription is judged: converged, stuck or silently stale.
func (h *harness) settle() error {
	for range settleRounds {
		if err := h.drain(); err != nil {
			return err
		}
		for _, u := range h.uris {
			sub, live := h.live(u)
			if !live {
				continue
			}
			var t ledger.Ticket
			var ok bool
			var err error
			if sub.State == ledger.StateTombstonePending {
				t, ok, err = h.e.ApplyListing(u.key, u.exists, time.Now())
			} else {
				t, ok, err = h.e.RequestRead(u.key, ledger.TriggerRevalidate)
			}
			if err == nil && ok {
				h.sent(t)
			}
		}
	}
	if err := h.drain(); err != nil {
		return err
	}
	for _, u := range h.uris {
		sub, live := h.live(u)
		if !live {
			continue
		}
		entry, err := h.e.Lookup(sub.Subject, u.key)
		var servedVer uint64
		if err == nil && len(entry.Contents) > 0 {
			_, _ = fmt.Sscanf(strings.TrimPrefix(entry.Contents[0].Text, u.key+" "), "v%d", &servedVer)
		}
		open := sub.State != ledger.StateTombstonePending && sub.State != ledger.StateTombstoned
		h.c.settled(u.exists, u.ver, open, err == nil, servedVer)
	}
	return nil
}

// drain answers every read in flight, follow-ups included, oldest first.
func (h *harness) drain() error {
	for len(h.inflight) > 0 {
		f := h.inflight[0]
		h.inflight = h.inflight[1:]
		h.answered = append(h.answered, f)
		h.deliver(f)
		if err := h.observe(); err != nil {
			return err
		}
	}
	return nil
}

// live reports whether u's subscription is one a Client keeps converging:
// in the current session, its close not begun, open or a tombstone, and
// its subject not revoked (whose reads are refused, visibly, for good).
func (h *harness) live(u *resource) (mcpsync.Subscription, bool) {
	sub, err := h.e.Subscription(u.key)
	if err != nil || sub.SessionGeneration != h.session || sub.CloseEpoch != 0 {
		return sub, false
	}
	switch sub.State {
	case ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending, ledger.StateVersionAccepted,
		ledger.StateTombstonePending, ledger.StateTombstoned:
	default:
		return sub, false
	}
	if _, err := h.e.Lookup(sub.Subject, u.key); errors.Is(err, mcpsync.ErrRevoked) {
		return sub, false
	}
	return sub, true
}

// isClosed reports whether the generation of t had begun closing, or its
// session had ended, by the harness's own record.
func (h *harness) isClosed(t ledger.Ticket) bool {
	return h.closed[genKey{t.URI, t.SubscriptionGeneration}] || t.SessionGeneration != h.session
}

func (h *harness) pick() *resource { return h.uris[h.rng.IntN(len(h.uris))] }

func (h *harness) beginSession() error {
	rc, err := h.e.BeginSession(mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{
		ProtocolVersion: "2025-11-25", Server: ledger.Implementation{Name: "gate", Version: "1"},
		Resources: true, Subscribe: true,
	}})
	if err != nil {
		return err
	}
	h.session = rc.SessionGeneration
	return nil
}

func (h *harness) subscribe(u *resource, activate bool) {
	sub, err := h.e.Subscribe(u.key, orderingSubjects[h.rng.IntN(len(orderingSubjects))])
	if err != nil {
		return
	}
	u.gen = sub.SubscriptionGeneration
	if activate {
		_, _ = h.e.Activate(u.key, ledger.ModePush)
	}
}

// sent records a ticket the engine issued, with the server's answer as of
// now: requests are served in the order they are sent.
func (h *harness) sent(t ledger.Ticket) {
	u := h.byKey(t.URI)
	f := flight{t: t}
	if u == nil || !u.exists {
		f.notFound = true
	} else {
		f.serverVer = u.ver
	}
	h.inflight = append(h.inflight, f)
}

func (h *harness) byKey(key string) *resource {
	for _, u := range h.uris {
		if u.key == key {
			return u
		}
	}
	return nil
}

func (h *harness) result(f flight) mcpsync.ReadResult {
	if f.notFound {
		return mcpsync.NotFoundResult()
	}
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: f.t.URI, MIMEType: "text/plain", Text: fmt.Sprintf("%s v%d", f.t.URI, f.serverVer)}})
}

// deliver hands f's result to the fence and checks what it did.
func (h *harness) deliver(f flight) {
	st := h.c.stats
	st.Deliveries++
	closed := h.isClosed(f.t)
	if closed {
		st.DeliveriesAfterClose++
		if f.notFound {
			st.NotFoundAfterClose++
		}
	}
	before, _ := h.e.Subscription(f.t.URI)
	out, _ := h.e.FinishRead(f.t, h.result(f))
	if out.Accepted {
		h.c.accepted(f.t.URI, fencePos{f.t.SubscriptionGeneration, f.t.ReadOrdinal}, f.serverVer, closed,
			out.Version.Decision == mcpsync.DecisionTombstonePending)
	} else if closed && f.notFound {
		// The outcome says refused; make sure the state agrees.
		if sub, err := h.e.Subscription(f.t.URI); err == nil && sub.SubscriptionGeneration == f.t.SubscriptionGeneration &&
			sub.State == ledger.StateTombstonePending && before.State != ledger.StateTombstonePending {
			h.c.hiddenTombstone()
		}
	}
	if out.FollowUp != nil {
		h.sent(*out.FollowUp)
	}
}

func (h *harness) step() error {
	rng := h.rng
	switch w := rng.IntN(60); {
	case w < 3: // subscribe (a new generation where the old one ended)
		h.subscribe(h.pick(), rng.IntN(2) == 0)
	case w < 5:
		_, _ = h.e.Activate(h.pick().key, ledger.ModePush)
	case w < 12: // a resources/updated pulse
		if t, ok, err := h.e.Notify(h.pick().key); err == nil && ok {
			h.sent(t)
		}
	case w < 15:
		if t, ok, err := h.e.RequestRead(h.pick().key, orderingTriggers[rng.IntN(len(orderingTriggers))]); err == nil && ok {
			h.sent(t)
		}
	case w < 18: // a read outside the queue: several in flight at once
		if t, err := h.e.IssueTicket(h.pick().key, ledger.TriggerRevalidate); err == nil {
			h.sent(t)
		}
	case w < 32: // an answer, in any order
		if len(h.inflight) == 0 {
			return nil
		}
		i := rng.IntN(len(h.inflight))
		f := h.inflight[i]
		h.inflight = append(h.inflight[:i], h.inflight[i+1:]...)
		h.answered = append(h.answered, f)
		h.deliver(f)
	case w < 34: // a read that got no answer
		if len(h.inflight) == 0 {
			return nil
		}
		i := rng.IntN(len(h.inflight))
		f := h.inflight[i]
		h.inflight = append(h.inflight[:i], h.inflight[i+1:]...)
		h.answered = append(h.answered, f)
		if next, _ := h.e.Fail(f.t); next != nil {
			h.sent(*next)
		}
	case w < 36: // the same answer delivered again
		if len(h.answered) == 0 {
			return nil
		}
		h.deliver(h.answered[rng.IntN(len(h.answered))])
	case w < 40:
		u := h.pick()
		if rc, err := h.e.BeginClose(u.key); err == nil {
			h.closed[genKey{rc.URI, rc.SubscriptionGeneration}] = true
		}
	case w < 43:
		_, _ = h.e.FinishClose(h.pick().key, rng.IntN(3) != 0)
	case w < 44:
		_, _ = h.e.ResolveUnsubscribe(h.pick().key)
	case w < 47: // list reconciliation's verdict: the server's truth
		u := h.pick()
		if t, ok, err := h.e.ApplyListing(u.key, u.exists, time.Now()); err == nil && ok {
			h.sent(t)
		}
	case w < 48:
		return h.beginSession()
	case w < 54: // the server changes the resource, and usually says so
		u := h.pick()
		u.ver++
		u.exists = true
		if rng.IntN(3) != 0 {
			if t, ok, err := h.e.Notify(u.key); err == nil && ok {
				h.sent(t)
			}
		}
	case w < 56: // the server deletes it
		u := h.pick()
		u.exists = false
		if rng.IntN(2) == 0 {
			if t, ok, err := h.e.Notify(u.key); err == nil && ok {
				h.sent(t)
			}
		}
	case w < 59: // a consumer derives something from what it was served
		u := h.pick()
		for _, s := range orderingSubjects {
			if entry, err := h.e.Lookup(s, u.key); err == nil {
				_ = h.e.RecordDerived(ledger.DerivedArtifact{Index: "idx", ArtifactID: fmt.Sprint(rng.IntN(3)), Version: entry.Version})
			}
		}
	default:
		_, _ = h.e.RevokeSubject(orderingSubjects[rng.IntN(len(orderingSubjects))])
	}
	return nil
}

// observe checks what a step left: new outbox entries and what Lookup
// serves.
func (h *harness) observe() error {
	entries, err := h.e.PullOutbox(h.outSeq, 0)
	if err != nil {
		return err
	}
	for _, en := range entries {
		h.outSeq = en.Seq
		gen := en.Version.SubscriptionGeneration
		if en.Reason == ledger.InvalidateTombstoned {
			if u := h.byKey(en.URI); u != nil {
				gen = u.gen
			}
		}
		closed := h.closed[genKey{en.URI, gen}]
		if en.Reason != ledger.InvalidateTombstoned && en.Version.SessionGeneration != h.session {
			closed = true
		}
		h.c.outbox(en, closed)
	}
	for _, u := range h.uris {
		for _, s := range orderingSubjects {
			if entry, err := h.e.Lookup(s, u.key); err == nil {
				h.c.served(u.key, posOf(entry.Version))
			}
		}
	}
	return nil
}

// runOrderings runs n orderings on every CPU. Ordering i draws from its own
// generator seeded by (seed, i), so the counts do not depend on scheduling.
func runOrderings(seed uint64, n int) (orderingStats, error) {
	workers := max(1, min(runtime.GOMAXPROCS(0), n))
	var mu sync.Mutex
	var total orderingStats
	var firstErr error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var local orderingStats
			for i := w; i < n; i += workers {
				if err := runOrdering(seed, uint64(i), &local); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("ordering %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			total.add(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	return total, firstErr
}
