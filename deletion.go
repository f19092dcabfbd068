package mcpsync

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcpsync/mcpsync/ledger"
)

// Deletion evidence: what confirms a tombstone.
//
// A fenced not-found makes a subscription TOMBSTONE_PENDING; a read alone
// never confirms a deletion, since a server that failed for a moment, or a
// resource deleted and created again, answers not found too. Two kinds of
// evidence confirm it, each gathered after the not-found:
//
//   - proven: a SNAPSHOT_PROVEN catalog that does not list the URI. Only a
//     server that negotiated the snapshot extension can give one.
//   - corroborated: a clean two-pass scan (SNAPSHOT_UNPROVEN: both passes
//     identical, no list_changed, no fault) that began after the not-found
//     and does not list the URI, and then a second fenced read of the same
//     subscription generation, issued after that scan ended, that is again
//     not found. This is what every server without the extension can give.
//
// The corroboration is a small state machine kept in the ledger record
// (Record.Corroboration), so it survives a restart: Catalog.Reconcile
// records the scan and asks for the second read; the fence confirms the
// tombstone when that read says not found. Anything else on the way (the
// URI listed, a pulse, a read that finds content, a read that fails or is
// refused) clears it and leaves the URI on, or returns it to, the live path.
//
// Some servers never say not found: they answer the read of a resource they
// deleted (an empty list, say), so neither kind of evidence ever arrives and
// only their listing says the resource is gone. Under DeletionUnlisted a
// third kind confirms a deletion:
//
//   - unlisted: the URI was missing from every clean scan (SNAPSHOT_PROVEN,
//     or SNAPSHOT_UNPROVEN from two identical passes) over a span of at
//     least UnlistedFor, measured from the end of the first such scan to the
//     start of the newest; reads may still answer.
//
// The absence is kept in the ledger record (Record.Unlisted), so that it
// survives a restart and a new subscription generation. A scan that lists
// the URI ends it, and so does a scan that failed (Catalog.Reconcile
// with an UNRECONCILED catalog, or a failed Client.Scan): a server whose
// listing fails never deletes anything. Once it confirmed a tombstone, a
// read that finds content does not bring the URI back, since the server
// answers reads of what it no longer has; a scan that lists it does, and so
// does a subscription opened after the URI was unsubscribed.

// DeletionPolicy says which evidence may confirm a deletion.
type DeletionPolicy string

// Deletion policies.
const (
	// DeletionDefault: corroborated evidence where the session cannot prove
	// (the server did not negotiate the snapshot extension), proven evidence
	// only where it can.
	DeletionDefault DeletionPolicy = ""
	// DeletionProvenOnly: only a SNAPSHOT_PROVEN catalog confirms a
	// deletion. Against a server without the snapshot extension, deleted
	// resources stay TOMBSTONE_PENDING (not served, not announced).
	DeletionProvenOnly DeletionPolicy = "proven"
	// DeletionCorroborated: proven or corroborated evidence, whatever the
	// server negotiated.
	DeletionCorroborated DeletionPolicy = "corroborated"
	// DeletionUnlisted: proven or corroborated evidence, and also a URI's
	// absence from clean scans over UnlistedFor, even while its reads still
	// answer: for servers that answer the read of a deleted resource. A
	// listing that drops a resource for a while deletes it; this is never
	// the default.
	DeletionUnlisted DeletionPolicy = "unlisted"
)

func (p DeletionPolicy) valid() bool {
	return p == DeletionDefault || p == DeletionProvenOnly || p == DeletionCorroborated || p == DeletionUnlisted
}

// corroborates reports whether the policy lets an unproven catalog begin a
// corroboration, for a session that negotiated the snapshot extension or not.
func (p DeletionPolicy) corroborates(snapshotNegotiated bool) bool {
	switch p {
	case DeletionCorroborated, DeletionUnlisted:
		return true
	case DeletionDefault:
		return !snapshotNegotiated
	}
	return false
}

// TombstoneReceipt records a confirmed deletion and the evidence for it.
type TombstoneReceipt struct {
	Schema                 string                  `json:"schema"`
	URI                    string                  `json:"uri"`
	SessionGeneration      uint64                  `json:"sessionGeneration"`
	SubscriptionGeneration uint64                  `json:"subscriptionGeneration"`
	Evidence               ledger.DeletionEvidence `json:"evidence"`
	// NotFoundAt is when the newest not-found before the confirmation was
	// accepted.
	NotFoundAt time.Time `json:"notFoundAt,omitzero"`
	// OutboxSeq is the tombstoned outbox entry written with it; 0 when there
	// was no version to tell consumers about.
	OutboxSeq uint64    `json:"outboxSeq,omitempty"`
	At        time.Time `json:"at"`
}

// corroborate records that a clean two-pass scan did not list the URI, and
// returns the read that may confirm its deletion (ok: send it; not ok: a
// read of the URI is in flight and the queue issues it when that one ends).
//
// For a TOMBSTONE_PENDING subscription, a scan that began at or after its
// newest fenced not-found starts a corroboration (ErrEvidenceTooOld for an
// older one); the reconcile read it asks for, issued after the scan ended,
// confirms the tombstone with corroborated evidence if it says not found
// again. For an open subscription the scan asks for a reconcile read, whose
// not-found takes the fenced path. Other states are left alone.
//
// corroborate does not check the scan: Catalog.Reconcile (under a
// DeletionPolicy that allows it) hands it only the passes of a fresh
// SNAPSHOT_UNPROVEN catalog of the current session.
func (e *Engine) corroborate(rawURI string, scan ledger.UnlistedScan) (ledger.Ticket, bool, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return ledger.Ticket{}, false, err
	}
	read := false
	_, _, err = e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		read = false
		switch {
		case cur == nil || cur.Sub == nil:
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		case cur.Sub.SessionGeneration != e.sessionGeneration():
			return nil, nil, &TransitionError{URI: key, From: cur.State, Event: "corroborate (session ended)"}
		case cur.State.Open():
			read = true
			return nil, nil, nil
		case cur.State != ledger.StateTombstonePending:
			return nil, nil, nil
		case scan.StartedAt.Before(cur.NotFoundAt):
			return nil, nil, fmt.Errorf("%w: %s was not found at %s, the scan began at %s",
				ErrEvidenceTooOld, key, cur.NotFoundAt.Format(time.RFC3339Nano), scan.StartedAt.Format(time.RFC3339Nano))
		}
		next := clone(cur)
		next.Corroboration = &ledger.Corroboration{
			SubscriptionGeneration: cur.Sub.Generation, FirstRead: cur.NotFoundOrdinal,
			Scans: slices.Clone(scan.Scans), ScanStartedAt: scan.StartedAt, ScanEndedAt: scan.EndedAt,
			After: cur.LastIssued,
		}
		read = true
		return next, nil, nil
	})
	if err != nil || !read {
		return ledger.Ticket{}, false, err
	}
	return e.enqueue(key, ledger.TriggerReconcile)
}

// corroboratedBy returns the evidence with which not-found read t finishes
// cur's corroboration: a read of the corroborated generation, issued after
// the scan ended, with no newer read of the URI still in flight (whose
// answer would be newer than this one).
func corroboratedBy(cur *ledger.Record, t ledger.Ticket) (ledger.DeletionEvidence, bool) {
	c := cur.Corroboration
	if c == nil || c.SubscriptionGeneration != t.SubscriptionGeneration || t.ReadOrdinal <= c.After || t.IssuedAt.Before(c.ScanEndedAt) {
		return ledger.DeletionEvidence{}, false
	}
	for _, held := range cur.Tickets {
		if held.ReadOrdinal > t.ReadOrdinal {
			return ledger.DeletionEvidence{}, false
		}
	}
	return ledger.DeletionEvidence{
		Kind: ledger.EvidenceCorroborated, Scans: slices.Clone(c.Scans), Reads: []uint64{c.FirstRead, t.ReadOrdinal},
	}, true
}

// keepsCorroboration reports whether a not-found that does not finish cur's
// corroboration may leave it standing: one of a read issued before the scan
// was recorded says nothing the scan did not already know (the fence keeps
// it only while the second read is still out).
func keepsCorroboration(cur *ledger.Record, t ledger.Ticket) bool {
	c := cur.Corroboration
	return c != nil && c.SubscriptionGeneration == t.SubscriptionGeneration && t.ReadOrdinal <= c.After
}

// unlistedEvidence is the deletion evidence u gives.
func unlistedEvidence(u *ledger.Unlisting) ledger.DeletionEvidence {
	return ledger.DeletionEvidence{Kind: ledger.EvidenceUnlisted, Scans: append(slices.Clone(u.First.Scans), u.Last.Scans...)}
}

// unlistedStands reports whether r's deletion was confirmed by its absence
// from the listing, which no read can undo.
func unlistedStands(r *ledger.Record) bool { return r.Unlisted != nil && r.Unlisted.Tombstoned }

// unlistedScan returns the passes of a fresh clean catalog (SNAPSHOT_PROVEN,
// or SNAPSHOT_UNPROVEN from two passes) as a scan that did not list what it
// lacks, and whether policy counts such absences at now.
func (c Catalog) unlistedScan(now time.Time, policy DeletionPolicy) (ledger.UnlistedScan, bool) {
	n := len(c.Scans)
	passes := 2
	switch {
	case policy != DeletionUnlisted || !now.Before(c.StaleAfter):
		return ledger.UnlistedScan{}, false
	case c.Status == CatalogSnapshotProven:
		passes = 1
	case c.Status != CatalogSnapshotUnproven:
		return ledger.UnlistedScan{}, false
	}
	if n < passes {
		return ledger.UnlistedScan{}, false
	}
	s := ledger.UnlistedScan{StartedAt: c.Scans[n-passes].StartedAt, EndedAt: c.Scans[n-1].EndedAt}
	for _, r := range c.Scans[n-passes:] {
		s.Scans = append(s.Scans, r.ID)
	}
	return s, true
}

// unlisted records that clean scan s did not list key, which the current
// session holds open or pending deletion, and confirms its deletion once
// the absence spans span (tombstoneUnlisted); it returns the tombstone's
// receipt then. A scan that began before the newest one counted is
// ignored.
func (e *Engine) unlisted(key string, s ledger.UnlistedScan, span time.Duration) (*TombstoneReceipt, error) {
	var rc *TombstoneReceipt
	var path transitions
	_, seq, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		rc = nil
		path.reset(cur)
		switch {
		case cur == nil || cur.Sub == nil:
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		case cur.Sub.SessionGeneration != e.sessionGeneration() || cur.CloseEpoch != 0,
			!cur.State.Open() && cur.State != ledger.StateTombstonePending && cur.State != ledger.StateReconciliationRequired,
			cur.Unlisted != nil && !s.StartedAt.After(cur.Unlisted.Last.StartedAt):
			return nil, nil, nil
		}
		next := clone(cur)
		u := &ledger.Unlisting{First: s, Last: s}
		if cur.Unlisted != nil {
			u.First = cur.Unlisted.First
		}
		next.Unlisted = u
		if u.Span() < span {
			return next, nil, nil
		}
		entries, r, err := e.tombstoneUnlisted(key, cur, next, &path)
		if err != nil {
			return nil, nil, err
		}
		rc = &r
		return next, entries, nil
	})
	if err != nil {
		return nil, err
	}
	e.emit(key, &path)
	if rc != nil {
		rc.OutboxSeq = seq
	}
	return rc, nil
}

// relisted ends the absence of key from the listing: a scan listed it.
func (e *Engine) relisted(key string) error {
	_, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if cur == nil || cur.Unlisted == nil {
			return nil, nil, nil
		}
		next := clone(cur)
		next.Unlisted = nil
		return next, nil, nil
	})
	return err
}

// countsUnlisted reports whether a clean listing that began at start may
// count absences: no listing newer than it was reconciled, and none
// failed since it began. A listing reconciled late (after a newer one, or
// after a failure) could otherwise start or extend an absence across a
// listing that named the URI, or one that failed.
func (e *Engine) countsUnlisted(start time.Time) bool {
	e.listedMu.Lock()
	defer e.listedMu.Unlock()
	if start.Before(e.listedSince) {
		return false
	}
	e.listedSince = start
	return true
}

// scanFailed ends every absence from the listing still counting: a scan
// failed, and a server whose listing fails deletes nothing. Confirmed
// deletions stand, and no listing that began before now counts an
// absence any more.
func (e *Engine) scanFailed() error {
	e.listedMu.Lock()
	e.listedSince = e.now()
	e.listedMu.Unlock()
	var keys []string
	for sub, err := range e.Subscriptions() {
		if err != nil {
			return err
		}
		if sub.Unlisted != nil && !sub.Unlisted.Tombstoned {
			keys = append(keys, sub.URI)
		}
	}
	var errs []error
	for _, key := range keys {
		_, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
			if cur == nil || cur.Unlisted == nil || cur.Unlisted.Tombstoned {
				return nil, nil, nil
			}
			next := clone(cur)
			next.Unlisted = nil
			return next, nil, nil
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
func (e *Engine) confirmTombstone(key string, since time.Time, ev ledger.DeletionEvidence, path *transitions) (TombstoneReceipt, error) {
	var rc TombstoneReceipt
	_, seq, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if since.Before(cur.NotFoundAt) {
			return nil, nil, fmt.Errorf("%w: %s was not found at %s, the evidence dates from %s",
				ErrEvidenceTooOld, key, cur.NotFoundAt.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
		}
		next := clone(cur)
		if err := path.move(next, evAbsent); err != nil {
			return nil, nil, err
		}
		var entries []OutboxEntry
		entries, rc = e.tombstone(key, cur, next, ev, e.now())
		return next, entries, nil
	})
	if err != nil {
		return TombstoneReceipt{}, err
	}
	rc.OutboxSeq = seq
	return rc, nil
}
