package mcpsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpsync/mcpsync/ledger"
)

// withEnd returns a copy of s that ended at at.
func withEnd(s *ledger.SubscriptionInfo, at time.Time) *ledger.SubscriptionInfo {
	c := *s
	c.EndedAt = at
	return &c
}

// Subscription is the ledger row of one subscription generation of a URI.
type Subscription struct {
	Schema                 string                   `json:"schema"`
	Subject                string                   `json:"principal"` // resourceSubscription.v1's name
	Server                 ledger.Implementation    `json:"server"`
	URI                    string                   `json:"uri"`
	RawURI                 string                   `json:"rawUri,omitempty"`
	SessionGeneration      uint64                   `json:"sessionGeneration"`
	SessionID              string                   `json:"sessionId,omitempty"`
	Capabilities           ledger.CapabilityReceipt `json:"capabilities"`
	SubscriptionGeneration uint64                   `json:"subscriptionGeneration"`
	State                  ledger.SubscriptionState `json:"state"`
	Mode                   ledger.SubscriptionMode  `json:"mode,omitempty"`
	ModeReason             string                   `json:"modeReason,omitempty"`
	StalenessBoundMs       int64                    `json:"stalenessBoundMs,omitempty"`
	StartedAt              time.Time                `json:"startedAt"`
	EndedAt                time.Time                `json:"endedAt,omitzero"`
	LastNotificationSeq    uint64                   `json:"lastNotificationSeq"`
	LastAcceptedDigest     string                   `json:"lastAcceptedDigest,omitempty"`
	LastIssuedOrdinal      uint64                   `json:"lastIssuedOrdinal"`
	Watermark              uint64                   `json:"watermark"`
	CloseOrdinal           uint64                   `json:"closeOrdinal,omitempty"`
	CloseEpoch             uint64                   `json:"closeEpoch,omitempty"`
	// NotFoundAt is when the newest fenced not-found was accepted.
	NotFoundAt time.Time `json:"notFoundAt,omitzero"`
	// TombstonedAt is when the URI's deletion was last confirmed, zero once
	// a read found it again: a read of the tombstone in flight leaves it.
	TombstonedAt time.Time `json:"tombstonedAt,omitzero"`
	// Corroboration is the deletion evidence gathered short of proof,
	// waiting for a second not-found (deletion.go).
	Corroboration *ledger.Corroboration `json:"corroboration,omitempty"`
	// Unlisted is the URI's absence from clean scans (deletion.go).
	Unlisted *ledger.Unlisting `json:"unlisted,omitempty"`
}

func subscriptionOf(key string, r *ledger.Record) Subscription {
	s := Subscription{Schema: SchemaSubscription, URI: key, State: r.State}
	if r.Sub != nil {
		i := r.Sub
		s.RawURI, s.Subject, s.Server = i.RawURI, i.Subject, i.Server
		s.SessionGeneration, s.SessionID = i.SessionGeneration, i.SessionID
		s.SubscriptionGeneration, s.Mode, s.ModeReason = i.Generation, i.Mode, i.ModeReason
		if i.Capabilities != nil {
			s.Capabilities = *i.Capabilities
		}
		s.StalenessBoundMs = i.StalenessBound.Milliseconds()
		s.StartedAt, s.EndedAt = i.StartedAt, i.EndedAt
	}
	s.LastNotificationSeq, s.LastAcceptedDigest = r.LastNotificationSeq, r.LastAcceptedDigest
	s.LastIssuedOrdinal, s.Watermark, s.CloseOrdinal, s.CloseEpoch = r.LastIssued, r.Watermark, r.CloseOrdinal, r.CloseEpoch
	s.NotFoundAt, s.TombstonedAt, s.Corroboration, s.Unlisted = r.NotFoundAt, r.TombstonedAt, r.Corroboration, r.Unlisted
	return s
}

// Subscription returns the ledger row of the URI's current generation.
func (e *Engine) Subscription(rawURI string) (Subscription, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Subscription{}, err
	}
	var sub Subscription
	known := false
	if err := e.view(key, func(r *ledger.Record) {
		if known = r != nil; known {
			sub = subscriptionOf(key, r)
		}
	}); err != nil {
		return Subscription{}, err
	}
	if !known {
		return Subscription{}, fmt.Errorf("%w: %s", ErrUnknownURI, key)
	}
	return sub, nil
}

// Subscriptions yields the ledger row of every known URI, in URI order, and
// stops at the first error of the ledger (yielding it).
func (e *Engine) Subscriptions() iter.Seq2[Subscription, error] {
	return func(yield func(Subscription, error) bool) {
		if err := e.ledger.Range(context.Background(), func(key string, r *ledger.Record) bool {
			return yield(subscriptionOf(key, r), nil)
		}); err != nil {
			yield(Subscription{}, err)
		}
	}
}

// ResumableSubscriptions yields, in URI order, the ledger row of every
// subscription an earlier session left open (ACTIVE or a read sub-state,
// SUBSCRIBING, TOMBSTONE_PENDING, TOMBSTONED or RECONCILIATION_REQUIRED):
// what a worker restarted on a durable ledger subscribes again, for the same
// subject, in its new session, and re-reads with ledger.TriggerReconnect. Closing
// and closed generations are left alone; they are never reopened. It stops
// at the first error of the ledger, yielding it.
func (e *Engine) ResumableSubscriptions() iter.Seq2[Subscription, error] {
	current := e.sessionGeneration()
	return func(yield func(Subscription, error) bool) {
		for sub, err := range e.Subscriptions() {
			if err != nil {
				yield(Subscription{}, err)
				return
			}
			if sub.SubscriptionGeneration == 0 || sub.CloseEpoch != 0 || sub.SessionGeneration == current {
				continue
			}
			switch st := sub.State; {
			case st.Open(), st == ledger.StateSubscribing, st == ledger.StateTombstonePending,
				st == ledger.StateTombstoned, st == ledger.StateReconciliationRequired:
				if !yield(sub, nil) {
					return
				}
			}
		}
	}
}

// Discover records a URI found by a list scan (DISCOVERED). It does nothing
// for a URI the ledger already knows.
func (e *Engine) Discover(rawURI string) error {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return err
	}
	_, _, err = e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if cur != nil {
			return nil, nil, nil
		}
		return &ledger.Record{Revision: 1, State: ledger.StateDiscovered}, nil, nil
	})
	return err
}

// Subscribe opens a new subscription generation of the URI for subject,
// in the current session: the state becomes SUBSCRIBING and the fence starts
// afresh (ordinals from 1, watermark 0). Call it before sending
// resources/subscribe (or subscriptions/listen); call Activate when the server
// confirms, and BeginClose if it cannot.
//
// A URI whose generation is already open in this session for the same
// subject keeps it (Subscribe is idempotent). A generation that is closing
// must finish closing first. A closed, tombstoned or unknown-outcome
// generation is never reopened: the new generation replaces it.
func (e *Engine) Subscribe(rawURI, subject string) (Subscription, error) {
	return e.subscribe(rawURI, subject, false)
}

// reopen replaces the URI's subscription generation with the next one, for
// subject in the current session, in one write, where the server needs no
// unsubscribe (it was told already, or keeps nothing): the generation is
// closed as BeginClose then FinishClose (acked) would close it, from
// wherever its close is, and the next opened as Subscribe would open it.
// From that write on, every result of the old generation is
// STALE_AFTER_CLOSE. A crash leaves the ledger holding either generation
// open, never the URI closed between them: a restart resumes it
// (ResumableSubscriptions).
func (e *Engine) reopen(rawURI, subject string) (Subscription, error) {
	return e.subscribe(rawURI, subject, true)
}

// subscribe is Subscribe, or with replace reopen.
func (e *Engine) subscribe(rawURI, subject string, replace bool) (Subscription, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Subscription{}, err
	}
	if err := checkSubject(subject); err != nil {
		return Subscription{}, fmt.Errorf("%w (subscribing %s)", err, key)
	}
	s := e.session.Load()
	if !s.live {
		return Subscription{}, ErrNoSession
	}
	var closing, path transitions
	// Deferred when a crash that lost it would leave a generation a
	// restart resumes for the same subject, server and spelling (for a
	// reopen, the old generation, resumed as the new one would be).
	next, _, err := e.updateFrom(key, nil, false, resumedAnyway, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if !replace {
			next, err := e.opening(key, rawURI, subject, s, cur, &path)
			return next, nil, err
		}
		if err := closedTold(cur, &closing); err != nil {
			return nil, nil, err
		}
		path.reset(cur)
		next, err := e.nextGeneration(key, rawURI, subject, s, cur, true, &path)
		return next, nil, err
	})
	if err != nil {
		return Subscription{}, err
	}
	e.emit(key, &closing)
	e.emit(key, &path)
	if err := e.sweepOpened(context.Background(), key, next); err != nil {
		return subscriptionOf(key, next), err
	}
	return subscriptionOf(key, next), nil
}

// opening returns the record of key's next subscription generation, for
// subject in session s, spelled rawURI, over cur, the record as stored
// (nil for none), with its transitions in path; nil when cur's generation
// is open in s for subject already (Subscribe is idempotent).
func (e *Engine) opening(key, rawURI, subject string, s *session, cur *ledger.Record, path *transitions) (*ledger.Record, error) {
	path.reset(cur)
	if cur != nil && cur.Sub != nil && cur.Sub.SessionGeneration == s.gen {
		switch {
		case cur.State == ledger.StateUnsubscribing:
			return nil, &TransitionError{URI: key, From: cur.State, Event: evSubscribe}
		case cur.CloseEpoch == 0 && cur.State != ledger.StateTombstoned:
			if cur.Sub.Subject != subject {
				return nil, fmt.Errorf("%w: %s is subscribed for another subject", ErrForbidden, key)
			}
			return nil, nil // already subscribed
		}
	}
	return e.nextGeneration(key, rawURI, subject, s, cur, false, path)
}

// nextGeneration returns the record of key's next subscription generation,
// as opening does, whatever cur's generation is; closing says cur's is
// closed in the same write (reopen).
func (e *Engine) nextGeneration(key, rawURI, subject string, s *session, cur *ledger.Record, closing bool, path *transitions) (*ledger.Record, error) {
	var gen uint64
	closed := false // cur's generation is closed, or closed by this write
	next := &ledger.Record{Revision: 1}
	if cur != nil {
		next = clone(cur)
		closed = cur.CloseEpoch != 0
		if cur.Sub != nil {
			gen = cur.Sub.Generation
			if closing {
				closeFence(next, gen) // as BeginClose closes it
				closed = true
			}
		}
	}
	// A new generation: its own state machine, its own fence. The version
	// consumers see (Current) and the recorded artifacts carry over.
	raw := rawURI
	if raw == key {
		raw = ""
	}
	next.Sub = &ledger.SubscriptionInfo{
		URI: key, RawURI: raw, Subject: subject, Server: s.info.Capabilities.Server,
		SessionGeneration: s.gen, SessionID: s.info.SessionID, Capabilities: &s.info.Capabilities,
		Generation: gen + 1, StartedAt: e.now(),
		// A reopened copy keeps its bound until this generation publishes one.
		StalenessBound: boundInForce(cur),
	}
	next.State = ledger.StateDiscovered
	next.LastNotificationSeq, next.LastAcceptedDigest = 0, ""
	next.Corroboration = nil
	if closed {
		// Subscribed anew after a close: a deletion confirmed by the
		// listing alone is no longer taken for granted.
		next.Unlisted = nil
	}
	openFence(next)
	path.gen = gen + 1
	if err := path.move(next, evSubscribe); err != nil {
		return nil, err
	}
	return next, nil
}

// openFirst opens, as Subscribe would, the first subscription generation
// for subject of each of keys the ledger holds no record of (raws[i]
// spells keys[i]), on a ledger that takes many writes in one call
// (ledger.Batching): a first subscription is durable before its request
// leaves, and these share commits, as many as the ledger puts in one,
// where Subscribe's made one URI at a time would each wait for one. Every
// other key, every key on another ledger, and any write that fails here
// are left to Subscribe, which makes them when the URI is opened.
//
// The ledger's answer is not taken on trust: results that do not match
// the swaps one for one, or a write said made that the ledger does not
// hold, are an error matching ledger.ErrLedgerCorrupt, and such writes
// count as not made. The error (that, or the first of the writes that
// failed) is for the caller to tell; what the ledger holds decides.
func (e *Engine) openFirst(keys, raws []string, subject string) (opened, error) {
	s := e.session.Load()
	if e.batching == nil || !s.live || checkSubject(subject) != nil {
		return opened{}, nil
	}
	ctx := context.Background()
	swaps := make([]ledger.Swap, 0, len(keys))
	paths := make([]transitions, 0, len(keys))
	held, err := e.batching.LoadAll(ctx, keys)
	if err != nil || len(held) != len(keys) {
		return opened{}, misanswered(len(keys), len(held), err) // each key's pass opens it
	}
	for i, key := range keys {
		if held[i] != nil {
			continue
		}
		var path transitions
		next, err := e.opening(key, raws[i], subject, s, nil, &path)
		if err != nil || next == nil {
			continue
		}
		swaps = append(swaps, ledger.Swap{Key: key, Next: next})
		paths = append(paths, path)
	}
	if len(swaps) == 0 {
		return opened{}, nil
	}
	results := e.batching.CompareAndSwapAll(ctx, swaps)
	if len(results) != len(swaps) {
		return opened{}, errorf("open the first subscriptions of %d URIs: the ledger answered %d results: %w",
			len(swaps), len(results), ledger.ErrLedgerCorrupt)
	}
	written := make([]string, len(swaps))
	for i, s := range swaps {
		written[i] = s.Key
	}
	held, err = e.batching.LoadAll(ctx, written)
	if err == nil && len(held) != len(written) {
		return opened{}, misanswered(len(written), len(held), nil)
	}
	done := opened{gen: s.gen, keys: make(map[string]bool, len(swaps))}
	var corrupt, failed error
	nFailed := 0
	for i, r := range results {
		key := swaps[i].Key
		switch {
		case r.Err != nil:
			if nFailed++; failed == nil {
				failed = errorf("open %s: %w", key, r.Err)
			}
		case r.OK:
			if err == nil && held[i] == nil {
				if corrupt == nil {
					corrupt = errorf("open %s: the ledger said it wrote the first subscription, and holds none: %w", key, ledger.ErrLedgerCorrupt)
				}
				continue
			}
			if err == nil {
				done.keys[key] = true
			}
			e.emit(key, &paths[i])
		}
	}
	if failed != nil {
		failed = errorf("open the first subscriptions of %d of %d URIs (each is opened by its pass): %w", nFailed, len(swaps), failed)
	}
	return done, errors.Join(corrupt, failed)
}

// opened are the keys openFirst wrote, in session generation gen.
type opened struct {
	gen  uint64
	keys map[string]bool
}

// misanswered is the error of a LoadAll that failed (err), or answered n
// records for the want keys asked (a ledger that breaks the contract).
func misanswered(want, n int, err error) error {
	if err != nil {
		return errorf("read the records of %d URIs before opening them: %w", want, err)
	}
	return errorf("read the records of %d URIs: the ledger answered %d: %w", want, n, ledger.ErrLedgerCorrupt)
}

// openIn reports whether key's subscription is open for subject in session
// gen, spelled raw: written, so that a request naming raw may leave.
func (e *Engine) openIn(key, raw, subject string, gen uint64) bool {
	open := false
	err := e.view(key, func(r *ledger.Record) {
		open = r != nil && r.Sub != nil && r.Sub.SessionGeneration == gen && r.CloseEpoch == 0 &&
			r.Sub.Subject == subject && cmp.Or(r.Sub.RawURI, key) == raw &&
			(r.State == ledger.StateSubscribing || r.State.Open())
	})
	return err == nil && open
}

// Activate records the server's confirmation of a subscription
// (SUBSCRIBING -> ACTIVE). mode is ledger.ModePush when the server will notify,
// ledger.ModePoll when it cannot (no subscribe capability, or the subscribe failed).
func (e *Engine) Activate(rawURI string, mode ledger.SubscriptionMode) (Subscription, error) {
	return e.activate(rawURI, mode, "", 0)
}

// activate is Activate with the reason a subscription polls and, when
// bound is positive, its staleness bound (PublishStalenessBound), in one
// write.
func (e *Engine) activate(rawURI string, mode ledger.SubscriptionMode, reason string, bound time.Duration) (Subscription, error) {
	if mode != ledger.ModePush && mode != ledger.ModePoll {
		return Subscription{}, fmt.Errorf("mcpsync: unknown subscription mode %q", mode)
	}
	return e.step(rawURI, evActivate, resumedAnyway, func(next *ledger.Record, _ *transitions) error {
		if next.Sub.SessionGeneration != e.sessionGeneration() {
			// The server confirmed a subscription of a session that is
			// gone: it notifies nobody now, so it must not look ACTIVE.
			return &TransitionError{URI: next.Sub.URI, From: ledger.StateSubscribing, Event: evActivate + " (session ended)"}
		}
		info := *next.Sub
		info.Mode, info.ModeReason = mode, reason
		if bound > 0 {
			info.StalenessBound = bound // as PublishStalenessBound would
		}
		next.Sub = &info
		return nil
	})
}

// PublishStalenessBound records on the open subscription how old its local
// copy may get: with ledger.ModePoll, the poll interval plus jitter; with
// ledger.ModePush, the revalidation interval plus jitter, since a lost
// notification is only caught by the next revalidation read.
func (e *Engine) PublishStalenessBound(rawURI string, bound time.Duration) (Subscription, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Subscription{}, err
	}
	next, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if !cur.State.Open() || cur.Sub.SessionGeneration != e.sessionGeneration() {
			return nil, nil, &TransitionError{URI: key, From: cur.State, Event: "publish staleness bound"}
		}
		next := clone(cur)
		info := *cur.Sub
		info.StalenessBound = bound
		next.Sub = &info
		return next, nil, nil
	})
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(key, next), nil
}

// ended stamps the end of a generation.
func (e *Engine) ended(next *ledger.Record, _ *transitions) error {
	next.Sub = withEnd(next.Sub, e.now())
	return nil
}

// step applies one event of the current generation, with an optional change
// to the new record, deferred when mayDefer says so (updateFrom).
func (e *Engine) step(rawURI, event string, mayDefer func(cur, next *ledger.Record) bool, change func(*ledger.Record, *transitions) error) (Subscription, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return Subscription{}, err
	}
	var path transitions
	next, _, err := e.updateFrom(key, nil, false, mayDefer, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		next := clone(cur)
		if err := path.move(next, event); err != nil {
			return nil, nil, err
		}
		if change != nil {
			if err := change(next, &path); err != nil {
				return nil, nil, err
			}
		}
		return next, nil, nil
	})
	if err != nil {
		return Subscription{}, err
	}
	e.emit(key, &path)
	return subscriptionOf(key, next), nil
}

func isTransitionError(err error) bool {
	_, ok := err.(*TransitionError)
	return ok
}

// Notify records a resources/updated pulse for the URI and coalesces it into
// reads: if no read of the URI's generation is in flight it issues one
// (ok == true: send it); otherwise it marks the generation dirty, and the
// read that is in flight gets exactly one follow-up when it completes,
// however many pulses arrived (with EngineOptions.ConfirmSends, none for pulses
// that arrived before the read went out: it covers them). A pulse that
// finds the URI at its read cap is kept the same way and read as soon as a
// read of the URI settles. A pulse is never dropped while its subscription
// is open.
//
// A pulse for a URI whose tombstone is pending or confirmed reads it again:
// the server may have it back. A pulse for a URI with no subscription in the
// current session, or one that is closing or closed, changes nothing and
// returns a *TransitionError (or ErrUnknownURI).
func (e *Engine) Notify(rawURI string) (t ledger.Ticket, ok bool, err error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return ledger.Ticket{}, false, err
	}
	var path transitions
	// Deferred: a pulse lost in a crash is moot, since a restart reads
	// every URI it resumes.
	_, err = e.change(key, nil, false, true, func(cur, next *ledger.Record, _ *[]OutboxEntry) (bool, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return false, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if !readable(cur.State) || cur.Sub.SessionGeneration != e.sessionGeneration() {
			return false, &TransitionError{URI: key, From: cur.State, Event: evNotify}
		}
		next.LastNotificationSeq++
		// The server says the resource changed: whatever a scan saw
		// before, only a read after this pulse can tell.
		next.Corroboration = nil
		if len(next.Tickets) == 0 {
			if err := path.move(next, evNotify); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return ledger.Ticket{}, false, err
	}
	e.emit(key, &path)
	return e.enqueue(key, ledger.TriggerNotification)
}

// RequestRead asks for a read of the URI for trigger (initial, revalidate,
// poll, reconnect, reconcile), coalesced with reads already in flight exactly
// like Notify.
func (e *Engine) RequestRead(rawURI string, trigger ledger.Trigger) (ledger.Ticket, bool, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return ledger.Ticket{}, false, err
	}
	return e.enqueue(key, trigger)
}

// FinishRead hands the result of a ticket to the fence (AcceptResourceVersion)
// and ends the read: if the URI became dirty while it was in flight, the
// outcome carries the one follow-up read to send.
func (e *Engine) FinishRead(t ledger.Ticket, r ReadResult) (Outcome, error) {
	out, err := e.AcceptResourceVersion(t, r)
	e.endedUnwritten(t, err)
	out.FollowUp, out.FollowUpErr = e.done(t)
	return out, err
}

// Fail ends a read that got no answer (AbandonRead) and returns the
// follow-up read to send, if the URI became dirty meanwhile.
func (e *Engine) Fail(t ledger.Ticket) (*ledger.Ticket, error) {
	err := e.AbandonRead(t)
	e.endedUnwritten(t, err)
	next, ferr := e.done(t)
	return next, errors.Join(err, ferr)
}

// ApplyListing applies list reconciliation's verdict on a URI, from evidence
// (a list scan) gathered since the time given. For a TOMBSTONE_PENDING or
// RECONCILIATION_REQUIRED subscription, present returns it to ACTIVE with a
// reconcile read to send; absent confirms the tombstone (TOMBSTONED, one
// outbox entry with proven evidence), but only when the evidence began after
// the not-found it confirms (ErrEvidenceTooOld otherwise: the resource may
// have been created again in between). Absent is a claim of proof: only a
// fresh SNAPSHOT_PROVEN catalog may make it (Catalog.Reconcile); evidence
// short of proof corroborates there. For an open subscription, absent asks
// for a reconcile read, whose not-found will take the fenced path; present
// needs nothing but ends a corroboration under way. Closed or closing
// generations are left alone: their fence is frozen. A TOMBSTONED URI of
// the current session that is present again is read (its read brings it
// back).
func (e *Engine) ApplyListing(rawURI string, present bool, since time.Time) (ledger.Ticket, bool, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return ledger.Ticket{}, false, err
	}
	t, ok, _, err := e.reconcile(key, present, since, ledger.DeletionEvidence{Kind: ledger.EvidenceProven})
	return t, ok, err
}

// readQueue coalesces reads the way client-go's workqueue coalesces keys:
// an item being read is in processing; a request for it meanwhile only marks
// it dirty, and when the read ends a dirty item is read once more. An item
// is a whole identity, (session, subscription generation, URI): an old
// generation's read can never stand in for a new one's.
type readQueue struct {
	mu sync.Mutex // protects dirty and processing
	// dirty holds the trigger of each item's pending read: a follow-up of
	// the read in processing, or, with nothing in processing, a read that
	// waits for room under the URI's read cap.
	dirty map[queueKey]ledger.Trigger
	// processing maps an item to its queued read in flight, so that only that
	// read's completion, not a stale or duplicate one, ends the processing.
	processing map[queueKey]queuedRead
	// confirmSends: callers report each queued read with Sending just
	// before it goes out (EngineOptions.ConfirmSends, or a Client driving the
	// engine); it is only ever switched on.
	confirmSends bool
	// ended holds, by URI, the request ids of reads that ended (FinishRead,
	// Fail) while the write that settles their ticket failed: the tickets
	// stay in the record, and the URI's next issue drops them, so that
	// failed writes never fill the read cap for good.
	ended map[string][]uint64
	// endedAny says ended holds something (written under mu).
	endedAny atomic.Bool
}

// queueKey is one item of the read queue.
type queueKey struct {
	uri          string
	session, gen uint64
}

func keyOf(t ledger.Ticket) queueKey {
	return queueKey{uri: t.URI, session: t.SessionGeneration, gen: t.SubscriptionGeneration}
}

// queuedRead is the queue's read of an item.
type queuedRead struct {
	id     uint64 // request id; 0 while the ticket is being issued
	unsent bool   // issued, not yet reported sent (with confirmSends only)
}

func (q *readQueue) init(confirmSends bool) {
	q.dirty = make(map[queueKey]ledger.Trigger)
	q.processing = make(map[queueKey]queuedRead)
	q.ended = make(map[string][]uint64)
	q.confirmSends = confirmSends
}

// writeFailed reports whether err, from a step of the engine, is a write
// the ledger failed, rather than a decision: a refusal of the fence, a
// transition the state machine refuses, an unknown URI, a generation that
// moved on, or a lease another worker holds. What such a write was for is
// not done, and is owed (a read's ticket dropped later, a read asked for
// again).
func writeFailed(err error) bool {
	return err != nil && !errors.Is(err, ErrRefused) && !isTransitionError(err) &&
		!errors.Is(err, ErrUnknownURI) && !errors.Is(err, errGenerationMoved) && !errors.Is(err, ErrNotLeaseholder)
}

// endedUnwritten records that t's read ended while the write that settles
// its ticket failed with err.
func (e *Engine) endedUnwritten(t ledger.Ticket, err error) {
	if !writeFailed(err) {
		return
	}
	q := &e.queue
	q.mu.Lock()
	q.ended[t.URI] = append(q.ended[t.URI], t.RequestID)
	q.endedAny.Store(true)
	q.mu.Unlock()
}

// endedOf returns the request ids of key's ended reads whose tickets stay
// in the record (endedUnwritten); a read issued while none is costs no lock.
func (e *Engine) endedOf(key string) []uint64 {
	q := &e.queue
	if !q.endedAny.Load() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.ended[key])
}

// forgetEnded forgets ids, whose tickets a write of key dropped.
func (e *Engine) forgetEnded(key string, ids []uint64) {
	q := &e.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	left := slices.DeleteFunc(q.ended[key], func(id uint64) bool { return slices.Contains(ids, id) })
	if len(left) == 0 {
		delete(q.ended, key)
	} else {
		q.ended[key] = left
	}
	q.endedAny.Store(len(q.ended) > 0)
}

// confirm records that every queued read will be reported with Sending.
func (q *readQueue) confirm() {
	q.mu.Lock()
	q.confirmSends = true
	q.mu.Unlock()
}

// enqueue asks for a read of key's current generation.
func (e *Engine) enqueue(key string, trigger ledger.Trigger) (ledger.Ticket, bool, error) {
	for range casAttempts {
		// The record is kept, for the issue to start from, only where it
		// is an immutable one (not on the memory ledger, which issues in
		// place and needs none).
		var loaded *ledger.Record
		qk, known := queueKey{uri: key}, false
		if err := e.view(key, func(cur *ledger.Record) {
			if known = cur != nil && cur.Sub != nil; known {
				qk.session, qk.gen = cur.Sub.SessionGeneration, cur.Sub.Generation
				if e.mem == nil {
					loaded = cur
				}
			}
		}); err != nil {
			return ledger.Ticket{}, false, err
		}
		if !known {
			return ledger.Ticket{}, false, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		q := &e.queue
		q.mu.Lock()
		if r, busy := q.processing[qk]; busy {
			// A pulse before the read went out is covered by it: the change it
			// announces happened before the server answers that read. Only a
			// later pulse may announce a change the read missed.
			if _, ok := q.dirty[qk]; !ok && !r.unsent {
				q.dirty[qk] = trigger
			}
			q.mu.Unlock()
			return ledger.Ticket{}, false, nil
		}
		delete(q.dirty, qk) // the read about to be issued covers a waiting one
		q.processing[qk] = queuedRead{unsent: q.confirmSends}
		q.mu.Unlock()
		t, ok, err := e.issueQueued(qk, trigger, loaded)
		if errors.Is(err, errGenerationMoved) {
			continue // a new generation opened meanwhile: ask for its read
		}
		return t, ok, err
	}
	return ledger.Ticket{}, false, fmt.Errorf("%w: %s", ErrLedgerConflict, key)
}

// Sending reports that the read of queued ticket t goes out now. With
// EngineOptions.ConfirmSends, pulses for its URI that arrived before this call
// are covered by the read and earn no follow-up; without it, Sending does
// nothing and every pulse during a read earns one.
func (e *Engine) Sending(t ledger.Ticket) {
	q := &e.queue
	qk := keyOf(t)
	q.mu.Lock()
	if r, ok := q.processing[qk]; ok && r.id == t.RequestID {
		q.processing[qk] = queuedRead{id: r.id}
	}
	q.mu.Unlock()
}

// issueQueued issues the queue's read of item qk, which the caller has
// marked processing, and records its request id. At the read cap the item
// stops processing but stays dirty, to be read when a read of the URI
// settles; on any other failure its pending pulse is dropped, since a
// generation that cannot be read has nothing to refresh.
func (e *Engine) issueQueued(qk queueKey, trigger ledger.Trigger, loaded *ledger.Record) (ledger.Ticket, bool, error) {
	q := &e.queue
	t, err := e.issue(qk.uri, trigger, &qk, loaded)
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case errors.Is(err, ErrTooManyReads):
		delete(q.processing, qk)
		if _, ok := q.dirty[qk]; !ok {
			q.dirty[qk] = trigger
		}
		return ledger.Ticket{}, false, nil
	case err != nil:
		delete(q.processing, qk)
		delete(q.dirty, qk)
		return ledger.Ticket{}, false, err
	}
	q.processing[qk] = queuedRead{id: t.RequestID, unsent: q.confirmSends}
	return t, true, nil
}

// done ends a read of t's item: the queue's own read stops processing, and
// the item's pending read (a follow-up, or one that waited for room under
// the read cap) is issued. A pending read that cannot be issued for a
// failed write is returned as a *ReadError of its trigger: the pulses it
// was for are owed a read (ask again with RequestRead).
func (e *Engine) done(t ledger.Ticket) (*ledger.Ticket, error) {
	q := &e.queue
	qk := keyOf(t)
	q.mu.Lock()
	r, busy := q.processing[qk]
	switch {
	case busy && r.id != t.RequestID:
		q.mu.Unlock()
		return nil, nil // not the queue's read: the queue's own is still out
	case busy:
		delete(q.processing, qk)
	}
	trigger, dirty := q.dirty[qk]
	if !dirty {
		q.mu.Unlock()
		return nil, nil
	}
	delete(q.dirty, qk)
	q.processing[qk] = queuedRead{unsent: q.confirmSends}
	q.mu.Unlock()
	next, ok, err := e.issueQueued(qk, trigger, nil)
	switch {
	case writeFailed(err):
		return nil, &ReadError{URI: qk.uri, Trigger: trigger, Err: err}
	case !ok:
		return nil, nil
	}
	return &next, nil
}
