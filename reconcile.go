package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpsync/mcpsync/ledger"
)

// ReconcileOptions tunes one Catalog.Reconcile; nil means the defaults.
type ReconcileOptions struct {
	// Deletion is the deletion policy; DeletionDefault (the zero value)
	// corroborates deletions where the catalog's session cannot prove them.
	Deletion DeletionPolicy
	// UnlistedFor is how long clean scans must have missed a URI before
	// DeletionUnlisted confirms its deletion; 0 means two of the catalog's
	// review intervals (ScannerOptions.ReviewAfter).
	UnlistedFor time.Duration
}

// Reconcile hands the catalog's verdicts to the engine for every URI in
// TOMBSTONE_PENDING or RECONCILIATION_REQUIRED (Engine.ApplyListing), for
// every open subscription, and for every URI whose deletion is being
// corroborated, and returns the reads to send.
//
// A "present" verdict may come from an unproven catalog: it only returns the
// URI to ACTIVE with a read (or ends a corroboration), and that read goes
// through the fence, so a resource that is really gone comes back to
// TOMBSTONE_PENDING. An "absent" verdict confirms a tombstone and sends
// deletions downstream; it is a claim that the enumeration is complete,
// which only a proven, fresh catalog can make (the same rule as Complete).
// A fresh SNAPSHOT_UNPROVEN catalog that does not list a TOMBSTONE_PENDING
// URI starts a corroboration instead, where the deletion policy allows
// (deletion.go): the second read it sends confirms the deletion if
// it says not found again. Otherwise absent URIs are Deferred, and also
// TooOld when their newest not-found came after the scan began (a scan
// begun later can decide them). An open
// subscription the catalog does not list is read again (Missing), and so is
// a TOMBSTONED one that it lists (created again). Any
// catalog of another session generation or of another engine, and an
// unreconciled one, is refused with a *CatalogError.
//
// Under DeletionUnlisted a fresh clean catalog (proven or unproven) also
// counts the absence of every open or pending URI it does not list, and
// confirms the deletion of one missing for UnlistedFor (deletion.go); a URI
// it lists ends its absence, and an UNRECONCILED catalog (a scan that
// failed) ends every absence still counting, under any policy.
func (c Catalog) Reconcile(e *Engine, opts *ReconcileOptions) (Reconciliation, error) {
	var out Reconciliation
	var o ReconcileOptions
	if opts != nil {
		o = *opts
	}
	policy := o.Deletion
	if c.Kind != KindResources {
		return out, fmt.Errorf("mcpsync: a %s catalog cannot reconcile resources", c.Kind)
	}
	if !policy.valid() {
		return out, fmt.Errorf("mcpsync: unknown deletion policy %q", policy)
	}
	if o.UnlistedFor < 0 {
		return out, fmt.Errorf("mcpsync: negative UnlistedFor %v", o.UnlistedFor)
	}
	if o.UnlistedFor == 0 {
		o.UnlistedFor = 2 * c.NextReviewAt.Sub(c.MeasuredAt)
	}
	gen := e.SessionGeneration()
	if err := c.refusal(e.now(), gen, e.id, false); err != nil {
		if c.Status != CatalogUnreconciled {
			return out, err
		}
		if ferr := e.scanFailed(); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return out, err
	}
	canProveAbsence := c.refusal(e.now(), gen, e.id, true) == nil
	scan, canCorroborate := c.absenceScan(e.now(), policy)
	absent, countsAbsence := c.unlistedScan(e.now(), policy)
	countsAbsence = countsAbsence && e.countsUnlisted(absent.StartedAt)
	// Collect first: the verdicts write to the ledger being ranged over.
	type verdict struct {
		key      string
		state    ledger.SubscriptionState
		unlisted bool // its absence from the listing is counted
	}
	var pending []verdict
	for sub, err := range e.Subscriptions() {
		if err != nil {
			return out, err
		}
		switch {
		case sub.State == ledger.StateTombstonePending || sub.State == ledger.StateReconciliationRequired,
			(sub.State.Open() || sub.State == ledger.StateTombstoned) && sub.SessionGeneration == gen && sub.CloseEpoch == 0,
			sub.Corroboration != nil, sub.Unlisted != nil:
			pending = append(pending, verdict{sub.URI, sub.State, sub.Unlisted != nil})
		}
	}
	var errs []error
	for _, v := range pending {
		key := v.key
		present := c.lists(key)
		var tk ledger.Ticket
		var ok bool
		var rc *TombstoneReceipt
		var err error
		switch {
		case present && v.unlisted:
			err = e.relisted(key)
		case !present && countsAbsence && (v.state.Open() || v.state == ledger.StateTombstonePending || v.state == ledger.StateReconciliationRequired):
			rc, err = e.unlisted(key, absent, o.UnlistedFor)
			if rc != nil {
				out.Tombstoned = append(out.Tombstoned, key)
				out.Receipts = append(out.Receipts, *rc)
				continue
			}
			if err == nil {
				out.Unlisted = append(out.Unlisted, key)
			}
		}
		if err != nil {
			if !isTransitionError(err) && !errors.Is(err, ErrUnknownURI) {
				errs = append(errs, err)
			}
			continue
		}
		switch {
		case v.state == ledger.StateTombstoned && !present:
			continue // still gone
		case present || canProveAbsence:
			ev := ledger.DeletionEvidence{Kind: ledger.EvidenceProven, SnapshotID: c.SnapshotID}
			if n := len(c.Scans); n > 0 {
				ev.Scans = []string{c.Scans[n-1].ID}
			}
			tk, ok, rc, err = e.reconcile(key, present, c.MeasuredAt, ev)
		case v.state.Open():
			tk, ok, err = e.enqueue(key, ledger.TriggerReconcile)
		case canCorroborate && v.state == ledger.StateTombstonePending:
			tk, ok, err = e.corroborate(key, scan)
		default:
			out.Deferred = append(out.Deferred, key)
			continue
		}
		switch {
		case errors.Is(err, ErrEvidenceTooOld):
			// Measured before the not-found: the next scan decides.
			out.Deferred = append(out.Deferred, key)
			out.TooOld = append(out.TooOld, key)
			continue
		case isTransitionError(err) || errors.Is(err, ErrUnknownURI):
			continue // it moved on meanwhile (closed, another session)
		case err != nil:
			errs = append(errs, err)
			continue
		case present:
			if v.state == ledger.StateTombstonePending || v.state == ledger.StateReconciliationRequired || v.state == ledger.StateTombstoned {
				out.Present = append(out.Present, key)
			}
		case rc != nil:
			out.Tombstoned = append(out.Tombstoned, key)
			out.Receipts = append(out.Receipts, *rc)
		case v.state.Open():
			out.Missing = append(out.Missing, key)
		case v.state == ledger.StateTombstonePending && !canProveAbsence:
			out.Corroborating = append(out.Corroborating, key)
		}
		if ok {
			out.Tickets = append(out.Tickets, tk)
		}
	}
	return out, errors.Join(errs...)
}

// absenceScan returns the passes of an unproven catalog as the evidence of
// a corroboration, and whether policy lets the catalog corroborate at now:
// it must be SNAPSHOT_UNPROVEN (two identical clean passes, the last two
// receipts) and fresh.
func (c Catalog) absenceScan(now time.Time, policy DeletionPolicy) (ledger.UnlistedScan, bool) {
	n := len(c.Scans)
	if c.Status != CatalogSnapshotUnproven || n < 2 || !now.Before(c.StaleAfter) {
		return ledger.UnlistedScan{}, false
	}
	a, b := c.Scans[n-2], c.Scans[n-1]
	if !policy.corroborates(b.SnapshotNegotiated) {
		return ledger.UnlistedScan{}, false
	}
	return ledger.UnlistedScan{Scans: []string{a.ID, b.ID}, StartedAt: a.StartedAt, EndedAt: b.EndedAt}, true
}

// reconcile is Reconcile of a key, with the evidence an absent verdict
// confirms a tombstone on; it also returns the tombstone's receipt.
func (e *Engine) reconcile(key string, present bool, since time.Time, ev ledger.DeletionEvidence) (ledger.Ticket, bool, *TombstoneReceipt, error) {
	r, err := e.ledger.Load(context.Background(), key)
	if err != nil {
		return ledger.Ticket{}, false, nil, errorf("load %s: %w", key, err)
	}
	if r == nil || r.Sub == nil {
		return ledger.Ticket{}, false, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
	}
	var path transitions
	switch {
	case r.State == ledger.StateTombstonePending || r.State == ledger.StateReconciliationRequired:
		if !present {
			rc, err := e.confirmTombstone(key, since, ev, &path)
			if err != nil {
				return ledger.Ticket{}, false, nil, err
			}
			e.emit(key, &path)
			return ledger.Ticket{}, false, &rc, nil
		}
		// Reads issued before the not-found may still be in flight; their
		// answers are reads of this generation like any other.
		if _, err := e.step(key, evPresent, nil, func(next *ledger.Record, path *transitions) error {
			next.Corroboration = nil
			if len(next.Tickets) > 0 {
				return path.move(next, evReadsInFlight)
			}
			return nil
		}); err != nil {
			return ledger.Ticket{}, false, nil, err
		}
		t, ok, err := e.enqueue(key, ledger.TriggerReconcile)
		return t, ok, nil, err
	case r.State.Open() && !present:
		t, ok, err := e.enqueue(key, ledger.TriggerReconcile)
		return t, ok, nil, err
	case r.State == ledger.StateTombstoned && present && r.Sub.SessionGeneration == e.sessionGeneration():
		// Listed again: created since its deletion was confirmed, and a
		// read brings it back sooner than the next revalidation.
		t, ok, err := e.enqueue(key, ledger.TriggerReconcile)
		return t, ok, nil, err
	case present && r.Corroboration != nil:
		// Listed again while the second read is out: that read can no
		// longer finish the corroboration.
		_, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
			if cur == nil || cur.Corroboration == nil {
				return nil, nil, nil
			}
			next := clone(cur)
			next.Corroboration = nil
			return next, nil, nil
		})
		return ledger.Ticket{}, false, nil, err
	}
	return ledger.Ticket{}, false, nil, nil
}
