package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcpsync/mcpsync/ledger"
)

// StaleReason says why the fence refused a read result.
type StaleReason string

// Reasons of stale receipts.
const (
	// ReasonStaleOrdinal: a read with a higher ordinal already passed.
	ReasonStaleOrdinal StaleReason = "STALE_ORDINAL"
	// ReasonStaleAfterClose: the subscription generation began closing; late
	// content and late not-found alike are audit only.
	ReasonStaleAfterClose StaleReason = "STALE_AFTER_CLOSE"
	// ReasonGenerationMismatch: the read belongs to an older session or
	// subscription generation.
	ReasonGenerationMismatch StaleReason = "GENERATION_MISMATCH"
	// ReasonUnknownRequest: no unsettled ticket has this ordinal and request id.
	ReasonUnknownRequest StaleReason = "UNKNOWN_REQUEST"
	// ReasonURIMismatch: no content item names the URI that was read.
	ReasonURIMismatch StaleReason = "URI_MISMATCH"
	// ReasonNotActive: the subscription is not open (for instance a tombstone
	// is pending), so nothing it reads can become a version.
	ReasonNotActive StaleReason = "NOT_ACTIVE"
	// ReasonSubjectRevoked: the subject that read it has been revoked.
	ReasonSubjectRevoked StaleReason = "SUBJECT_REVOKED"
	// ReasonEmptyContents: the read returned no content items.
	ReasonEmptyContents StaleReason = "EMPTY_CONTENTS"
	// ReasonInvalidContent: a content item cannot be decoded (bad base64, an
	// unusable URI, an unknown item type).
	ReasonInvalidContent StaleReason = "INVALID_CONTENT"
	// ReasonNotSubscribed: a notification for a URI with no open
	// subscription in the current session.
	ReasonNotSubscribed StaleReason = "NOT_SUBSCRIBED"
	// ReasonReconciliationRequired: the ledger never issued this ordinal, so
	// its own record is in doubt; the subscription moves to
	// RECONCILIATION_REQUIRED.
	ReasonReconciliationRequired StaleReason = "RECONCILIATION_REQUIRED"
	// ReasonLimitExceeded: the read result passed a limit (Limits); the stale
	// receipt's detail names the limit, its bound and the observed size.
	ReasonLimitExceeded StaleReason = "LIMIT_EXCEEDED"
)

// sameIdentity reports whether t is the ticket held as issued: a ticket is
// a value a caller may store, copy or send through JSON, so the fence
// compares all of it, never trusting a field it did not record.
func sameIdentity(t, held *ledger.Ticket) bool {
	return t.RequestID == held.RequestID && t.ReadOrdinal == held.ReadOrdinal && t.URI == held.URI && t.Engine == held.Engine &&
		t.SessionGeneration == held.SessionGeneration && t.SubscriptionGeneration == held.SubscriptionGeneration &&
		t.Subject == held.Subject && t.Trigger == held.Trigger && t.IssuedAt.Equal(held.IssuedAt)
}

// IssueTicket hands out the next read ordinal of the URI's open subscription
// generation, by compare-and-swap on the ledger, recording a fresh request id
// and the trigger. It refuses once the close began: no ordinal is ever issued
// after closeOrdinal.
//
// Most callers want Notify or RequestRead, which coalesce reads; IssueTicket
// does not, so it can put several reads of one URI in flight.
func (e *Engine) IssueTicket(rawURI string, trigger ledger.Trigger) (ledger.Ticket, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return ledger.Ticket{}, err
	}
	return e.issue(key, trigger, nil, nil)
}

// errGenerationMoved: the queue asked for a read of a generation that is no
// longer the URI's current one.
var errGenerationMoved = errors.New("mcpsync: subscription generation moved on")

// issue hands out a ticket of the URI's current generation, or, with want
// set, of that generation only (errGenerationMoved otherwise).
func (e *Engine) issue(key string, trigger ledger.Trigger, want *queueKey, loaded *ledger.Record) (ledger.Ticket, error) {
	var t ledger.Ticket
	var path transitions
	var id uint64
	// The clock is user code: on the memory ledger, whose lock the step
	// runs under, it is read before.
	var issuedAt time.Time
	if e.mem != nil {
		issuedAt = e.now()
	}
	// Reads that ended while their ticket's write failed: their tickets
	// are dropped by this write (endedUnwritten).
	ended := e.endedOf(key)
	{
		// Deferred: a ticket is refused after any crash (its engine and
		// session are gone), so it rides with the write of its answer.
		_, err := e.change(key, loaded, loaded != nil, true, func(cur, next *ledger.Record, _ *[]OutboxEntry) (bool, error) {
			path.reset(cur)
			if cur == nil || cur.Sub == nil {
				return false, fmt.Errorf("%w: %s", ErrUnknownURI, key)
			}
			if cur.Sub.SessionGeneration != e.sessionGeneration() {
				return false, &TransitionError{URI: key, From: cur.State, Event: evIssueRead + " (session ended)"}
			}
			if want != nil && (want.session != cur.Sub.SessionGeneration || want.gen != cur.Sub.Generation) {
				return false, errGenerationMoved
			}
			if len(ended) > 0 {
				next.Tickets = slices.DeleteFunc(next.Tickets, func(t ledger.Ticket) bool { return slices.Contains(ended, t.RequestID) })
			}
			if len(next.Tickets) >= e.maxTickets {
				return false, fmt.Errorf("%w: %s has %d reads in flight", ErrTooManyReads, key, len(next.Tickets))
			}
			if err := path.move(next, evIssueRead); err != nil {
				return false, err
			}
			if id == 0 {
				// Reserved once, kept across compare-and-swap retries: an
				// id is never handed out twice, and a retry need not
				// waste one.
				var err error
				if e.mem != nil {
					id, err = e.requestIDLocked()
				} else {
					id, err = e.requestID(context.Background())
				}
				if err != nil {
					return false, err
				}
			}
			next.LastIssued++
			// Every field, one by one: a composite literal would be built
			// aside and copied.
			t.Engine, t.URI, t.Trigger = e.id, key, trigger
			t.SessionGeneration, t.SubscriptionGeneration = cur.Sub.SessionGeneration, cur.Sub.Generation
			t.ReadOrdinal, t.RequestID, t.Subject = next.LastIssued, id, cur.Sub.Subject
			t.IssuedAt = issuedAt
			if e.mem == nil {
				t.IssuedAt = e.now()
			}
			next.Tickets = append(next.Tickets, t)
			return true, nil
		})
		if err != nil {
			return ledger.Ticket{}, err
		}
		if len(ended) > 0 {
			e.forgetEnded(key, ended)
		}
		e.emit(key, &path)
		return t, nil
	}
}

// Outcome is what the fence did with one read result: exactly one of Version
// (the result passed) or Stale (it was refused) is set. Accepted says the
// result passed the fence, which a not-found or quarantined result does
// too; Decision says what passing meant, and Changed picks out the one
// decision that gives consumers new text.
type Outcome struct {
	Accepted bool
	Version  VersionReceipt
	Stale    StaleReceipt
	// Tombstone is set when the read confirmed a deletion (a corroborated
	// one: Decision TOMBSTONED).
	Tombstone *TombstoneReceipt
	// FollowUp is the coalesced read to send next, if notifications arrived
	// while this one was in flight (set by FinishRead only).
	FollowUp *ledger.Ticket
	// FollowUpErr, a *ReadError, says the follow-up read could not be
	// issued (a ledger write failed): the notifications it was for are
	// owed a read, to ask for again with RequestRead (set by FinishRead
	// only; Fail returns it with its error).
	FollowUpErr error
}

// Decision is what the fence decided for a result that passed: ACCEPTED
// (new content), UNCHANGED, TOMBSTONE_PENDING, TOMBSTONED or QUARANTINED;
// "" for a refused result (Stale says why).
func (o Outcome) Decision() Decision {
	if !o.Accepted {
		return ""
	}
	return o.Version.Decision
}

// Changed reports whether the read made new content current.
func (o Outcome) Changed() bool { return o.Decision() == DecisionAccepted }

// Withdrawn reports whether the read took text away: its newest content
// was quarantined, or the resource was not found (TOMBSTONE_PENDING, or a
// deletion it confirmed). Lookup no longer serves the URI's version. A
// cache that keeps prompts rebuilds on Changed or Withdrawn.
func (o Outcome) Withdrawn() bool {
	switch o.Decision() {
	case DecisionQuarantined, DecisionTombstonePending, DecisionTombstoned:
		return true
	}
	return false
}

// AcceptResourceVersion is the single acceptance point: the only code that
// makes a read result visible. It accepts the result of ticket t only if, in
// one atomic step on the ledger,
//
//   - the session and subscription generation of t are the URI's current ones,
//   - the close of that generation has not begun,
//   - t.ReadOrdinal was issued, is unsettled (same request id) and is above
//     the watermark,
//   - the subscription is open (ACTIVE or one of its read sub-states),
//   - the contents are well-formed, name the URI that was read, and the
//     subject that read them is not revoked.
//
// Then, in that same step, it raises the watermark to t.ReadOrdinal, settles
// every ticket at or below it, stores the version and appends its outbox
// entry. A not-found result passes the same checks and moves the subscription
// to TOMBSTONE_PENDING, for list reconciliation to confirm; one that finishes
// a corroboration (deletion.go) confirms the tombstone itself. Content refused by
// the content guard passes the fence but is quarantined: it raises the
// watermark (it is the newest state known) and is never served.
//
// Everything else leaves a stale receipt, changes no version, tombstone or
// outbox entry, and returns a *RefusalError matching ErrRefused and the
// sentinel of its reason. Refusals that need no ledger write (stale ordinal,
// generation mismatch, after close, unknown request) do not allocate.
func (e *Engine) AcceptResourceVersion(t ledger.Ticket, r ReadResult) (out Outcome, err error) {
	// The outcome is written where it is returned from, once: it is half
	// a kilobyte, and copying it cost the stale path more than its check.
	if e.mem != nil && e.guard == nil {
		err = e.acceptInPlace(&out, &t, &r)
		return out, err
	}
	err = e.acceptChecked(&out, &t, &r)
	return out, err
}

// acceptChecked is AcceptResourceVersion on a ledger written by
// compare-and-swap, or with a guard: the record as it is refuses most stale
// results before the guard runs, and the write checks again. out is zero.
func (e *Engine) acceptChecked(out *Outcome, t *ledger.Ticket, r *ReadResult) error {
	ctx := context.Background()
	var cur *ledger.Record // as loaded, on a ledger written by compare-and-swap
	var seen fenceView
	var reason StaleReason
	// Fast path: most refusals are decided by the record as it is, without
	// running the guard or writing anything.
	ok := false
	if e.mem != nil {
		inspect(e.mem, t.URI, func(cur *ledger.Record) {
			if reason, ok = e.check(cur, t); !ok {
				seen = viewOf(cur)
			}
		})
	} else {
		var err error
		if cur, err = e.ledger.Load(ctx, t.URI); err != nil {
			return errorf("load %s: %w", t.URI, err)
		}
		if reason, ok = e.check(cur, t); !ok {
			seen = viewOf(cur)
		}
	}
	if !ok && reason != ReasonReconciliationRequired {
		return e.refuse(out, seen, t, r, reason, "", nil, e.now())
	}
	a := acceptStep{e: e}
	if e.mem != nil {
		// The clock is user code: the step runs under the memory
		// ledger's lock, so the time of the write is read before.
		a.now = e.now()
	}
	if r.err == nil && !r.notFound && e.guard != nil {
		// User code runs before the ledger step and outside every lock.
		a.guardErr = runGuard(e.guard, t.URI, r.contents)
	}
	// A subject revoked through another engine on this ledger is refused
	// like one revoked here: the cached set is brought up to date first.
	if err := e.syncRevoked(ctx); err != nil {
		return err
	}
	// Held only for the write, never while an observer runs: an observer
	// may revoke a subject or record an artifact. A write in place needs
	// none: it checks the subject and stores the version under the memory
	// ledger's lock, which RevokeSubject takes (Revoke) after publishing
	// the subject and before its sweep, so the write either sees the
	// subject revoked or is stored before the sweep reads the ledger.
	if e.mem == nil {
		e.revokeMu.RLock()
	}
	seq, err := e.change(t.URI, cur, cur != nil, false, func(cur, next *ledger.Record, entries *[]OutboxEntry) (bool, error) {
		return a.step(cur, next, entries, out, t, r)
	})
	if e.mem == nil {
		e.revokeMu.RUnlock()
	}
	if err != nil {
		*out = Outcome{}
		return err
	}
	return e.accepted(&a, out, t, r, seq)
}

// acceptInPlace is AcceptResourceVersion on the memory ledger without a
// guard: the check of the record as it is and the write are one step
// under the ledger's lock (memTx), and a refusal costs no copy. out is
// zero.
func (e *Engine) acceptInPlace(out *Outcome, t *ledger.Ticket, r *ReadResult) error {
	if e.mem.RevokedGeneration() != e.revokedGen.Load() {
		if err := e.syncRevoked(context.Background()); err != nil {
			return err
		}
	}
	// The clock is user code: it is read before the ledger's lock is
	// taken, once, for whatever the fence decides.
	now := e.now()
	l := e.mem
	cur := l.Lock(t.URI)
	why, ok := e.check(cur, t)
	if !ok && why != ReasonReconciliationRequired {
		// The ledger's lock guards the audit too (auditLog).
		e.audit.recordLocked(e.stale(out, viewOf(cur), t, r, why, "", now))
		l.Unlock()
		return refusal(why)
	}
	tx := memTx{s: l, cur: cur, held: true}
	return e.acceptLocked(&tx, out, t, r, now, why)
}

// acceptLocked makes the write of acceptInPlace, whose lock tx holds. It
// is never inlined: its frame is not set up for a refusal.
//
// why is what the check of tx's record said: "" or RECONCILIATION_REQUIRED.
//
//go:noinline
func (e *Engine) acceptLocked(tx *memTx, out *Outcome, t *ledger.Ticket, r *ReadResult, now time.Time, why StaleReason) error {
	defer tx.end()
	a := acceptStep{e: e, now: now, checked: true, why: why}
	var next *ledger.Record
	if tx.cur != nil {
		next = tx.prepare()
	}
	write, err := a.step(tx.cur, next, tx.entries(), out, t, r)
	var seq uint64
	if err == nil && write {
		seq, err = tx.commit(e.id)
	} else {
		tx.end()
	}
	if err != nil {
		*out = Outcome{}
		return err
	}
	return e.accepted(&a, out, t, r, seq)
}

// acceptStep is the write of AcceptResourceVersion and what the fence
// decided about the result. (The outcome, the ticket and the result are
// passed along, not kept in it: so they stay on their caller's stack.)
type acceptStep struct {
	e        *Engine
	guardErr error
	// now is the time of the write, read before the ledger's lock on the
	// memory ledger; zero elsewhere, where each attempt reads the clock.
	now time.Time
	// checked says the step's record was checked already, under the lock
	// the step runs under, and why holds what the check said.
	checked bool
	why     StaleReason

	reason StaleReason // why the result was refused; "" when it passed
	detail string
	cause  error
	seen   fenceView // the record that refused it, for the stale receipt
	held   []string  // the subjects the record holds, after a SUBJECT_REVOKED
	path   transitions
	tried  bool // the step ran before: the outcome holds what it wrote
}

// step is the write of a result (stepFunc).
func (a *acceptStep) step(cur, next *ledger.Record, entries *[]OutboxEntry, out *Outcome, t *ledger.Ticket, r *ReadResult) (bool, error) {
	e := a.e
	if a.tried {
		*out = Outcome{} // a compare-and-swap that lost runs the step again
	}
	a.tried = true
	a.reason, a.detail, a.cause, a.held = "", "", nil, nil
	a.path.reset(cur)
	why, ok := a.why, a.why == ""
	if !a.checked {
		why, ok = e.check(cur, t)
	}
	a.checked = false // a step run again checks its record
	if !ok {
		a.reason, a.seen = why, viewOf(cur)
		if why == ReasonReconciliationRequired {
			if err := a.path.move(next, evIdentityUnknown); err != nil {
				return false, nil // already reconciling or closing: audit only
			}
			a.seen = viewOf(next)
			return true, nil
		}
		return false, nil
	}
	if why, what, because := e.checkContent(cur, t, r); why != "" {
		// The ticket is spent: settle it, change nothing else. A read
		// that did not say not found ends a corroboration; a not-found
		// refused only because the subscription is no longer open (a
		// read sent before the not-found that made it pending) says
		// nothing the corroboration did not know, and leaves it.
		a.reason, a.detail, a.cause = why, what, because
		settle(next, &a.path, t.ReadOrdinal, false)
		if !(why == ReasonNotActive && r.notFound) {
			next.Corroboration = nil
		}
		a.seen = viewOf(next)
		if why == ReasonSubjectRevoked {
			a.held = next.Subjects()
		}
		return true, nil
	}
	now := a.now
	if now.IsZero() {
		now = e.now()
	}
	return e.accept(cur, next, t, r, a.guardErr, now, out, &a.path, entries)
}

// accepted tells the observer and completes the outcome of a step whose
// write, if any, is stored.
func (e *Engine) accepted(a *acceptStep, out *Outcome, t *ledger.Ticket, r *ReadResult, seq uint64) error {
	if a.reason != "" {
		e.emit(t.URI, &a.path)
		now := a.now
		if now.IsZero() {
			now = e.now()
		}
		err := e.refuse(out, a.seen, t, r, a.reason, a.detail, a.cause, now)
		if a.reason == ReasonSubjectRevoked {
			// A revocation made through another worker left this URI to
			// its owner: the owner's next read of it sweeps it.
			if serr := e.sweepSubjects(context.Background(), t.URI, a.held); serr != nil && !errors.Is(serr, ErrNotLeaseholder) {
				err = errors.Join(err, serr)
			}
		}
		return err
	}
	e.emit(t.URI, &a.path)
	if revoked, err := e.revokedSince(t.URI, t.Subject); revoked || err != nil {
		*out = Outcome{}
		return err
	}
	out.Accepted = true
	if seq != 0 {
		out.Version.OutboxSeq = seq
		if out.Tombstone != nil {
			out.Tombstone.OutboxSeq = seq
		}
	}
	return nil
}

// revokedSince handles a revocation through another engine that landed
// between the check before an accept and its write: that engine's sweep
// may have passed this URI before the write, so this engine sweeps it
// itself (marking the version revoked and announcing it) and refuses the
// read. Within one engine revokeMu already orders the two.
func (e *Engine) revokedSince(uri, subject string) (bool, error) {
	if err := e.syncRevoked(context.Background()); err != nil {
		return false, err
	}
	if !e.isRevoked(subject) {
		return false, nil
	}
	rc := RevocationReceipt{}
	if err := e.revokeRecord(uri, subject, &rc); err != nil {
		return true, errorf("revoke %q: %w", subject, err)
	}
	return true, &RefusalError{Reason: ReasonSubjectRevoked, Detail: "revoked through another engine while the read was accepted"}
}

// runGuard runs a content guard; a guard that panics refuses the content
// with the panic as its reason, so a bug in user code quarantines one read
// instead of crashing the process or wedging the URI.
func runGuard(g ContentGuard, uri string, contents []Content) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("mcpsync: content guard panicked: %v", p)
		}
	}()
	return g(uri, contents)
}

// check applies the identity part of the fence rule to the record as stored.
func (e *Engine) check(cur *ledger.Record, t *ledger.Ticket) (StaleReason, bool) {
	switch {
	case cur == nil || cur.Sub == nil:
		return ReasonUnknownRequest, false
	case t.SubscriptionGeneration <= cur.ClosedGeneration:
		// Closed before any newer generation opened: whatever it answers
		// is a late result of a close, as the design names it.
		return ReasonStaleAfterClose, false
	case t.Engine != e.id ||
		t.SessionGeneration != cur.Sub.SessionGeneration ||
		t.SubscriptionGeneration != cur.Sub.Generation ||
		t.SessionGeneration != e.sessionGeneration():
		return ReasonGenerationMismatch, false
	case cur.CloseEpoch != 0:
		return ReasonStaleAfterClose, false
	case t.ReadOrdinal > cur.LastIssued:
		return ReasonReconciliationRequired, false
	case t.ReadOrdinal <= cur.Watermark:
		return ReasonStaleOrdinal, false
	case !holdsTicket(cur, t):
		return ReasonUnknownRequest, false
	}
	return "", true
}

func holdsTicket(cur *ledger.Record, t *ledger.Ticket) bool {
	for i := range cur.Tickets {
		if held := &cur.Tickets[i]; held.ReadOrdinal == t.ReadOrdinal {
			return sameIdentity(t, held)
		}
	}
	return false
}

// checkContent applies the rest of the fence rule once the ticket is known to
// be good; a refusal here spends the ticket.
// It returns the reason, a detail, and the cause to wrap, each said once:
// a read prepared with its own refusal lends its reason, detail and cause.
func (e *Engine) checkContent(cur *ledger.Record, t *ledger.Ticket, r *ReadResult) (StaleReason, string, error) {
	if !cur.State.Open() {
		return ReasonNotActive, "", nil
	}
	if e.isRevoked(t.Subject) {
		return ReasonSubjectRevoked, "", nil
	}
	if r.notFound {
		return "", "", nil
	}
	if r.err == nil && len(r.keys) == 0 {
		// The zero ReadResult: no contents were prepared at all.
		return ReasonEmptyContents, "read returned no contents", nil
	}
	if r.err != nil {
		if re, ok := r.err.(*RefusalError); ok {
			return re.Reason, re.Detail, re.Err
		}
		return ReasonInvalidContent, "contents cannot be decoded", r.err
	}
	for _, k := range r.keys {
		if k == t.URI {
			return "", "", nil
		}
	}
	return ReasonURIMismatch, fmt.Sprintf("contents name %q, read was of %q", r.keys[0], t.URI), nil
}

// accept writes into next, a copy of cur, the record of a result that
// passed, and appends its outbox entries to *entries.
func (e *Engine) accept(cur, next *ledger.Record, t *ledger.Ticket, r *ReadResult, guardErr error, now time.Time, out *Outcome, path *transitions, entries *[]OutboxEntry) (bool, error) {
	next.Watermark = t.ReadOrdinal
	v := ResourceVersion{
		Schema:                 SchemaResourceVersion,
		URI:                    t.URI,
		Digest:                 r.digest,
		Bytes:                  r.bytes,
		ReadOrdinal:            t.ReadOrdinal,
		Subject:                t.Subject,
		Server:                 cur.Sub.Server,
		SessionGeneration:      t.SessionGeneration,
		SubscriptionGeneration: t.SubscriptionGeneration,
		LastModified:           r.lastModified,
	}
	if len(r.contents) > 0 {
		v.MIMEType = r.contents[0].MIMEType
	}
	// out is zero: its receipt is written field by field, in place (a
	// composite literal would be built aside and copied).
	rc := &out.Version
	rc.Schema = SchemaVersionReceipt
	rc.Version = v
	rc.RequestID, rc.Trigger, rc.At = t.RequestID, t.Trigger, now
	var prev ResourceVersion
	if cur.Current != nil {
		prev = cur.Current.Version
		out.Version.PreviousDigest = prev.Digest
	}
	// The outbox entry of a version (quarantined or updated), written
	// where the ledger takes it from.
	entry := func(reason ledger.InvalidationReason) {
		*entries = append(*entries, OutboxEntry{})
		en := &(*entries)[len(*entries)-1]
		en.Schema, en.URI, en.Reason, en.Subject, en.At = SchemaInvalidation, t.URI, reason, t.Subject, now
		en.Version, en.Previous = v, prev
	}
	if !r.notFound && unlistedStands(cur) {
		// Deleted by its absence from the listing (deletion.go): this
		// server answers reads of what it no longer lists, so content
		// proves nothing; only a listing brings it back.
		out.Version.Decision = DecisionTombstoned
		if err := path.move(next, evStillAbsent); err != nil {
			return false, err
		}
		next.Tickets = nil
		return true, nil
	}
	if !r.notFound {
		// The server has it.
		next.Corroboration, next.TombstonedAt = nil, time.Time{}
	}

	switch {
	case r.notFound && (!cur.TombstonedAt.IsZero() || cur.Current != nil && cur.Current.Status == ledger.VersionTombstoned):
		// Still gone: the confirmed tombstone stands, announced once. It
		// stands for a URI that never had a version, or whose version
		// was revoked, as well.
		out.Version.Decision = DecisionTombstoned
		if err := path.move(next, evStillAbsent); err != nil {
			return false, err
		}
		next.Tickets = nil
		return true, nil

	case r.notFound:
		if ev, ok := corroboratedBy(cur, *t); ok {
			// The second not-found, issued after a clean scan that began
			// after the first one and did not list the URI.
			out.Version.Decision = DecisionTombstoned
			if err := path.move(next, evCorroborated); err != nil {
				return false, err
			}
			next.NotFoundAt, next.NotFoundOrdinal = now, t.ReadOrdinal
			tomb, rc := e.tombstone(t.URI, cur, next, ev, now)
			*entries = append(*entries, tomb...)
			out.Tombstone = &rc
			return true, nil
		}
		out.Version.Decision = DecisionTombstonePending
		next.NotFoundAt, next.NotFoundOrdinal = now, t.ReadOrdinal
		if keepsCorroboration(cur, *t) && slices.ContainsFunc(cur.Tickets, func(held ledger.Ticket) bool { return held.ReadOrdinal > t.ReadOrdinal }) {
			// An answer older than the corroboration's second read, which
			// is still out: that read decides, so the state stays open
			// for it.
			settle(next, path, t.ReadOrdinal, true)
			return true, nil
		}
		if err := path.move(next, evNotFound); err != nil {
			return false, err
		}
		next.Corroboration = nil
		settle(next, path, t.ReadOrdinal, true)
		// A revoked version stays revoked: no later state may make it
		// servable, or make a revocation look undone.
		if cur.Current != nil && cur.Current.Status != ledger.VersionRevoked {
			sv := e.versionFor(cur, next)
			*sv = *cur.Current
			sv.Status = ledger.VersionTombstonePending
			next.Current = sv
		}
		// The tombstone's outbox entry waits for list reconciliation.
		return true, nil

	case guardErr != nil:
		out.Version.Decision = DecisionQuarantined
		out.Version.GuardReason = guardErr.Error()
		settle(next, path, t.ReadOrdinal, true)
		sv := e.versionFor(cur, next)
		*sv = ledger.StoredVersion{Version: v, Status: ledger.VersionQuarantined}
		next.Current = sv
		entry(ledger.InvalidateQuarantined)
		return true, nil

	case cur.Current != nil && cur.Current.Status == ledger.VersionServed &&
		cur.Current.Version.Digest == v.Digest && cur.Current.Version.Subject == v.Subject:
		// Same content, same subject: the watermark rises, consumers have
		// nothing to do, and the version they derived from stays current.
		out.Version.Decision = DecisionUnchanged
		next.LastAcceptedDigest = v.Digest
		next.ValidatedAt = confirmedAt(cur, t)
		if err := path.move(next, evAccept); err != nil {
			return false, err
		}
		settle(next, path, t.ReadOrdinal, true)
		return true, nil

	default:
		out.Version.Decision = DecisionAccepted
		next.LastAcceptedDigest = v.Digest
		next.ValidatedAt = confirmedAt(cur, t)
		if err := path.move(next, evAccept); err != nil {
			return false, err
		}
		settle(next, path, t.ReadOrdinal, true)
		sv := e.versionFor(cur, next)
		sv.Version, sv.Contents, sv.Status = v, r.contents, ledger.VersionServed
		next.Current = sv
		entry(ledger.InvalidateUpdated)
		return true, nil
	}
}

// confirmedAt is the moment a read of ticket t confirmed the URI's text:
// when it was issued, since the server read the text at some moment
// between then and its answer, so the answer's latency never stretches a
// staleness bound. It never goes back past a confirmation already held.
func confirmedAt(cur *ledger.Record, t *ledger.Ticket) time.Time {
	if cur.ValidatedAt.After(t.IssuedAt) {
		return cur.ValidatedAt
	}
	return t.IssuedAt
}

// settle removes ticket ord (and, when it passed the fence, every ticket
// below it, which can no longer pass). An open subscription then says whether
// reads are still in flight: READ_PENDING while any ticket is unsettled,
// ACTIVE once none is.
//
// It filters next's tickets in place: they must be next's own (stepFunc).
func settle(next *ledger.Record, path *transitions, ord uint64, passed bool) {
	n := 0
	for i := range next.Tickets {
		held := &next.Tickets[i]
		if held.ReadOrdinal == ord || (passed && held.ReadOrdinal < ord) {
			continue
		}
		if n != i {
			next.Tickets[n] = *held
		}
		n++
	}
	clear(next.Tickets[n:])
	kept := next.Tickets[:n]
	if len(kept) == 0 {
		kept = nil
	}
	next.Tickets = kept
	switch {
	case len(kept) == 0 && (next.State == ledger.StateReadPending || next.State == ledger.StateVersionAccepted):
		_ = path.move(next, evSettle)
	case len(kept) > 0 && next.State == ledger.StateVersionAccepted:
		_ = path.move(next, evReadsInFlight)
	}
}

// fenceView is what a stale receipt tells of the record that refused a
// result, taken while the record is at hand.
type fenceView struct {
	known                   bool // there was a record
	state                   ledger.SubscriptionState
	watermark, closeOrdinal uint64
}

func viewOf(r *ledger.Record) fenceView {
	if r == nil {
		return fenceView{}
	}
	return fenceView{known: true, state: r.State, watermark: r.Watermark, closeOrdinal: r.CloseOrdinal}
}

// refuse records a stale receipt and writes it into out, which must be
// zero (the outcome of a refusal is its receipt alone).
func (e *Engine) refuse(out *Outcome, cur fenceView, t *ledger.Ticket, r *ReadResult, reason StaleReason, detail string, cause error, now time.Time) error {
	e.audit.record(e.stale(out, cur, t, r, reason, detail, now))
	if detail != "" {
		return &RefusalError{Reason: reason, Detail: detail, Err: cause}
	}
	return refusal(reason)
}

// stale writes into out, which must be zero, the stale receipt of a
// refusal and returns it.
func (e *Engine) stale(out *Outcome, cur fenceView, t *ledger.Ticket, r *ReadResult, reason StaleReason, detail string, now time.Time) *StaleReceipt {
	s := &out.Stale
	s.Schema = SchemaStaleReceipt
	s.Reason = reason
	s.URI = t.URI
	s.SessionGeneration, s.SubscriptionGeneration = t.SessionGeneration, t.SubscriptionGeneration
	s.ReadOrdinal, s.RequestID = t.ReadOrdinal, t.RequestID
	s.Trigger = t.Trigger
	s.NotFound = r.notFound
	s.Detail = detail
	s.At = now
	if cur.known {
		s.State, s.Watermark, s.CloseOrdinal = cur.state, cur.watermark, cur.closeOrdinal
	}
	return s
}

// AbandonRead settles a ticket whose read failed without an answer (transport
// error, timeout, cancellation). Nothing becomes visible; the ordinal is
// spent, so a late answer to it is refused.
func (e *Engine) AbandonRead(t ledger.Ticket) error {
	var path transitions
	// Deferred, like the ticket it settles.
	_, err := e.change(t.URI, nil, false, true, func(cur, next *ledger.Record, _ *[]OutboxEntry) (bool, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil || !holdsTicket(cur, &t) || cur.Sub.Generation != t.SubscriptionGeneration {
			return false, nil
		}
		settle(next, &path, t.ReadOrdinal, false)
		next.Corroboration = nil // no answer: not the second not-found
		return true, nil
	})
	if err == nil {
		e.emit(t.URI, &path)
	}
	return err
}

// closeFence closes the fence of generation gen: from this write on, every
// result of it, or of an older one, is STALE_AFTER_CLOSE (check). The
// bound only rises.
func closeFence(next *ledger.Record, gen uint64) {
	next.ClosedGeneration = max(next.ClosedGeneration, gen)
}

// openFence gives a new subscription generation its own fence: no ordinal
// issued, none accepted, no close begun. The watermark of the generation
// before is not lowered: it belongs to another key, (session, generation,
// URI), whose results are refused as GENERATION_MISMATCH from now on.
func openFence(next *ledger.Record) {
	next.LastIssued, next.Watermark, next.CloseOrdinal, next.CloseEpoch, next.Tickets = 0, 0, 0, 0, nil
}

// tombstoneUnlisted confirms into next the deletion of a URI of the current
// session that clean scans have missed for as long as DeletionUnlisted asks
// (next.Unlisted, deletion.go), from any open or pending state and whatever
// its reads answer: the tombstone and its outbox entry are written in the
// step that records the last scan. Reads in flight are settled unanswered.
func (e *Engine) tombstoneUnlisted(key string, cur, next *ledger.Record, path *transitions) ([]OutboxEntry, TombstoneReceipt, error) {
	if err := path.move(next, evUnlisted); err != nil {
		return nil, TombstoneReceipt{}, err
	}
	u := *next.Unlisted
	u.Tombstoned = true
	next.Unlisted = &u
	entries, rc := e.tombstone(key, cur, next, unlistedEvidence(&u), e.now())
	return entries, rc, nil
}

// tombstone writes into next, already moved to TOMBSTONED, the confirmed
// deletion of cur on evidence ev, and returns the outbox entry to append
// with it (none for a version consumers were already told to delete:
// tombstoned by an earlier generation, or revoked) and its receipt.
func (e *Engine) tombstone(key string, cur, next *ledger.Record, ev ledger.DeletionEvidence, now time.Time) ([]OutboxEntry, TombstoneReceipt) {
	next.Tickets, next.Corroboration, next.TombstonedAt = nil, nil, now
	rc := TombstoneReceipt{
		Schema: SchemaTombstoneReceipt, URI: key, SessionGeneration: cur.Sub.SessionGeneration,
		SubscriptionGeneration: cur.Sub.Generation, Evidence: ev, NotFoundAt: cur.NotFoundAt, At: now,
	}
	if cur.Current == nil || cur.Current.Status == ledger.VersionTombstoned || cur.Current.Status == ledger.VersionRevoked {
		return nil, rc
	}
	sv := e.versionFor(cur, next)
	*sv = *cur.Current
	sv.Status, sv.Contents = ledger.VersionTombstoned, nil
	next.Current = sv
	return []OutboxEntry{{
		Schema: SchemaInvalidation, URI: key, Reason: ledger.InvalidateTombstoned,
		Previous: cur.Current.Version, Subject: cur.Current.Version.Subject, Evidence: &ev, At: now,
	}}, rc
}
