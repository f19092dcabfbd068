package mcpsync_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// TestModelInterleavings drives random interleavings of subscriptions,
// notifications, reads completed in any order, closes, reopens (a
// generation closed and the next opened in one write), reconciliation,
// corroborated deletions, revocation, derived artifacts, new sessions and
// outbox acks against the engine and against a reference model of the
// fence, and checks after every step that versions only move forward, that
// nothing passes a closing or older-session fence, that the outbox holds
// exactly the entries the model allows, that Lookup never serves revoked,
// stale or withdrawn content, and that a deletion is corroborated only on
// the steps DESIGN.md names. RAPID_CHECKS sets the number of interleavings.
func TestModelInterleavings(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newModelMachine(rt)
		rt.Repeat(m.actions())
	})
}

// modelMaxReads is small so that ErrTooManyReads is reachable in a short run.
const modelMaxReads = 4

// modelPoison is the body the content guard refuses.
const modelPoison = "poison"

var (
	// Two URIs keep interleavings on one URI dense; the stray URI is only
	// ever named by contents, to make a URI_MISMATCH.
	modelURIs     = []string{"file:///model/a.md", "file:///model/b.md"}
	modelStrayURI = "file:///model/stray.md"
	modelSubjects = []string{"user:alice", "user:bob"}
	// Repeating a body gives UNCHANGED, switching gives ACCEPTED, and the
	// poison body is QUARANTINED; "one" is listed twice so repeats are common.
	modelBodies = []string{"one", "one", "two", modelPoison}
	// Content is listed three times so that most results carry content;
	// not-found twice, so that deletions are common enough to confirm.
	modelResultKinds = []resultKind{
		resultContent, resultContent, resultContent,
		resultNotFound, resultNotFound, resultEmpty, resultWrongURI, resultBadURI,
	}
	modelTriggers = []ledger.Trigger{
		ledger.TriggerInitial, ledger.TriggerRevalidate, ledger.TriggerPoll,
		ledger.TriggerReconnect, ledger.TriggerReconcile,
	}
)

type resultKind string

const (
	resultContent  resultKind = "content"
	resultNotFound resultKind = "not found"
	resultEmpty    resultKind = "empty contents"
	resultWrongURI resultKind = "contents of another URI"
	resultBadURI   resultKind = "contents with an unusable URI"
)

func modelResult(key string, kind resultKind, body string) mcpsync.ReadResult {
	item := func(u string) mcpsync.ReadResult {
		return mcpsync.NewReadResult([]mcpsync.Content{{URI: u, MIMEType: "text/plain", Text: body}})
	}
	switch kind {
	case resultNotFound:
		return mcpsync.NotFoundResult()
	case resultEmpty:
		return mcpsync.NewReadResult(nil)
	case resultWrongURI:
		return item(modelStrayURI)
	case resultBadURI:
		return item("no scheme")
	}
	return item(key)
}

// phase is the model's coarse subscription state: the engine's read
// sub-states (ACTIVE, UPDATE_SEEN, READ_PENDING, VERSION_ACCEPTED) are all
// "open", which is all the fence rule looks at.
type phase string

const (
	phaseSubscribing      phase = "subscribing"
	phaseOpen             phase = "open"
	phaseClosing          phase = "closing"
	phaseClosed           phase = "closed"
	phaseUnknown          phase = "unsubscribe unknown"
	phaseTombstonePending phase = "tombstone pending"
	phaseTombstoned       phase = "tombstoned"
	phaseReconciling      phase = "reconciliation required"
)

func phaseOf(s ledger.SubscriptionState) phase {
	switch s {
	case ledger.StateSubscribing:
		return phaseSubscribing
	case ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending, ledger.StateVersionAccepted:
		return phaseOpen
	case ledger.StateUnsubscribing:
		return phaseClosing
	case ledger.StateClosed:
		return phaseClosed
	case ledger.StateUnsubscribeUnknown:
		return phaseUnknown
	case ledger.StateTombstonePending:
		return phaseTombstonePending
	case ledger.StateTombstoned:
		return phaseTombstoned
	case ledger.StateReconciliationRequired:
		return phaseReconciling
	}
	return phase("unexpected " + s)
}

// fencePos is a place in the fence's order of one URI.
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

// modelVersion is what the model expects the engine's current version of a
// URI to be.
type modelVersion struct {
	pos     fencePos
	digest  string
	subject string
	status  ledger.VersionStatus
}

type modelArtifact struct {
	index, id, subject string
}

// uriModel is the reference model of one URI.
type uriModel struct {
	key string

	// The current subscription generation (0: never subscribed) and its fence.
	gen          uint64
	session      uint64
	principal    string
	phase        phase
	closeBegun   bool
	closeOrdinal uint64
	lastIssued   uint64
	watermark    uint64
	held         []ledger.Ticket // issued and unsettled, current generation only
	// closeBegunGens remembers every generation whose close began, for
	// tickets of older generations still in flight.
	closeBegunGens map[uint64]bool

	current *modelVersion
	// tombstoned: a deletion was confirmed and no read found the resource
	// since, so a not-found keeps the tombstone even without a version.
	tombstoned bool
	// notFoundAt is when the newest not-found passed the fence, of any
	// generation; only evidence gathered since may confirm its tombstone.
	notFoundAt time.Time
	// notFoundOrd is the read ordinal of that not-found.
	notFoundOrd uint64
	// corr is the corroboration under way, nil when none is.
	corr *modelCorroboration
	// trail records what the server said of the URI, for the safety
	// invariant of corroborated tombstones.
	trail deletionTrail
	// lastPass is the newest result that passed the fence, of any decision;
	// newestChange the newest that replaced the current version.
	lastPass     *mcpsync.VersionReceipt
	newestChange fencePos

	artifacts []modelArtifact

	// The read queue, per item (session, subscription generation): a queued
	// read of the item is in flight, and a pulse arrived meanwhile (or, with
	// nothing in flight, waits for room under the read cap).
	queue map[queueItem]*queueState

	// Observed from the engine, not predicted: the newest position an
	// outcome passed at, and the watermark last seen.
	passedPos     fencePos
	seenGen       uint64
	seenWatermark uint64
}

// modelCorroboration is what the model expects Subscription.Corroboration
// to hold: a clean scan that began after the not-found of read firstRead
// and did not list the URI, waiting for a second not-found of generation
// gen above after, the last ordinal issued when the scan was recorded.
type modelCorroboration struct {
	gen, firstRead, after uint64
	scans                 []string
	startedAt, endedAt    time.Time
}

// deletionTrail is the model's own record of the steps a corroborated
// deletion rests on, kept apart from its prediction of the engine's state.
type deletionTrail struct {
	// notFound holds every not-found that passed the fence.
	notFound map[fencePos]trailMark
	// scans are the clean scans handed to Corroborate, none listing the URI.
	scans []trailScan
	// live is the step of the newest sign that the server has the URI: a
	// pulse, a listing, or content in the answer to an unsettled read.
	live int
}

type trailMark struct {
	step int
	at   time.Time
}

type trailScan struct {
	step int // when it was handed to Corroborate
	// gen and lastIssued are the URI's generation and last issued ordinal
	// then: a read of gen above lastIssued was issued after it.
	gen, lastIssued    uint64
	startedAt, endedAt time.Time
}

// holdsNewer reports whether a read newer than ordinal ord is unsettled.
func (u *uriModel) holdsNewer(ord uint64) bool {
	return slices.ContainsFunc(u.held, func(h ledger.Ticket) bool { return h.ReadOrdinal > ord })
}

// stillAbsent: a deletion was confirmed and nothing found the resource
// since, so a not-found only says the tombstone stands.
func (u *uriModel) stillAbsent() bool {
	return u.tombstoned || u.current != nil && u.current.status == ledger.VersionTombstoned
}

// corroboratedBy reports whether the not-found of held ticket t finishes the
// corroboration under way: a read of its generation issued after the scan
// was recorded and after it ended, with no newer read unsettled (whose
// answer would be newer than this one).
func (u *uriModel) corroboratedBy(t ledger.Ticket) bool {
	c := u.corr
	return c != nil && c.gen == t.SubscriptionGeneration && t.ReadOrdinal > c.after &&
		!t.IssuedAt.Before(c.endedAt) && !u.holdsNewer(t.ReadOrdinal)
}

// keepsCorroboration reports whether the not-found of held ticket t, which
// does not finish the corroboration, leaves it standing: t was issued
// before the scan was recorded and the second read is still out, so that
// read decides and the subscription stays open for it.
func (u *uriModel) keepsCorroboration(t ledger.Ticket) bool {
	c := u.corr
	return c != nil && c.gen == t.SubscriptionGeneration && t.ReadOrdinal <= c.after && u.holdsNewer(t.ReadOrdinal)
}

// queueItem is the read queue's identity of a URI's reads.
type queueItem struct{ session, gen uint64 }

type queueState struct {
	processing, dirty bool
	processingID      uint64 // request id of the queued read in flight
}

// item returns the queue state of the URI's current generation, or of the
// ticket's when t is given.
func (u *uriModel) item(t *ledger.Ticket) *queueState {
	k := queueItem{u.session, u.gen}
	if t != nil {
		k = queueItem{t.SessionGeneration, t.SubscriptionGeneration}
	}
	q := u.queue[k]
	if q == nil {
		q = &queueState{}
		u.queue[k] = q
	}
	return q
}

func (u *uriModel) holds(t ledger.Ticket) bool {
	for _, h := range u.held {
		if h.ReadOrdinal == t.ReadOrdinal {
			return h.RequestID == t.RequestID
		}
	}
	return false
}

// settle drops ticket ord and, when it passed, every ticket below it.
func (u *uriModel) settle(ord uint64, passed bool) {
	u.held = slices.DeleteFunc(u.held, func(h ledger.Ticket) bool {
		return h.ReadOrdinal == ord || (passed && h.ReadOrdinal < ord)
	})
}

// flight is a read the test has sent and not yet answered.
type flight struct {
	t ledger.Ticket
	// queued tickets came from Notify, RequestRead, Reconcile or a follow-up.
	queued bool
}

// entryKey is what the test compares of an outbox entry.
type entryKey struct {
	uri     string
	reason  ledger.InvalidationReason
	subject string
	pos     fencePos
	// evidence is the kind of evidence a tombstoned entry names.
	evidence ledger.EvidenceKind
}

func compareEntryKeys(a, b entryKey) int {
	return cmp.Or(cmp.Compare(a.uri, b.uri), cmp.Compare(a.reason, b.reason), cmp.Compare(a.subject, b.subject),
		cmp.Compare(a.pos.gen, b.pos.gen), cmp.Compare(a.pos.ord, b.pos.ord), cmp.Compare(a.evidence, b.evidence))
}

// delivery is one read result handed to the fence and what came back.
type delivery struct {
	t    ledger.Ticket
	kind resultKind
	out  mcpsync.Outcome
	err  error
	// closeBegun: the close of the ticket's generation began before delivery.
	closeBegun bool
	// oldSession: the ticket belongs to a session older than the current one.
	oldSession   bool
	wantReason   mcpsync.StaleReason // "" when the model says it passes
	wantDecision mcpsync.Decision
	// corroborated: the model says the not-found confirms the tombstone,
	// with these reads as evidence.
	corroborated bool
	wantReads    []uint64
	wantScans    []string
}

type modelMachine struct {
	e *mcpsync.Engine
	// clock is the engine's clock; it moves only on a tick, so that many
	// steps share one instant, as they may on a coarse clock.
	clock *fixedClock

	session uint64 // newest session generation begun (0: none yet)
	uris    map[string]*uriModel
	revoked map[string]bool

	step      int // actions taken
	scans     int // scans handed to Corroborate, to name them
	inflight  []flight
	answered  []flight // already answered or abandoned, for duplicate delivery
	versions  []mcpsync.ResourceVersion
	lastSeq   uint64 // newest outbox entry seen
	acked     uint64
	wantCount map[ledger.InvalidationReason]int
	gotCount  map[ledger.InvalidationReason]int
	wantStep  []entryKey // entries the current step should append
}

func newModelMachine(rt *rapid.T) *modelMachine {
	clock := newClock()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{
		Now:              clock.now,
		MaxReadsInFlight: modelMaxReads,
		Guard: func(_ string, contents []mcpsync.Content) error {
			for _, c := range contents {
				if c.Text == modelPoison {
					return errors.New("poisoned content")
				}
			}
			return nil
		},
	})
	require.NoError(rt, err)
	m := &modelMachine{
		e:         e,
		clock:     clock,
		uris:      make(map[string]*uriModel),
		revoked:   make(map[string]bool),
		wantCount: make(map[ledger.InvalidationReason]int),
		gotCount:  make(map[ledger.InvalidationReason]int),
	}
	for _, key := range modelURIs {
		m.uris[key] = &uriModel{key: key, closeBegunGens: make(map[uint64]bool), queue: make(map[queueItem]*queueState)}
	}
	// Now and then the first actions run before any session, where
	// Subscribe must refuse with ErrNoSession.
	if rapid.IntRange(0, 7).Draw(rt, "start (7: without a session)") == 7 {
		return m
	}
	m.beginSession(rt)
	// Most interleavings worth having start from open subscriptions; starting
	// some there keeps the random steps for what comes after.
	for _, key := range modelURIs {
		if rapid.IntRange(0, 3).Draw(rt, "start "+key+" (3: unsubscribed)") != 3 {
			who := rapid.SampledFrom(modelSubjects).Draw(rt, "principal of "+key)
			_, err := m.e.Subscribe(key, who)
			require.NoError(rt, err)
			_, err = m.e.Activate(key, ledger.ModePush)
			require.NoError(rt, err)
			u := m.uris[key]
			u.gen, u.session, u.principal, u.phase = 1, m.session, who, phaseOpen
			if rapid.IntRange(0, 3).Draw(rt, "start "+key+" (0: deleted)") == 0 {
				m.startDeleted(rt, u)
			}
		}
	}
	return m
}

// startDeleted reads u, or not, and then sees it deleted, before the random
// steps: the deletion evidence paths start from a pending tombstone. Now
// and then a read sent after the one that says not found is still out.
func (m *modelMachine) startDeleted(rt *rapid.T, u *uriModel) {
	if rapid.Bool().Draw(rt, "read before the deletion") {
		m.startRead(rt, m.startIssue(rt, u), resultContent)
	}
	gone := m.startIssue(rt, u)
	if rapid.Bool().Draw(rt, "a newer read out") {
		m.startIssue(rt, u)
	}
	m.startRead(rt, gone, resultNotFound)
}

// startIssue issues a read of u outside the read queue.
func (m *modelMachine) startIssue(rt *rapid.T, u *uriModel) flight {
	t, err := m.e.IssueTicket(u.key, ledger.TriggerInitial)
	require.NoError(rt, err)
	m.issued(rt, u, t, false)
	return m.inflight[len(m.inflight)-1]
}

// startRead answers f with a result of kind.
func (m *modelMachine) startRead(rt *rapid.T, f flight, kind resultKind) {
	m.answer(slices.IndexFunc(m.inflight, func(g flight) bool { return g.t.RequestID == f.t.RequestID }))
	m.deliverResult(rt, f, kind, modelBodies[0], false)
}

func (m *modelMachine) want(k entryKey) {
	m.wantStep = append(m.wantStep, k)
	m.wantCount[k.reason]++
}

// actions weighs the actions by listing each under several names (rapid
// picks names uniformly): reads and their results are the interleavings that
// matter, revocation and new sessions end most of them.
func (m *modelMachine) actions() map[string]func(*rapid.T) {
	table := []struct {
		name   string
		weight int
		action func(*rapid.T)
	}{
		{"subscribe", 2, m.subscribe},
		{"reopen", 1, m.reopen},
		{"activate", 2, m.activate},
		{"notify", 3, m.notify},
		{"requestRead", 2, m.requestRead},
		{"issueTicket", 3, m.issueTicket},
		{"complete", 5, m.complete},
		{"fail", 1, m.fail},
		{"deliverTwice", 1, m.deliverTwice},
		{"deliverForged", 1, m.deliverForged},
		{"beginClose", 1, m.beginClose},
		{"finishClose", 2, m.finishClose},
		{"resolveUnsubscribe", 1, m.resolveUnsubscribe},
		{"reconcile", 3, m.reconcile},
		{"corroborate", 3, m.corroborate},
		{"revokeSubject", 1, m.revokeSubject},
		{"recordDerived", 1, m.recordDerived},
		{"beginSession", 1, m.beginSession},
		{"ackOutbox", 1, m.ackOutbox},
		{"tick", 2, m.tick},
	}
	actions := map[string]func(*rapid.T){"": m.check}
	for _, a := range table {
		step := func(rt *rapid.T) {
			m.step++
			a.action(rt)
		}
		for i := range a.weight {
			actions[fmt.Sprintf("%s#%d", a.name, i+1)] = step
		}
	}
	return actions
}

// closedGen is the newest generation whose close began (0: none).
func (u *uriModel) closedGen() uint64 {
	var g uint64
	for gen := range u.closeBegunGens {
		g = max(g, gen)
	}
	return g
}

func (m *modelMachine) drawURI(rt *rapid.T) *uriModel {
	return m.uris[rapid.SampledFrom(modelURIs).Draw(rt, "uri")]
}

// requireRefusal checks that err is the legitimate refusal the model expects.
func requireRefusal(rt *rapid.T, err, want error, what string) {
	rt.Helper()
	if want == nil {
		require.NoError(rt, err, "%s: the model expects success", what)
		return
	}
	require.ErrorIs(rt, err, want, "%s: the model expects this refusal", what)
}

// Subscriptions.

func (m *modelMachine) subscribe(rt *rapid.T) {
	u := m.drawURI(rt)
	who := rapid.SampledFrom(modelSubjects).Draw(rt, "principal")
	sub, err := m.e.Subscribe(u.key, who)
	var want error
	fresh := true
	switch {
	case m.session == 0:
		want = mcpsync.ErrNoSession
	case u.gen != 0 && u.session == m.session && u.phase == phaseClosing:
		// A closing generation must finish closing first.
		want = mcpsync.ErrIllegalTransition
	case u.gen != 0 && u.session == m.session && !u.closeBegun && u.phase != phaseTombstoned:
		if u.principal != who {
			want = mcpsync.ErrForbidden
		}
		fresh = false
	}
	requireRefusal(rt, err, want, "Subscribe")
	if want != nil {
		return
	}
	if fresh {
		u.openGeneration(m.session, who)
	}
	require.Equal(rt, u.gen, sub.SubscriptionGeneration, "Subscribe: generation")
}

// openGeneration opens u's next generation for who in session: SUBSCRIBING,
// with a fence of its own and no read out.
func (u *uriModel) openGeneration(session uint64, who string) {
	u.gen++
	u.session, u.principal, u.phase = session, who, phaseSubscribing
	u.closeBegun, u.closeOrdinal, u.lastIssued, u.watermark, u.held = false, 0, 0, 0, nil
	u.corr = nil
}

// reopen is the Client's replacement of a URI's generation: closed as
// BeginClose then FinishClose (acked) would close it, from wherever its
// close is, and the next opened as Subscribe would open it, in one write.
func (m *modelMachine) reopen(rt *rapid.T) {
	u := m.drawURI(rt)
	who := rapid.SampledFrom(modelSubjects).Draw(rt, "principal")
	sub, err := m.e.Reopen(u.key, who)
	var want error
	if m.session == 0 {
		want = mcpsync.ErrNoSession
	}
	requireRefusal(rt, err, want, "Reopen")
	if want != nil {
		return
	}
	if u.gen != 0 && !u.closeBegun {
		u.closeBegunGens[u.gen] = true
	}
	u.openGeneration(m.session, who)
	require.Equal(rt, u.gen, sub.SubscriptionGeneration, "Reopen: generation")
	require.Equal(rt, ledger.StateSubscribing, sub.State, "Reopen: state")
	require.Zero(rt, sub.CloseEpoch, "Reopen: close epoch")
}

func (m *modelMachine) activate(rt *rapid.T) {
	u := m.drawURI(rt)
	mode := rapid.SampledFrom([]ledger.SubscriptionMode{ledger.ModePush, ledger.ModePoll}).Draw(rt, "mode")
	_, err := m.e.Activate(u.key, mode)
	want := stepErr(u, u.phase == phaseSubscribing && u.session == m.session)
	requireRefusal(rt, err, want, "Activate")
	if want == nil {
		u.phase = phaseOpen
	}
}

func (m *modelMachine) beginClose(rt *rapid.T) {
	u := m.drawURI(rt)
	rc, err := m.e.BeginClose(u.key)
	// Idempotent: a close already begun answers with its receipt. A
	// confirmed tombstone is still subscribed on the server, so it closes
	// like an open generation.
	want := stepErr(u, true)
	if want == nil && !u.closeBegun {
		u.phase, u.closeBegun, u.closeOrdinal = phaseClosing, true, u.lastIssued
		u.closeBegunGens[u.gen] = true
		u.corr = nil
	}
	requireRefusal(rt, err, want, "BeginClose")
	if want == nil {
		require.Equal(rt, u.closeOrdinal, rc.CloseOrdinal, "BeginClose: closeOrdinal is the last issued ordinal")
		require.NotZero(rt, rc.CloseEpoch, "BeginClose: close epoch")
	}
}

func (m *modelMachine) finishClose(rt *rapid.T) {
	u := m.drawURI(rt)
	acked := rapid.Bool().Draw(rt, "acked")
	_, err := m.e.FinishClose(u.key, acked)
	want := stepErr(u, u.phase == phaseClosing)
	if want == nil {
		u.phase = phaseUnknown
		if acked {
			u.phase = phaseClosed
		}
	}
	requireRefusal(rt, err, want, "FinishClose")
}

func (m *modelMachine) resolveUnsubscribe(rt *rapid.T) {
	u := m.drawURI(rt)
	_, err := m.e.ResolveUnsubscribe(u.key)
	want := stepErr(u, u.phase == phaseUnknown)
	if want == nil {
		u.phase = phaseClosed
	}
	requireRefusal(rt, err, want, "ResolveUnsubscribe")
}

func (m *modelMachine) beginSession(rt *rapid.T) {
	_, err := m.e.BeginSession(legacySession(ledger.Implementation{Name: "model-server", Version: "1.0.0"}))
	require.NoError(rt, err, "BeginSession")
	m.session++
	// An unknown unsubscribe outcome ends with its session.
	for _, u := range m.uris {
		if u.phase == phaseUnknown && u.session < m.session {
			u.phase = phaseClosed
		}
	}
}

// stepErr is the refusal the model expects from a lifecycle step on u
// that its phase allows or not: ErrUnknownURI for a URI never subscribed,
// ErrIllegalTransition where the phase does not allow the step.
func stepErr(u *uriModel, allowed bool) error {
	switch {
	case u.gen == 0:
		return mcpsync.ErrUnknownURI
	case !allowed:
		return mcpsync.ErrIllegalTransition
	}
	return nil
}

// Reads.

// issueErr is the refusal the model expects from issuing a ticket for u.
func (m *modelMachine) issueErr(u *uriModel) error {
	switch {
	case u.gen == 0:
		return mcpsync.ErrUnknownURI
	case u.session != m.session:
		return mcpsync.ErrIllegalTransition
	case len(u.held) >= modelMaxReads:
		return mcpsync.ErrTooManyReads
	case !u.readable():
		return mcpsync.ErrIllegalTransition
	}
	return nil
}

// readable: a read may be issued (and a pulse read) while the subscription is
// open or its tombstone is pending or confirmed.
func (u *uriModel) readable() bool {
	return u.phase == phaseOpen || u.phase == phaseTombstonePending || u.phase == phaseTombstoned
}

// issued records a ticket the engine handed out, after checking it is the
// next ordinal of the current generation.
func (m *modelMachine) issued(rt *rapid.T, u *uriModel, t ledger.Ticket, queued bool) {
	rt.Helper()
	require.Equal(rt, u.key, t.URI, "ticket URI")
	require.Equal(rt, u.gen, t.SubscriptionGeneration, "ticket subscription generation")
	require.Equal(rt, u.session, t.SessionGeneration, "ticket session generation")
	require.Equal(rt, u.lastIssued+1, t.ReadOrdinal, "ticket ordinal is the next one")
	require.Equal(rt, u.principal, t.Subject, "ticket subject is the principal")
	require.Equal(rt, m.clock.t, t.IssuedAt, "ticket issued now")
	u.lastIssued = t.ReadOrdinal
	u.held = append(u.held, t)
	u.phase = phaseOpen // a read returns a pending or confirmed tombstone to the live path
	m.inflight = append(m.inflight, flight{t: t, queued: queued})
}

// enqueued checks the result of a coalesced read request (Notify,
// RequestRead, Reconcile) against the model of the read queue.
func (m *modelMachine) enqueued(rt *rapid.T, u *uriModel, t ledger.Ticket, ok bool, err error, what string) {
	rt.Helper()
	if u.gen == 0 {
		requireRefusal(rt, err, mcpsync.ErrUnknownURI, what)
		return
	}
	q := u.item(nil)
	if q.processing {
		q.dirty = true
		require.NoError(rt, err, "%s while a read is in flight only marks the item dirty", what)
		require.False(rt, ok, "%s while a read is in flight issues no second read", what)
		return
	}
	want := m.issueErr(u)
	if want == mcpsync.ErrTooManyReads {
		q.dirty = true
		require.NoError(rt, err, "%s at the read cap is kept, not refused", what)
		require.False(rt, ok, "%s at the read cap waits for room", what)
		return
	}
	q.dirty = false
	requireRefusal(rt, err, want, what)
	if want != nil {
		require.False(rt, ok, what)
		return
	}
	require.True(rt, ok, "%s with no read in flight issues one", what)
	q.processing, q.processingID = true, t.RequestID
	m.issued(rt, u, t, true)
}

// done mirrors the end of a read: the queue's own read stops processing its
// item, and the item's pending read (a follow-up, or one that waited for
// room) is issued if its generation can still be read.
func (m *modelMachine) done(rt *rapid.T, u *uriModel, f flight, follow *ledger.Ticket) {
	rt.Helper()
	q := u.item(&f.t)
	switch {
	case q.processing && f.t.RequestID != q.processingID:
		require.Nil(rt, follow, "no follow-up read while the queue's own read is out")
		return
	case q.processing:
		q.processing = false
	}
	if !q.dirty {
		require.Nil(rt, follow, "no follow-up read without a pending pulse")
		return
	}
	q.dirty = false
	current := f.t.SessionGeneration == u.session && f.t.SubscriptionGeneration == u.gen
	want := m.issueErr(u)
	switch {
	case !current || (want != nil && want != mcpsync.ErrTooManyReads):
		require.Nil(rt, follow, "no follow-up read for a generation that cannot be read")
		return
	case want == mcpsync.ErrTooManyReads:
		q.dirty = true
		require.Nil(rt, follow, "a pending read waits for room under the read cap")
		return
	}
	require.NotNil(rt, follow, "a pending pulse gets exactly one read")
	q.processing, q.processingID = true, follow.RequestID
	m.issued(rt, u, *follow, true)
}

func (m *modelMachine) notify(rt *rapid.T) {
	u := m.drawURI(rt)
	u.trail.live = m.step
	t, ok, err := m.e.Notify(u.key)
	switch {
	case u.gen == 0:
		requireRefusal(rt, err, mcpsync.ErrUnknownURI, "Notify")
	case !u.readable() || u.session != m.session:
		requireRefusal(rt, err, mcpsync.ErrIllegalTransition, "Notify")
	default:
		if len(u.held) == 0 {
			u.phase = phaseOpen // UPDATE_SEEN
		}
		// The server says it changed: only a read after the pulse can tell
		// whether it is gone.
		u.corr = nil
		m.enqueued(rt, u, t, ok, err, "Notify")
	}
}

func (m *modelMachine) requestRead(rt *rapid.T) {
	u := m.drawURI(rt)
	trigger := rapid.SampledFrom(modelTriggers).Draw(rt, "trigger")
	t, ok, err := m.e.RequestRead(u.key, trigger)
	m.enqueued(rt, u, t, ok, err, "RequestRead")
	if ok {
		require.Equal(rt, trigger, t.Trigger, "RequestRead: trigger recorded")
	}
}

func (m *modelMachine) issueTicket(rt *rapid.T) {
	u := m.drawURI(rt)
	t, err := m.e.IssueTicket(u.key, ledger.TriggerRevalidate)
	want := m.issueErr(u)
	requireRefusal(rt, err, want, "IssueTicket")
	if want == nil {
		m.issued(rt, u, t, false)
	}
}

func (m *modelMachine) drawFlight(rt *rapid.T, from []flight, label string) (flight, int) {
	if len(from) == 0 {
		rt.Skip("no " + label)
	}
	// Any ticket, not just the oldest: results come back in any order.
	i := rapid.IntRange(0, len(from)-1).Draw(rt, label)
	return from[i], i
}

// answer moves the read in flight at i to the answered ones, and returns it.
func (m *modelMachine) answer(i int) flight {
	f := m.inflight[i]
	m.inflight = slices.Delete(m.inflight, i, i+1)
	m.answered = append(m.answered, f)
	return f
}

func (m *modelMachine) complete(rt *rapid.T) {
	_, i := m.drawFlight(rt, m.inflight, "read in flight")
	m.deliver(rt, m.answer(i), true)
}

// deliverTwice hands an answered (or abandoned) ticket's result to the fence
// again, as a duplicated response would.
func (m *modelMachine) deliverTwice(rt *rapid.T) {
	f, _ := m.drawFlight(rt, m.answered, "answered read")
	m.deliver(rt, f, true)
}

// deliverForged hands the fence a ticket whose identity the ledger cannot
// vouch for: an ordinal it never issued, or a request id it never paired
// with that ordinal.
func (m *modelMachine) deliverForged(rt *rapid.T) {
	f, _ := m.drawFlight(rt, append(slices.Clip(m.inflight), m.answered...), "ticket to forge")
	t := f.t
	if rapid.Bool().Draw(rt, "forge ordinal") {
		t.ReadOrdinal = m.uris[t.URI].lastIssued + rapid.Uint64Range(1, 3).Draw(rt, "ordinals ahead")
	} else {
		t.RequestID += 1 << 20
	}
	// Through AcceptResourceVersion only: a forged ticket is not the read
	// queue's to end.
	m.deliver(rt, flight{t: t}, false)
}

// deliver hands the fence a result for f's ticket, through Complete or
// AcceptResourceVersion (either is allowed for any ticket), and checks the
// outcome at once.
func (m *modelMachine) deliver(rt *rapid.T, f flight, mayComplete bool) {
	u := m.uris[f.t.URI]
	kind := rapid.SampledFrom(modelResultKinds).Draw(rt, "result")
	if c := u.corr; c != nil && c.gen == f.t.SubscriptionGeneration && rapid.Bool().Draw(rt, "still gone while corroborating") {
		// Most resources a clean scan missed are gone: keep the answers
		// that decide a corroboration common.
		kind = resultNotFound
	}
	body := rapid.SampledFrom(modelBodies).Draw(rt, "body")
	viaComplete := mayComplete && rapid.Bool().Draw(rt, "via Complete")
	m.deliverResult(rt, f, kind, body, viaComplete)
}

// deliverResult hands the fence a result of kind for f's ticket and checks
// the outcome at once.
func (m *modelMachine) deliverResult(rt *rapid.T, f flight, kind resultKind, body string, viaComplete bool) {
	t := f.t
	u := m.uris[t.URI]
	res := modelResult(t.URI, kind, body)
	d := delivery{t: t, kind: kind, closeBegun: u.closeBegunGens[t.SubscriptionGeneration], oldSession: t.SessionGeneration < m.session}
	d.wantReason, d.wantDecision = m.predict(u, t, kind, body, res.Digest())
	if d.wantReason == "" && kind == resultNotFound && !u.stillAbsent() && u.corroboratedBy(t) {
		d.corroborated = true
		d.wantReads, d.wantScans = []uint64{u.corr.firstRead, t.ReadOrdinal}, u.corr.scans
	}

	if viaComplete {
		d.out, d.err = m.e.FinishRead(t, res)
	} else {
		d.out, d.err = m.e.AcceptResourceVersion(t, res)
	}
	invNoVersionRegression(rt, u, d)
	invNoAcceptanceAfterClose(rt, d)
	invOldSessionNeverPasses(rt, d)
	invCorroboratedTombstoneSound(rt, u, d)
	invFenceAgreesWithModel(rt, d)
	switch {
	case d.wantReason == "" && kind == resultNotFound:
		if u.trail.notFound == nil {
			u.trail.notFound = make(map[fencePos]trailMark)
		}
		u.trail.notFound[fencePos{t.SubscriptionGeneration, t.ReadOrdinal}] = trailMark{m.step, m.clock.t}
	case kind == resultContent && u.holds(t) && u.gen == t.SubscriptionGeneration:
		u.trail.live = m.step
	}
	m.apply(u, d, body, res.Digest())
	if viaComplete {
		m.done(rt, u, f, d.out.FollowUp)
	} else {
		require.Nil(rt, d.out.FollowUp, "only Complete returns a follow-up")
	}
}

// predict applies the fence rule of DESIGN.md to the model: the reason the
// fence must refuse t with, or "" and the decision if it must pass.
func (m *modelMachine) predict(u *uriModel, t ledger.Ticket, kind resultKind, body, digest string) (mcpsync.StaleReason, mcpsync.Decision) {
	switch {
	case u.gen == 0:
		return mcpsync.ReasonUnknownRequest, ""
	case t.SubscriptionGeneration <= u.closedGen():
		return mcpsync.ReasonStaleAfterClose, ""
	case t.SessionGeneration != u.session || t.SubscriptionGeneration != u.gen || t.SessionGeneration != m.session:
		return mcpsync.ReasonGenerationMismatch, ""
	case u.closeBegun:
		return mcpsync.ReasonStaleAfterClose, ""
	case t.ReadOrdinal > u.lastIssued:
		return mcpsync.ReasonReconciliationRequired, ""
	case t.ReadOrdinal <= u.watermark:
		return mcpsync.ReasonStaleOrdinal, ""
	case !u.holds(t):
		return mcpsync.ReasonUnknownRequest, ""
	case u.phase != phaseOpen:
		return mcpsync.ReasonNotActive, ""
	case m.revoked[t.Subject]:
		return mcpsync.ReasonSubjectRevoked, ""
	}
	switch kind {
	case resultNotFound:
		if u.stillAbsent() || u.corroboratedBy(t) {
			return "", mcpsync.DecisionTombstoned
		}
		return "", mcpsync.DecisionTombstonePending
	case resultEmpty:
		return mcpsync.ReasonEmptyContents, ""
	case resultBadURI:
		return mcpsync.ReasonInvalidContent, ""
	case resultWrongURI:
		return mcpsync.ReasonURIMismatch, ""
	}
	if body == modelPoison {
		return "", mcpsync.DecisionQuarantined
	}
	if c := u.current; c != nil && c.status == ledger.VersionServed && c.digest == digest && c.subject == t.Subject {
		return "", mcpsync.DecisionUnchanged
	}
	return "", mcpsync.DecisionAccepted
}

// apply moves the model by its own prediction (the checks above already
// failed the test if the engine disagreed).
func (m *modelMachine) apply(u *uriModel, d delivery, body, digest string) {
	t := d.t
	switch d.wantReason {
	case mcpsync.ReasonReconciliationRequired:
		if u.phase == phaseOpen || u.phase == phaseTombstonePending {
			u.phase = phaseReconciling
		}
		return
	case mcpsync.ReasonNotActive, mcpsync.ReasonSubjectRevoked, mcpsync.ReasonEmptyContents,
		mcpsync.ReasonInvalidContent, mcpsync.ReasonURIMismatch:
		// The ticket is spent, and a read that was refused is not the
		// second not-found of a corroboration; one that was not found,
		// refused only because the subscription is no longer open, leaves
		// the corroboration standing.
		u.settle(t.ReadOrdinal, false)
		if !(d.wantReason == mcpsync.ReasonNotActive && d.kind == resultNotFound) {
			u.corr = nil
		}
		return
	case "":
	default:
		return
	}
	keep := d.kind == resultNotFound && u.keepsCorroboration(t)
	u.watermark = t.ReadOrdinal
	u.settle(t.ReadOrdinal, true)
	pos := fencePos{t.SubscriptionGeneration, t.ReadOrdinal}
	u.lastPass = &mcpsync.VersionReceipt{Decision: d.wantDecision, Version: mcpsync.ResourceVersion{
		Digest: digest, Subject: t.Subject, SubscriptionGeneration: pos.gen, ReadOrdinal: pos.ord,
	}}
	switch d.wantDecision {
	case mcpsync.DecisionAccepted, mcpsync.DecisionUnchanged, mcpsync.DecisionQuarantined:
		// The server has it.
		u.tombstoned, u.corr = false, nil
	}
	switch {
	case d.corroborated:
		// The second not-found: the tombstone is confirmed in this step.
		u.notFoundAt, u.notFoundOrd = m.clock.t, t.ReadOrdinal
		m.confirmDeletion(u, ledger.EvidenceCorroborated)
	case d.wantDecision == mcpsync.DecisionTombstoned:
		// Still gone: the confirmed tombstone stands.
		u.phase, u.held = phaseTombstoned, nil
	case d.wantDecision == mcpsync.DecisionTombstonePending && keep:
		// A read older than the corroboration's second read, which is
		// still out: that read decides, so the subscription stays open.
		u.notFoundAt, u.notFoundOrd = m.clock.t, t.ReadOrdinal
	case d.wantDecision == mcpsync.DecisionTombstonePending:
		u.phase, u.corr = phaseTombstonePending, nil
		u.notFoundAt, u.notFoundOrd = m.clock.t, t.ReadOrdinal
		if u.current != nil && u.current.status != ledger.VersionRevoked {
			u.current.status = ledger.VersionTombstonePending
		}
	case d.wantDecision == mcpsync.DecisionQuarantined:
		u.current = &modelVersion{pos: pos, digest: digest, subject: t.Subject, status: ledger.VersionQuarantined}
		u.newestChange = pos
		m.want(entryKey{uri: u.key, reason: ledger.InvalidateQuarantined, subject: t.Subject, pos: pos})
	case d.wantDecision == mcpsync.DecisionAccepted:
		u.current = &modelVersion{pos: pos, digest: digest, subject: t.Subject, status: ledger.VersionServed}
		u.newestChange = pos
		m.want(entryKey{uri: u.key, reason: ledger.InvalidateUpdated, subject: t.Subject, pos: pos})
	}
}

// confirmDeletion confirms u's deletion on evidence of kind ev: the
// subscription is TOMBSTONED with no read out, and consumers are told to
// delete the current version, unless they already were (tombstoned before,
// or revoked).
func (m *modelMachine) confirmDeletion(u *uriModel, ev ledger.EvidenceKind) {
	u.phase, u.held, u.tombstoned, u.corr = phaseTombstoned, nil, true, nil
	if c := u.current; c != nil && c.status != ledger.VersionTombstoned && c.status != ledger.VersionRevoked {
		m.want(entryKey{uri: u.key, reason: ledger.InvalidateTombstoned, subject: c.subject, evidence: ev})
		c.status = ledger.VersionTombstoned
	}
}

func (m *modelMachine) fail(rt *rapid.T) {
	_, i := m.drawFlight(rt, m.inflight, "read in flight")
	f := m.answer(i)
	u := m.uris[f.t.URI]
	if u.holds(f.t) && u.gen == f.t.SubscriptionGeneration {
		// No answer: not the second not-found of a corroboration.
		u.settle(f.t.ReadOrdinal, false)
		u.corr = nil
	}
	if rapid.Bool().Draw(rt, "via Fail") {
		follow, err := m.e.Fail(f.t)
		require.NoError(rt, err, "Fail")
		m.done(rt, u, f, follow)
		return
	}
	// A queued read abandoned without Fail stays in the read queue's
	// processing set, as it would for such a caller.
	require.NoError(rt, m.e.AbandonRead(f.t), "AbandonRead")
}

// Reconciliation, revocation, artifacts, outbox.

func (m *modelMachine) reconcile(rt *rapid.T) {
	u := m.drawURI(rt)
	present := rapid.Bool().Draw(rt, "present")
	// Evidence gathered now, or (now and then) evidence older than the
	// newest not-found, which confirms nothing.
	since := m.clock.t
	tooOld := !u.notFoundAt.IsZero() && rapid.IntRange(0, 4).Draw(rt, "evidence (0: older than the not-found)") == 0
	if tooOld {
		since = u.notFoundAt.Add(-time.Second)
	}
	t, ok, err := m.e.ApplyListing(u.key, present, since)
	if present {
		u.trail.live = m.step
	}
	switch {
	case u.gen == 0:
		requireRefusal(rt, err, mcpsync.ErrUnknownURI, "Reconcile")
	case (u.phase == phaseTombstonePending || u.phase == phaseReconciling) && !present && tooOld:
		requireRefusal(rt, err, mcpsync.ErrEvidenceTooOld, "Reconcile absent on evidence older than the not-found")
		require.False(rt, ok)
	case (u.phase == phaseTombstonePending || u.phase == phaseReconciling) && !present:
		require.NoError(rt, err, "Reconcile absent confirms the tombstone")
		require.False(rt, ok)
		m.confirmDeletion(u, ledger.EvidenceProven)
	case u.phase == phaseTombstonePending || u.phase == phaseReconciling:
		u.phase, u.corr = phaseOpen, nil
		m.enqueued(rt, u, t, ok, err, "Reconcile present")
	case u.phase == phaseOpen && !present:
		m.enqueued(rt, u, t, ok, err, "Reconcile absent on an open subscription")
	case u.phase == phaseTombstoned && present && u.session == m.session:
		// Listed again after its deletion was confirmed: read it back.
		m.enqueued(rt, u, t, ok, err, "Reconcile present on a tombstoned subscription")
	default:
		require.NoError(rt, err, "Reconcile with nothing to do")
		require.False(rt, ok)
		if present {
			// Listed again while the second read is out: that read can no
			// longer finish the corroboration.
			u.corr = nil
		}
	}
	if ok {
		require.Equal(rt, ledger.TriggerReconcile, t.Trigger, "Reconcile: trigger")
	}
}

// corroborate hands the engine a clean two-pass scan that did not list the
// URI: most often one that began after the URI's newest not-found, now and
// then one that began before it. Now and then the scan ends a little after
// now, as one stamped by a clock ahead of the engine's would: only reads
// issued after that end may corroborate.
func (m *modelMachine) corroborate(rt *rapid.T) {
	u := m.drawURI(rt)
	var pending []string
	for _, key := range modelURIs {
		if m.uris[key].phase == phaseTombstonePending {
			pending = append(pending, key)
		}
	}
	if len(pending) > 0 && rapid.IntRange(0, 3).Draw(rt, "corroborate (0: any URI)") != 0 {
		// A scan matters most where a tombstone is pending.
		u = m.uris[rapid.SampledFrom(pending).Draw(rt, "pending uri")]
	}
	now := m.clock.t
	var start time.Time
	switch {
	case !u.notFoundAt.IsZero() && rapid.IntRange(0, 4).Draw(rt, "scan (0: began before the not-found)") == 0:
		start = u.notFoundAt.Add(-time.Second)
	case !u.notFoundAt.IsZero():
		after := int(now.Sub(u.notFoundAt) / time.Second)
		start = u.notFoundAt.Add(time.Duration(rapid.IntRange(0, after).Draw(rt, "scan began, seconds after the not-found")) * time.Second)
	default:
		start = now.Add(-time.Duration(rapid.IntRange(0, 2).Draw(rt, "scan began, seconds ago")) * time.Second)
	}
	took := int(now.Sub(start) / time.Second)
	end := start.Add(time.Duration(rapid.IntRange(0, took).Draw(rt, "scan took, seconds")) * time.Second)
	if rapid.IntRange(0, 3).Draw(rt, "scan end (0: ahead of the engine's clock)") == 0 {
		end = now.Add(time.Second)
	}
	n := m.scans
	m.scans++
	scan := mcpsync.AbsenceScan{Scans: []string{fmt.Sprintf("scan-%d-a", n), fmt.Sprintf("scan-%d-b", n)}, StartedAt: start, EndedAt: end}

	t, ok, err := m.e.Corroborate(u.key, scan)
	u.trail.scans = append(u.trail.scans, trailScan{step: m.step, gen: u.gen, lastIssued: u.lastIssued, startedAt: start, endedAt: end})
	switch {
	case u.gen == 0:
		requireRefusal(rt, err, mcpsync.ErrUnknownURI, "Corroborate")
	case u.session != m.session:
		requireRefusal(rt, err, mcpsync.ErrIllegalTransition, "Corroborate in an ended session")
	case u.phase == phaseOpen:
		// Not listed while open: a reconcile read, whose not-found takes
		// the fenced path.
		m.enqueued(rt, u, t, ok, err, "Corroborate on an open subscription")
	case u.phase != phaseTombstonePending:
		require.NoError(rt, err, "Corroborate with nothing to do")
		require.False(rt, ok)
	case start.Before(u.notFoundAt):
		requireRefusal(rt, err, mcpsync.ErrEvidenceTooOld, "Corroborate on a scan older than the not-found")
		require.False(rt, ok)
	default:
		u.corr = &modelCorroboration{
			gen: u.gen, firstRead: u.notFoundOrd, after: u.lastIssued,
			scans: scan.Scans, startedAt: start, endedAt: end,
		}
		m.enqueued(rt, u, t, ok, err, "Corroborate on a pending tombstone")
	}
	if ok {
		require.Equal(rt, ledger.TriggerReconcile, t.Trigger, "Corroborate: trigger")
	}
}

func (m *modelMachine) revokeSubject(rt *rapid.T) {
	s := rapid.SampledFrom(modelSubjects).Draw(rt, "subject")
	rc, err := m.e.RevokeSubject(s)
	require.NoError(rt, err, "RevokeSubject")
	m.revoked[s] = true
	n := 0
	for _, key := range modelURIs {
		u := m.uris[key]
		if c := u.current; c != nil && c.subject == s && c.status != ledger.VersionRevoked {
			c.status = ledger.VersionRevoked
			m.want(entryKey{uri: key, reason: ledger.InvalidateRevoked, subject: s})
			n++
		}
		u.artifacts = slices.DeleteFunc(u.artifacts, func(a modelArtifact) bool {
			if a.subject != s {
				return false
			}
			m.want(entryKey{uri: key, reason: ledger.InvalidateRevoked, subject: s})
			n++
			return true
		})
	}
	require.Equal(rt, n, len(rc.Versions)+len(rc.Artifacts), "RevokeSubject: the receipt lists every invalidation")
}

func (m *modelMachine) recordDerived(rt *rapid.T) {
	if len(m.versions) == 0 {
		rt.Skip("no version in the outbox yet")
	}
	v := rapid.SampledFrom(m.versions).Draw(rt, "version")
	a := modelArtifact{
		index:   rapid.SampledFrom([]string{"embeddings", "summaries"}).Draw(rt, "index"),
		id:      rapid.SampledFrom([]string{"1", "2"}).Draw(rt, "artifact"),
		subject: v.Subject,
	}
	err := m.e.RecordDerived(ledger.DerivedArtifact{Index: a.index, ArtifactID: a.id, Version: v})
	u := m.uris[v.URI]
	c := u.current
	var want error
	switch {
	case m.revoked[v.Subject]:
		want = mcpsync.ErrRevoked
	case c == nil || posOf(v).after(c.pos):
		want = mcpsync.ErrUnknownVersion
	case !c.pos.after(posOf(v)) && v.Digest != c.digest:
		want = mcpsync.ErrUnknownVersion
	case c.status == ledger.VersionQuarantined && c.pos == posOf(v):
		want = mcpsync.ErrQuarantined
	}
	requireRefusal(rt, err, want, "RecordDerived")
	if want != nil {
		return
	}
	u.artifacts = slices.DeleteFunc(u.artifacts, func(held modelArtifact) bool {
		return held.index == a.index && held.id == a.id
	})
	u.artifacts = append(u.artifacts, a)
}

// tick moves the clock on: what happens after it happens later than
// everything before it.
func (m *modelMachine) tick(*rapid.T) {
	m.clock.t = m.clock.t.Add(time.Second)
}

func (m *modelMachine) ackOutbox(rt *rapid.T) {
	seq := rapid.Uint64Range(0, m.lastSeq+1).Draw(rt, "ack up to")
	require.NoError(rt, m.e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, seq), "Acknowledge")
	m.acked = max(m.acked, min(seq, m.lastSeq))
}

// check runs after every action.
func (m *modelMachine) check(rt *rapid.T) {
	invWatermarkNeverDecreases(rt, m)
	invOutboxOnlyFromOpenGenerations(rt, m)
	invNoCacheHitAfterRevocation(rt, m)
	invLookupNeverStale(rt, m)
	invLookupAgreesWithModel(rt, m)
	invStateAgreesWithModel(rt, m)
}

// Invariant 1: per URI, the results that pass the fence are strictly
// increasing in (subscription generation, read ordinal).
func invNoVersionRegression(rt *rapid.T, u *uriModel, d delivery) {
	rt.Helper()
	if !d.out.Accepted {
		return
	}
	pos := posOf(d.out.Version.Version)
	if !pos.after(u.passedPos) {
		rt.Fatalf("invariant 1 (no version regression): %s passed %s at %+v, not after %+v which already passed",
			u.key, d.out.Version.Decision, pos, u.passedPos)
	}
	u.passedPos = pos
}

// Invariant 1, second half: the watermark never decreases within a
// subscription generation.
func invWatermarkNeverDecreases(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	for _, key := range modelURIs {
		u := m.uris[key]
		sub, err := m.e.Subscription(key)
		if err != nil {
			continue
		}
		if sub.SubscriptionGeneration == u.seenGen && sub.Watermark < u.seenWatermark {
			rt.Fatalf("invariant 1 (no version regression): %s generation %d watermark fell from %d to %d",
				key, sub.SubscriptionGeneration, u.seenWatermark, sub.Watermark)
		}
		u.seenGen, u.seenWatermark = sub.SubscriptionGeneration, sub.Watermark
	}
}

// Invariant 2: nothing passes the fence once its generation began closing.
func invNoAcceptanceAfterClose(rt *rapid.T, d delivery) {
	rt.Helper()
	if d.closeBegun {
		requireRefusedAsClosedOrMismatched(rt, d, "invariant 2 (no acceptance after close), a result after BeginClose")
	}
}

// requireRefusedAsClosedOrMismatched fails, naming the invariant, unless d
// was refused as STALE_AFTER_CLOSE or GENERATION_MISMATCH.
func requireRefusedAsClosedOrMismatched(rt *rapid.T, d delivery, invariant string) {
	rt.Helper()
	if d.out.Accepted || (d.out.Stale.Reason != mcpsync.ReasonStaleAfterClose && d.out.Stale.Reason != mcpsync.ReasonGenerationMismatch) {
		rt.Fatalf("%s: %s result of %s session %d generation %d ordinal %d: accepted=%v decision=%s stale=%q err=%v",
			invariant, d.kind, d.t.URI, d.t.SessionGeneration, d.t.SubscriptionGeneration, d.t.ReadOrdinal,
			d.out.Accepted, d.out.Version.Decision, d.out.Stale.Reason, d.err)
	}
}

// Invariant 7: a deletion that was only corroborated, never proven, is
// confirmed only on the steps of DESIGN.md, as the model recorded them: a
// not-found of the generation passed the fence; later a clean scan that
// began after it and did not list the URI was handed to Corroborate; the
// confirming read, of the same generation, was issued after that and after
// the scan ended, and says not found again; since the scan was handed over,
// no pulse, listing or answer with content said the server has the URI;
// and no newer read is out, whose answer would be newer. A resource deleted
// and created again between any two of these steps is never tombstoned: the
// scan would list it, the read would find it, or its pulse would come.
// (A sign of life before the scan was handed over is older than the read
// that confirms, which was issued after it.)
func invCorroboratedTombstoneSound(rt *rapid.T, u *uriModel, d delivery) {
	rt.Helper()
	rc := d.out.Tombstone
	if rc == nil {
		return
	}
	t := d.t
	fail := func(why string) {
		rt.Helper()
		rt.Fatalf("invariant 7 (corroborated tombstones are sound): %s gen %d ordinal %d confirmed a tombstone on %+v, but %s",
			u.key, t.SubscriptionGeneration, t.ReadOrdinal, rc.Evidence, why)
	}
	ev := rc.Evidence
	switch {
	case ev.Kind != ledger.EvidenceCorroborated:
		fail("a read can only corroborate")
	case len(ev.Reads) != 2 || ev.Reads[1] != t.ReadOrdinal || rc.SubscriptionGeneration != t.SubscriptionGeneration:
		fail("the evidence does not name the confirming read as the second")
	case !u.holds(t) || u.gen != t.SubscriptionGeneration:
		fail("the confirming read was not an unsettled read of the current generation")
	case u.holdsNewer(t.ReadOrdinal):
		fail("a newer read is still out")
	}
	first, ok := u.trail.notFound[fencePos{t.SubscriptionGeneration, ev.Reads[0]}]
	if !ok {
		fail("its first read never passed the fence as not found")
	}
	for _, s := range u.trail.scans {
		if s.gen == t.SubscriptionGeneration && s.step > first.step && !s.startedAt.Before(first.at) &&
			t.ReadOrdinal > s.lastIssued && !t.IssuedAt.Before(s.endedAt) && u.trail.live < s.step {
			return
		}
	}
	fail(fmt.Sprintf("no scan began after the first not-found (step %d, %s) and before the confirming read (issued %s) with no sign of life since (step %d); scans %+v",
		first.step, first.at.Format(time.TimeOnly), t.IssuedAt.Format(time.TimeOnly), u.trail.live, u.trail.scans))
}

// Invariant 6: a ticket of an older session generation never passes.
func invOldSessionNeverPasses(rt *rapid.T, d delivery) {
	rt.Helper()
	// A generation closed before the session ended says so (STALE_AFTER_CLOSE).
	if d.oldSession {
		requireRefusedAsClosedOrMismatched(rt, d, "invariant 6 (old session never passes)")
	}
}

// Every result becomes either a version receipt or a stale receipt, and the
// one the fence rule of DESIGN.md calls for.
func invFenceAgreesWithModel(rt *rapid.T, d delivery) {
	rt.Helper()
	if d.wantReason == "" {
		if d.err != nil || !d.out.Accepted {
			rt.Fatalf("fence rule: %s result of %s gen %d ordinal %d (held, above the watermark, subscription open) must pass as %s; got accepted=%v stale=%q err=%v",
				d.kind, d.t.URI, d.t.SubscriptionGeneration, d.t.ReadOrdinal, d.wantDecision, d.out.Accepted, d.out.Stale.Reason, d.err)
		}
		v := d.out.Version
		require.Equal(rt, d.wantDecision, v.Decision, "fence rule: decision")
		require.Equal(rt, mcpsync.SchemaVersionReceipt, v.Schema)
		require.Equal(rt, d.t.URI, v.Version.URI)
		require.Equal(rt, d.t.Subject, v.Version.Subject, "a version is bound to the subject that read it")
		require.Equal(rt, d.t.RequestID, v.RequestID)
		require.Equal(rt, fencePos{d.t.SubscriptionGeneration, d.t.ReadOrdinal}, posOf(v.Version))
		if !d.corroborated {
			require.Nil(rt, d.out.Tombstone, "fence rule: only the second not-found of a corroboration confirms a tombstone")
			return
		}
		rc := d.out.Tombstone
		require.NotNil(rt, rc, "fence rule: the second not-found of a corroboration confirms the tombstone")
		require.Equal(rt, mcpsync.SchemaTombstoneReceipt, rc.Schema)
		require.Equal(rt, ledger.DeletionEvidence{Kind: ledger.EvidenceCorroborated, Scans: d.wantScans, Reads: d.wantReads},
			rc.Evidence, "fence rule: the tombstone names both scans and both reads")
		require.Equal(rt, fencePos{d.t.SubscriptionGeneration, 0}, fencePos{rc.SubscriptionGeneration, 0})
		require.Equal(rt, v.OutboxSeq, rc.OutboxSeq, "the receipt names the outbox entry written with it")
		return
	}
	var re *mcpsync.RefusalError
	if !errors.As(d.err, &re) || re.Reason != d.wantReason || d.out.Accepted || d.out.Stale.Reason != d.wantReason {
		rt.Fatalf("fence rule: %s result of %s gen %d ordinal %d must be refused with %s; got accepted=%v decision=%s stale=%q err=%v",
			d.kind, d.t.URI, d.t.SubscriptionGeneration, d.t.ReadOrdinal, d.wantReason, d.out.Accepted, d.out.Version.Decision, d.out.Stale.Reason, d.err)
	}
	require.ErrorIs(rt, d.err, mcpsync.ErrRefused)
	require.Equal(rt, mcpsync.SchemaStaleReceipt, d.out.Stale.Schema)
}

// Invariant 3: the outbox holds exactly the entries the model allows: updated
// and quarantined ones from results that passed an open generation's fence,
// tombstoned ones from Reconcile(absent) on a pending tombstone (proven) or
// from the second not-found of a corroboration (corroborated), revoked ones
// from RevokeSubject. Entries are numbered consecutively and stay until
// acknowledged.
func invOutboxOnlyFromOpenGenerations(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	entries, err := m.e.PullOutbox(m.lastSeq, 0)
	require.NoError(rt, err)
	got := make([]entryKey, 0, len(entries))
	for _, en := range entries {
		require.Equal(rt, m.lastSeq+1, en.Seq, "invariant 3 (outbox): entries are numbered consecutively")
		require.Equal(rt, mcpsync.SchemaInvalidation, en.Schema)
		m.lastSeq = en.Seq
		m.gotCount[en.Reason]++
		k := entryKey{uri: en.URI, reason: en.Reason, subject: en.Subject}
		if en.Reason == ledger.InvalidateUpdated || en.Reason == ledger.InvalidateQuarantined {
			k.pos = posOf(en.Version)
			m.versions = append(m.versions, en.Version)
		}
		if en.Reason == ledger.InvalidateTombstoned {
			require.NotNil(rt, en.Evidence, "invariant 3 (outbox): a tombstoned entry names its evidence")
			k.evidence = en.Evidence.Kind
		}
		got = append(got, k)
	}
	for _, r := range []ledger.InvalidationReason{ledger.InvalidateUpdated, ledger.InvalidateQuarantined,
		ledger.InvalidateTombstoned, ledger.InvalidateRevoked} {
		if m.gotCount[r] != m.wantCount[r] {
			rt.Fatalf("invariant 3 (outbox only from allowed steps): %d %q entries, the model allows %d; this step appended %+v, expected %+v",
				m.gotCount[r], r, m.wantCount[r], got, m.wantStep)
		}
	}
	slices.SortFunc(got, compareEntryKeys)
	slices.SortFunc(m.wantStep, compareEntryKeys)
	if !slices.Equal(got, m.wantStep) {
		rt.Fatalf("invariant 3 (outbox only from allowed steps): this step appended %+v, expected %+v", got, m.wantStep)
	}
	m.wantStep = m.wantStep[:0]

	// At least once: everything after the acknowledged position is still there.
	head, err := m.e.PullOutbox(0, 1)
	require.NoError(rt, err)
	if m.acked < m.lastSeq {
		require.Len(rt, head, 1, "invariant 3 (outbox): unacknowledged entries stay")
		require.Equal(rt, m.acked+1, head[0].Seq, "invariant 3 (outbox): the oldest unacknowledged entry comes first")
	} else {
		require.Empty(rt, head, "invariant 3 (outbox): acknowledged entries are gone")
	}
}

// Invariant 4: no cache hit after revocation.
func invNoCacheHitAfterRevocation(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	for _, s := range modelSubjects {
		for _, key := range modelURIs {
			entry, err := m.e.Lookup(s, key)
			if m.revoked[s] && !errors.Is(err, mcpsync.ErrRevoked) {
				rt.Fatalf("invariant 4 (no cache hit after revocation): Lookup(%s, %s) after RevokeSubject gave err=%v", s, key, err)
			}
			if err == nil && m.revoked[entry.Version.Subject] {
				rt.Fatalf("invariant 4 (no cache hit after revocation): Lookup(%s, %s) served a version read by revoked %s", s, key, entry.Version.Subject)
			}
		}
	}
}

// Invariant 5: Lookup never serves a version older than the newest one that
// changed the content, nor anything while the newest state is a pending or
// confirmed tombstone or a quarantine. An UNCHANGED result keeps the version
// consumers derived from, so the served (generation, ordinal) may lag the
// newest UNCHANGED one, but its digest must be the newest accepted digest.
func invLookupNeverStale(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	for _, key := range modelURIs {
		u := m.uris[key]
		for _, s := range modelSubjects {
			entry, err := m.e.Lookup(s, key)
			if err != nil {
				continue
			}
			pos := posOf(entry.Version)
			switch {
			case u.lastPass == nil:
				rt.Fatalf("invariant 5 (Lookup never stale): %s served %+v but nothing passed the fence", key, pos)
			case u.current != nil && u.current.status != ledger.VersionServed:
				rt.Fatalf("invariant 5 (Lookup never stale): %s served content while the newest state is %s", key, u.current.status)
			case u.lastPass.Decision != mcpsync.DecisionAccepted && u.lastPass.Decision != mcpsync.DecisionUnchanged:
				rt.Fatalf("invariant 5 (Lookup never stale): %s served content after a %s result", key, u.lastPass.Decision)
			case u.newestChange.after(pos):
				rt.Fatalf("invariant 5 (Lookup never stale): %s served %+v, older than the accepted %+v", key, pos, u.newestChange)
			case entry.Version.Digest != u.lastPass.Version.Digest:
				rt.Fatalf("invariant 5 (Lookup never stale): %s served digest %s, the newest accepted is %s", key, entry.Version.Digest, u.lastPass.Version.Digest)
			case len(entry.Contents) == 0:
				rt.Fatalf("invariant 5 (Lookup never stale): %s served a version without contents", key)
			}
		}
	}
}

// Lookup gives exactly the answer the model expects, including which refusal.
func invLookupAgreesWithModel(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	for _, key := range modelURIs {
		c := m.uris[key].current
		for _, s := range modelSubjects {
			var want error
			switch {
			case m.revoked[s]:
				want = mcpsync.ErrRevoked
			case c == nil && m.uris[key].gen == 0:
				want = mcpsync.ErrUnknownURI // never subscribed: no record
			case c == nil:
				want = mcpsync.ErrNoVersion
			case c.status == ledger.VersionRevoked || m.revoked[c.subject]:
				want = mcpsync.ErrRevoked
			case c.subject != s:
				want = mcpsync.ErrForbidden
			case c.status == ledger.VersionQuarantined:
				want = mcpsync.ErrQuarantined
			case c.status == ledger.VersionTombstonePending:
				want = mcpsync.ErrTombstonePending
			case c.status == ledger.VersionTombstoned:
				want = mcpsync.ErrTombstoned
			}
			entry, err := m.e.Lookup(s, key)
			if c != nil && !m.revoked[s] && m.revoked[c.subject] && c.subject != s && errors.Is(err, mcpsync.ErrForbidden) {
				// Another subject's revoked version: either refusal is honest.
				continue
			}
			requireRefusal(rt, err, want, "Lookup("+s+", "+key+")")
			if want == nil {
				require.Equal(rt, c.pos, posOf(entry.Version), "Lookup(%s, %s): version", s, key)
				require.Equal(rt, c.digest, entry.Version.Digest, "Lookup(%s, %s): digest", s, key)
				require.Equal(rt, s, entry.Version.Subject, "Lookup(%s, %s): subject", s, key)
			}
		}
	}
}

// The ledger rows agree with the model's generations, states and fences.
func invStateAgreesWithModel(rt *rapid.T, m *modelMachine) {
	rt.Helper()
	var known []string
	for sub, err := range m.e.Subscriptions() {
		require.NoError(rt, err)
		known = append(known, sub.URI)
		u, ok := m.uris[sub.URI]
		require.True(rt, ok, "Subscriptions: unexpected URI %s", sub.URI)
		require.Equal(rt, u.gen, sub.SubscriptionGeneration, "%s: subscription generation", sub.URI)
		require.Equal(rt, u.session, sub.SessionGeneration, "%s: session generation", sub.URI)
		require.Equal(rt, u.principal, sub.Subject, "%s: principal", sub.URI)
		require.Equal(rt, u.phase, phaseOf(sub.State), "%s: state %s", sub.URI, sub.State)
		require.Equal(rt, u.lastIssued, sub.LastIssuedOrdinal, "%s: last issued ordinal", sub.URI)
		require.Equal(rt, u.watermark, sub.Watermark, "%s: watermark", sub.URI)
		require.Equal(rt, u.closeBegun, sub.CloseEpoch != 0, "%s: close epoch", sub.URI)
		require.Equal(rt, u.notFoundAt, sub.NotFoundAt, "%s: when the newest not-found passed", sub.URI)
		require.Equal(rt, u.tombstoned, !sub.TombstonedAt.IsZero(), "%s: deletion confirmed and not found since", sub.URI)
		var want *ledger.Corroboration
		if c := u.corr; c != nil {
			want = &ledger.Corroboration{
				SubscriptionGeneration: c.gen, FirstRead: c.firstRead, Scans: c.scans,
				ScanStartedAt: c.startedAt, ScanEndedAt: c.endedAt, After: c.after,
			}
		}
		require.Equal(rt, want, sub.Corroboration, "%s: corroboration under way", sub.URI)
		if u.closeBegun {
			require.Equal(rt, u.closeOrdinal, sub.CloseOrdinal, "%s: close ordinal", sub.URI)
		}
	}
	var want []string
	for _, key := range modelURIs {
		if m.uris[key].gen != 0 {
			want = append(want, key)
		}
	}
	require.Equal(rt, want, known, "Subscriptions: the URIs ever subscribed, in order")
}
