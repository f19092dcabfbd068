package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
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
)

// Trigger is why a read was issued.
type Trigger string

// Read triggers.
const (
	TriggerInitial      Trigger = "initial"
	TriggerNotification Trigger = "notification"
	TriggerRevalidate   Trigger = "revalidate"
	TriggerPoll         Trigger = "poll"
	TriggerReconnect    Trigger = "reconnect"
	TriggerReconcile    Trigger = "reconcile"
)

// Ticket is the fence's permission to send one resources/read. It is issued
// before the request goes out and must come back with the result.
type Ticket struct {
	// Engine is the ID of the engine that issued the ticket: only that
	// engine may accept its result, so a read sent before a restart or
	// an export never passes the fence of a later engine, whatever
	// numbers the two happen to share.
	Engine                 string    `json:"engine"`
	URI                    string    `json:"uri"`
	SessionGeneration      uint64    `json:"sessionGeneration"`
	SubscriptionGeneration uint64    `json:"subscriptionGeneration"`
	ReadOrdinal            uint64    `json:"readOrdinal"`
	RequestID              uint64    `json:"requestId"`
	Trigger                Trigger   `json:"trigger"`
	Subject                string    `json:"subject"`
	IssuedAt               time.Time `json:"issuedAt"`
}

// sameIdentity reports whether t is the ticket held as issued: a ticket is
// a value a caller may store, copy or send through JSON, so the fence
// compares all of it, never trusting a field it did not record.
func (t Ticket) sameIdentity(held Ticket) bool {
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
func (e *Engine) IssueTicket(rawURI string, trigger Trigger) (Ticket, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Ticket{}, err
	}
	return e.issue(key, trigger, nil, nil)
}

// errGenerationMoved: the queue asked for a read of a generation that is no
// longer the URI's current one.
var errGenerationMoved = errors.New("mcpsync: subscription generation moved on")

// issue hands out a ticket of the URI's current generation, or, with want
// set, of that generation only (errGenerationMoved otherwise).
func (e *Engine) issue(key string, trigger Trigger, want *queueKey, loaded *Record) (Ticket, error) {
	var t Ticket
	var path transitions
	var id uint64
	_, _, err := e.updateFrom(key, loaded, loaded != nil, func(cur *Record) (*Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if cur.Sub.SessionGeneration != e.sessionGeneration() {
			return nil, nil, &TransitionError{URI: key, From: cur.State, Event: evIssueRead + " (session ended)"}
		}
		if want != nil && (want.session != cur.Sub.SessionGeneration || want.gen != cur.Sub.Generation) {
			return nil, nil, errGenerationMoved
		}
		if len(cur.Tickets) >= e.maxTickets {
			return nil, nil, fmt.Errorf("%w: %s has %d reads in flight", ErrTooManyReads, key, len(cur.Tickets))
		}
		next := cur.clone()
		if err := path.move(next, evIssueRead); err != nil {
			return nil, nil, err
		}
		if id == 0 {
			// Reserved once, kept across compare-and-swap retries: an id
			// is never handed out twice, and a retry need not waste one.
			var err error
			if id, err = e.requestID(context.Background()); err != nil {
				return nil, nil, err
			}
		}
		next.LastIssued++
		t = Ticket{
			Engine:                 e.id,
			URI:                    key,
			SessionGeneration:      cur.Sub.SessionGeneration,
			SubscriptionGeneration: cur.Sub.Generation,
			ReadOrdinal:            next.LastIssued,
			RequestID:              id,
			Trigger:                trigger,
			Subject:                cur.Sub.Subject,
			IssuedAt:               e.now(),
		}
		next.Tickets = append(cur.Tickets[:len(cur.Tickets):len(cur.Tickets)], t)
		return next, nil, nil
	})
	if err != nil {
		return Ticket{}, err
	}
	e.emit(key, &path)
	return t, nil
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
	// while this one was in flight (set by Complete only).
	FollowUp *Ticket
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
func (e *Engine) AcceptResourceVersion(t Ticket, r ReadResult) (Outcome, error) {
	// Fast path: most refusals are decided by the record as it is, without
	// running the guard or writing anything.
	cur, err := e.ledger.Load(context.Background(), t.URI)
	if err != nil {
		return Outcome{}, fmt.Errorf("mcpsync: load %s: %w", t.URI, err)
	}
	if reason, ok := e.check(cur, t); !ok && reason != ReasonReconciliationRequired {
		return e.refuse(cur, t, r, reason, "", nil)
	}
	var guardErr error
	if r.err == nil && !r.notFound && e.guard != nil {
		// User code runs before the ledger step and outside every lock.
		guardErr = runGuard(e.guard, t.URI, r.contents)
	}
	// A subject revoked through another engine on this ledger is refused
	// like one revoked here: the cached set is brought up to date first.
	if err := e.syncRevoked(context.Background()); err != nil {
		return Outcome{}, err
	}
	// Held only for the write, never while an observer runs: an observer
	// may revoke a subject or record an artifact.
	e.revokeMu.RLock()
	var out Outcome
	var reason StaleReason
	var detail string
	var cause error
	var path transitions
	next, seq, err := e.updateFrom(t.URI, cur, true, func(cur *Record) (*Record, []OutboxEntry, error) {
		out, reason, detail, cause = Outcome{}, "", "", nil
		path.reset(cur)
		if why, ok := e.check(cur, t); !ok {
			reason = why
			if why == ReasonReconciliationRequired {
				next := cur.clone()
				if err := path.move(next, evIdentityUnknown); err != nil {
					return nil, nil, nil // already reconciling or closing: audit only
				}
				return next, nil, nil
			}
			return nil, nil, nil
		}
		if why, what, because := e.checkContent(cur, t, r); why != "" {
			// The ticket is spent: settle it, change nothing else. A read
			// that did not say not found ends a corroboration; a not-found
			// refused only because the subscription is no longer open (a
			// read sent before the not-found that made it pending) says
			// nothing the corroboration did not know, and leaves it.
			reason, detail, cause = why, what, because
			next := cur.clone()
			settle(next, &path, t.ReadOrdinal, false)
			if !(why == ReasonNotActive && r.notFound) {
				next.Corroboration = nil
			}
			return next, nil, nil
		}
		return e.accept(cur, t, r, guardErr, &out, &path)
	})
	e.revokeMu.RUnlock()
	if err != nil {
		return Outcome{}, err
	}
	if reason != "" {
		e.emit(t.URI, &path)
		out, err := e.refuse(next, t, r, reason, detail, cause)
		if reason == ReasonSubjectRevoked && next != nil {
			// A revocation made through another worker left this URI to
			// its owner: the owner's next read of it sweeps it.
			if serr := e.sweepOpened(context.Background(), t.URI, next); serr != nil && !errors.Is(serr, ErrNotLeaseholder) {
				err = errors.Join(err, serr)
			}
		}
		return out, err
	}
	e.emit(t.URI, &path)
	if revoked, err := e.revokedSince(t); revoked || err != nil {
		return Outcome{}, err
	}
	out.Accepted = true
	if seq != 0 {
		out.Version.OutboxSeq = seq
		if out.Tombstone != nil {
			out.Tombstone.OutboxSeq = seq
		}
	}
	return out, nil
}

// revokedSince handles a revocation through another engine that landed
// between the check before an accept and its write: that engine's sweep
// may have passed this URI before the write, so this engine sweeps it
// itself (marking the version revoked and announcing it) and refuses the
// read. Within one engine revokeMu already orders the two.
func (e *Engine) revokedSince(t Ticket) (bool, error) {
	if err := e.syncRevoked(context.Background()); err != nil {
		return false, err
	}
	if !e.isRevoked(t.Subject) {
		return false, nil
	}
	rc := RevocationReceipt{}
	if err := e.revokeRecord(t.URI, t.Subject, &rc); err != nil {
		return true, fmt.Errorf("mcpsync: revoke %q: %w", t.Subject, err)
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
func (e *Engine) check(cur *Record, t Ticket) (StaleReason, bool) {
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

func holdsTicket(cur *Record, t Ticket) bool {
	for _, held := range cur.Tickets {
		if held.ReadOrdinal == t.ReadOrdinal {
			return t.sameIdentity(held)
		}
	}
	return false
}

// checkContent applies the rest of the fence rule once the ticket is known to
// be good; a refusal here spends the ticket.
// It returns the reason, a detail, and the cause to wrap, each said once:
// a read prepared with its own refusal lends its reason, detail and cause.
func (e *Engine) checkContent(cur *Record, t Ticket, r ReadResult) (StaleReason, string, error) {
	if !cur.State.open() {
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

// accept builds the record and outbox entries of a result that passed.
func (e *Engine) accept(cur *Record, t Ticket, r ReadResult, guardErr error, out *Outcome, path *transitions) (*Record, []OutboxEntry, error) {
	now := e.now()
	next := cur.clone()
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
	out.Version = VersionReceipt{Schema: SchemaVersionReceipt, Version: v, RequestID: t.RequestID, Trigger: t.Trigger, At: now}
	var prev ResourceVersion
	if cur.Current != nil {
		prev = cur.Current.Version
		out.Version.PreviousDigest = prev.Digest
	}
	entry := OutboxEntry{Schema: SchemaInvalidation, URI: t.URI, Version: v, Previous: prev, Subject: t.Subject, At: now}
	if !r.notFound {
		// The server has it.
		next.Corroboration, next.TombstonedAt = nil, time.Time{}
	}

	switch {
	case r.notFound && (!cur.TombstonedAt.IsZero() || cur.Current != nil && cur.Current.Status == VersionTombstoned):
		// Still gone: the confirmed tombstone stands, announced once. It
		// stands for a URI that never had a version, or whose version
		// was revoked, as well.
		out.Version.Decision = DecisionTombstoned
		if err := path.move(next, evStillAbsent); err != nil {
			return nil, nil, err
		}
		next.Tickets = nil
		return next, nil, nil

	case r.notFound:
		if ev, ok := corroboratedBy(cur, t); ok {
			// The second not-found, issued after a clean scan that began
			// after the first one and did not list the URI.
			out.Version.Decision = DecisionTombstoned
			if err := path.move(next, evCorroborated); err != nil {
				return nil, nil, err
			}
			next.NotFoundAt, next.NotFoundOrdinal = now, t.ReadOrdinal
			entries, rc := e.tombstone(t.URI, cur, next, ev)
			out.Tombstone = &rc
			return next, entries, nil
		}
		out.Version.Decision = DecisionTombstonePending
		next.NotFoundAt, next.NotFoundOrdinal = now, t.ReadOrdinal
		if keepsCorroboration(cur, t) && slices.ContainsFunc(cur.Tickets, func(held Ticket) bool { return held.ReadOrdinal > t.ReadOrdinal }) {
			// An answer older than the corroboration's second read, which
			// is still out: that read decides, so the state stays open
			// for it.
			settle(next, path, t.ReadOrdinal, true)
			return next, nil, nil
		}
		if err := path.move(next, evNotFound); err != nil {
			return nil, nil, err
		}
		next.Corroboration = nil
		settle(next, path, t.ReadOrdinal, true)
		// A revoked version stays revoked: no later state may make it
		// servable, or make a revocation look undone.
		if cur.Current != nil && cur.Current.Status != VersionRevoked {
			sv := *cur.Current
			sv.Status = VersionTombstonePending
			next.Current = &sv
		}
		// The tombstone's outbox entry waits for list reconciliation.
		return next, nil, nil

	case guardErr != nil:
		out.Version.Decision = DecisionQuarantined
		out.Version.GuardReason = guardErr.Error()
		settle(next, path, t.ReadOrdinal, true)
		next.Current = &StoredVersion{Version: v, Status: VersionQuarantined}
		entry.Reason = InvalidateQuarantined
		return next, []OutboxEntry{entry}, nil

	case cur.Current != nil && cur.Current.Status == VersionServed &&
		cur.Current.Version.Digest == v.Digest && cur.Current.Version.Subject == v.Subject:
		// Same content, same subject: the watermark rises, consumers have
		// nothing to do, and the version they derived from stays current.
		out.Version.Decision = DecisionUnchanged
		next.LastAcceptedDigest = v.Digest
		next.ValidatedAt = now
		if err := path.move(next, evAccept); err != nil {
			return nil, nil, err
		}
		settle(next, path, t.ReadOrdinal, true)
		return next, nil, nil

	default:
		out.Version.Decision = DecisionAccepted
		next.LastAcceptedDigest = v.Digest
		next.ValidatedAt = now
		if err := path.move(next, evAccept); err != nil {
			return nil, nil, err
		}
		settle(next, path, t.ReadOrdinal, true)
		next.Current = &StoredVersion{Version: v, Contents: r.contents, Status: VersionServed}
		entry.Reason = InvalidateUpdated
		return next, []OutboxEntry{entry}, nil
	}
}

// settle removes ticket ord (and, when it passed the fence, every ticket
// below it, which can no longer pass). An open subscription then says whether
// reads are still in flight: READ_PENDING while any ticket is unsettled,
// ACTIVE once none is.
func settle(next *Record, path *transitions, ord uint64, passed bool) {
	kept := next.Tickets[:0:0]
	for _, held := range next.Tickets {
		if held.ReadOrdinal == ord || (passed && held.ReadOrdinal < ord) {
			continue
		}
		kept = append(kept, held)
	}
	if len(kept) == 0 {
		kept = nil
	}
	next.Tickets = kept
	switch {
	case len(kept) == 0 && (next.State == StateReadPending || next.State == StateVersionAccepted):
		_ = path.move(next, evSettle)
	case len(kept) > 0 && next.State == StateVersionAccepted:
		_ = path.move(next, evReadsInFlight)
	}
}

// refuse records and returns a stale receipt.
func (e *Engine) refuse(cur *Record, t Ticket, r ReadResult, reason StaleReason, detail string, cause error) (Outcome, error) {
	s := StaleReceipt{
		Schema:                 SchemaStaleReceipt,
		Reason:                 reason,
		URI:                    t.URI,
		SessionGeneration:      t.SessionGeneration,
		SubscriptionGeneration: t.SubscriptionGeneration,
		ReadOrdinal:            t.ReadOrdinal,
		RequestID:              t.RequestID,
		Trigger:                t.Trigger,
		NotFound:               r.notFound,
		Detail:                 detail,
		At:                     e.now(),
	}
	if cur != nil {
		s.State, s.Watermark, s.CloseOrdinal = cur.State, cur.Watermark, cur.CloseOrdinal
	}
	e.audit.record(&s)
	if detail != "" {
		return Outcome{Stale: s}, &RefusalError{Reason: reason, Detail: detail, Err: cause}
	}
	return Outcome{Stale: s}, refusal(reason)
}

// AbandonRead settles a ticket whose read failed without an answer (transport
// error, timeout, cancellation). Nothing becomes visible; the ordinal is
// spent, so a late answer to it is refused.
func (e *Engine) AbandonRead(t Ticket) error {
	var path transitions
	_, _, err := e.update(t.URI, func(cur *Record) (*Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil || !holdsTicket(cur, t) || cur.Sub.Generation != t.SubscriptionGeneration {
			return nil, nil, nil
		}
		next := cur.clone()
		settle(next, &path, t.ReadOrdinal, false)
		next.Corroboration = nil // no answer: not the second not-found
		return next, nil, nil
	})
	if err == nil {
		e.emit(t.URI, &path)
	}
	return err
}

// openFence gives a new subscription generation its own fence: no ordinal
// issued, none accepted, no close begun. The watermark of the generation
// before is not lowered: it belongs to another key, (session, generation,
// URI), whose results are refused as GENERATION_MISMATCH from now on.
func openFence(next *Record) {
	next.LastIssued, next.Watermark, next.CloseOrdinal, next.CloseEpoch, next.Tickets = 0, 0, 0, 0, nil
}

// SchemaCloseReceipt is the schema of close receipts.
const SchemaCloseReceipt = "closeReceipt.v1"

// CloseReceipt records the freezing of a subscription generation's fence.
type CloseReceipt struct {
	Schema                 string            `json:"schema"`
	URI                    string            `json:"uri"`
	SessionGeneration      uint64            `json:"sessionGeneration"`
	SubscriptionGeneration uint64            `json:"subscriptionGeneration"`
	CloseOrdinal           uint64            `json:"closeOrdinal"`
	CloseEpoch             uint64            `json:"closeEpoch"`
	Watermark              uint64            `json:"watermark"`
	ReadsInFlight          int               `json:"readsInFlight"`
	State                  SubscriptionState `json:"state"`
}

// BeginClose starts closing the URI's subscription generation (the moment
// before resources/unsubscribe is sent): by compare-and-swap it moves the
// subscription to UNSUBSCRIBING and freezes closeOrdinal (the last ordinal
// issued) and a close epoch. From then on no ordinal is issued, and every
// result of this generation, content or not-found, whenever it was sent, is
// refused with STALE_AFTER_CLOSE. Cached content stays until evicted.
//
// BeginClose is idempotent: on a generation already closing or closed it
// returns that generation's receipt.
func (e *Engine) BeginClose(rawURI string) (CloseReceipt, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return CloseReceipt{}, err
	}
	var path transitions
	var epoch uint64
	next, _, err := e.update(key, func(cur *Record) (*Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if cur.CloseEpoch != 0 {
			return nil, nil, nil
		}
		next := cur.clone()
		if err := path.move(next, evBeginClose); err != nil {
			return nil, nil, err
		}
		if epoch == 0 {
			// Allocated before the record is written: a crash in between
			// leaves an unused epoch, never one used twice.
			var err error
			if epoch, err = e.ledger.Next(context.Background(), CounterCloseEpoch, 1); err != nil {
				return nil, nil, fmt.Errorf("mcpsync: allocate close epoch: %w", err)
			}
		}
		next.CloseOrdinal = cur.LastIssued
		next.CloseEpoch = epoch
		next.ClosedGeneration = cur.Sub.Generation
		next.Corroboration = nil
		return next, nil, nil
	})
	if err != nil {
		return CloseReceipt{}, err
	}
	e.emit(key, &path)
	return CloseReceipt{
		Schema:                 SchemaCloseReceipt,
		URI:                    key,
		SessionGeneration:      next.Sub.SessionGeneration,
		SubscriptionGeneration: next.Sub.Generation,
		CloseOrdinal:           next.CloseOrdinal,
		CloseEpoch:             next.CloseEpoch,
		Watermark:              next.Watermark,
		ReadsInFlight:          len(next.Tickets),
		State:                  next.State,
	}, nil
}

// confirmTombstone is list reconciliation's verdict "absent" on a
// TOMBSTONE_PENDING (or RECONCILIATION_REQUIRED) subscription, from evidence
// ev gathered since the time given: the tombstone and its outbox entry are
// written in one step. Evidence older than the not-found it would confirm
// proves nothing about it (the resource may have come back in between) and
// is refused with ErrEvidenceTooOld. It refuses once the close began, like
// every other write of the fence.
//
// The subscription stays open on the server: a later pulse or revalidation
// reads it again, and a read that finds it brings the URI back.
func (e *Engine) confirmTombstone(key string, since time.Time, ev DeletionEvidence, path *transitions) (TombstoneReceipt, error) {
	var rc TombstoneReceipt
	_, seq, err := e.update(key, func(cur *Record) (*Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if since.Before(cur.NotFoundAt) {
			return nil, nil, fmt.Errorf("%w: %s was not found at %s, the evidence dates from %s",
				ErrEvidenceTooOld, key, cur.NotFoundAt.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
		}
		next := cur.clone()
		if err := path.move(next, evAbsent); err != nil {
			return nil, nil, err
		}
		var entries []OutboxEntry
		entries, rc = e.tombstone(key, cur, next, ev)
		return next, entries, nil
	})
	if err != nil {
		return TombstoneReceipt{}, err
	}
	rc.OutboxSeq = seq
	return rc, nil
}

// tombstone writes into next, already moved to TOMBSTONED, the confirmed
// deletion of cur on evidence ev, and returns the outbox entry to append
// with it (none for a version consumers were already told to delete:
// tombstoned by an earlier generation, or revoked) and its receipt.
func (e *Engine) tombstone(key string, cur, next *Record, ev DeletionEvidence) ([]OutboxEntry, TombstoneReceipt) {
	now := e.now()
	next.Tickets, next.Corroboration, next.TombstonedAt = nil, nil, now
	rc := TombstoneReceipt{
		Schema: SchemaTombstoneReceipt, URI: key, SessionGeneration: cur.Sub.SessionGeneration,
		SubscriptionGeneration: cur.Sub.Generation, Evidence: ev, NotFoundAt: cur.NotFoundAt, At: now,
	}
	if cur.Current == nil || cur.Current.Status == VersionTombstoned || cur.Current.Status == VersionRevoked {
		return nil, rc
	}
	sv := *cur.Current
	sv.Status, sv.Contents = VersionTombstoned, nil
	next.Current = &sv
	return []OutboxEntry{{
		Schema: SchemaInvalidation, URI: key, Reason: InvalidateTombstoned,
		Previous: cur.Current.Version, Subject: cur.Current.Version.Subject, Evidence: &ev, At: now,
	}}, rc
}

// revokeRecord marks the URI's current version unservable if subject read
// it, and writes one outbox entry for it and one per derived artifact
// recorded against a version that subject read, in one step.
func (e *Engine) revokeRecord(key, subject string, rc *RevocationReceipt) error {
	var versions []ResourceVersion
	var artifacts []DerivedArtifact
	_, _, err := e.update(key, func(cur *Record) (*Record, []OutboxEntry, error) {
		versions, artifacts = nil, nil
		if cur == nil {
			return nil, nil, nil
		}
		now := e.now()
		next := cur.clone()
		var entries []OutboxEntry
		if c := cur.Current; c != nil && c.Version.Subject == subject && c.Status != VersionRevoked {
			sv := *c
			sv.Status, sv.Contents = VersionRevoked, nil
			next.Current = &sv
			versions = append(versions, c.Version)
			entries = append(entries, OutboxEntry{Schema: SchemaInvalidation, URI: key, Reason: InvalidateRevoked, Previous: c.Version, Subject: subject, At: now})
		}
		next.Artifacts = nil
		for i, a := range cur.Artifacts {
			if a.Version.Subject != subject {
				next.Artifacts = append(next.Artifacts, a)
				continue
			}
			artifacts = append(artifacts, a)
			entries = append(entries, OutboxEntry{Schema: SchemaInvalidation, URI: key, Reason: InvalidateRevoked, Previous: a.Version, Subject: subject, Artifact: &cur.Artifacts[i], At: now})
		}
		if len(entries) == 0 {
			return nil, nil, nil
		}
		return next, entries, nil
	})
	if err != nil {
		return err
	}
	rc.Versions = append(rc.Versions, versions...)
	rc.Artifacts = append(rc.Artifacts, artifacts...)
	return nil
}
