package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpsync/mcpsync/ledger"
)

// Discovery that keeps going.
//
// Many servers never send list_changed, and deletions are only confirmed by
// scans (deletion.go), so a client that scans once, or only when told,
// keeps deleted resources pending for ever and never sees new ones. A kept
// scan lists the server's resources again every KeepScanOptions.Every (by
// default at each catalog's NextReviewAt, ScannerOptions.ReviewAfter after
// it was measured) and whenever a list_changed arrives, reconciles every
// catalog under the client's DeletionPolicy, and, when asked, subscribes
// what appeared.

// KeepScanOptions configure Client.KeepScanning. The zero value (or nil)
// means defaults.
//
// For a server that cannot subscribe (or never sends list_changed), two
// intervals bound how late the copy learns of a change, and they bound
// different things: Every bounds how late a resource created or deleted on
// the server is found (a new URI subscribed, a deletion confirmed), since
// only a listing shows them; ClientOptions.PollEvery bounds how late a
// change of content is seen, since only a read shows it. Scanning more
// often does not show new content sooner, and polling more often finds no
// new resources.
type KeepScanOptions struct {
	// Subscribe subscribes every resource a scan lists that the client does
	// not watch yet.
	Subscribe bool
	// After delays the first scan until then, for a caller that has just
	// scanned (the NextReviewAt of its catalog); zero means now.
	After time.Time
	// Every is the interval between scans: a resource created or deleted on
	// a server that does not announce it is found within about Every (a
	// deletion that needs corroboration takes a second scan, begun at once
	// when a read says not found). 0 means each catalog's NextReviewAt
	// (ScannerOptions.ReviewAfter, by default half of its 5-minute
	// StaleAfter); it must not be negative. A failed scan is retried after
	// the scanner's BackoffMax, or after Every if that is sooner.
	Every time.Duration
	// OnScan, if set, is told of every scan once it is reconciled, on the
	// scanning goroutine: the next scan waits for it. It may call any
	// method of the Client but Close.
	OnScan func(ScanReport)
}

// ScanReport is what one kept scan found and did.
type ScanReport struct {
	Catalog        Catalog
	Reconciliation Reconciliation
	// Subscribed are the subscriptions opened for resources the scan
	// listed and the client did not watch (KeepScanOptions.Subscribe).
	Subscribed []Subscription
	// Err is why the scan, its reconciliation or a subscribe failed.
	Err error
}

// rescanGap is the least time between the end of a scan and a scan that a
// list_changed asks for, or a not-found that came while the scan listed: a
// server that keeps announcing changes, or keeps answering not found while
// it is listed, is listed about once a second, not continuously.
const rescanGap = time.Second

// KeepScanning starts a kept scan of the server's resources on the client's
// goroutines: one scan now (or at After), then one every Every (by default
// at each catalog's NextReviewAt) and one soon after every list_changed.
// Each catalog is reconciled (Reconcile), which reads open subscriptions
// the listing lost and confirms or corroborates the deletions of pending
// ones. A scan that lost an open subscription whose read then says not
// found is followed by another at once, and one whose listing a not-found
// overtook (Reconciliation.TooOld) by another a second later, so that a
// deletion the server's reads confirm is confirmed about a second after the
// first scan that misses it, not a review interval later. Failures go to
// OnError (as well as OnScan); a scan while the session is lost is skipped.
//
// It returns ErrNoResources for a server that declares no resources, and
// ErrClientClosed once the client is closed. stop ends the kept scan;
// Close ends it too. Calling KeepScanning again replaces the kept scan
// running.
func (c *Client) KeepScanning(opts *KeepScanOptions) (stop func(), err error) {
	var o KeepScanOptions
	if opts != nil {
		o = *opts
	}
	if o.Every < 0 {
		return nil, fmt.Errorf("mcpsync: KeepScanOptions.Every %v is negative", o.Every)
	}
	conn, err := c.current()
	if err != nil {
		return nil, err
	}
	if !conn.caps.Resources {
		return nil, fmt.Errorf("%w (%s %s)", ErrNoResources, conn.caps.Server.Name, conn.caps.Server.Version)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	// Done at the first listing that succeeded, or with the kept scan; at
	// once when the first scan is put off (After): the caller has listed.
	listed, wasListed := context.WithCancel(ctx)
	if o.After.After(time.Now()) {
		wasListed()
	}
	c.mu.Lock()
	if c.keepStop != nil {
		c.keepStop()
	}
	c.keepStop, c.keepListed = cancel, listed
	c.mu.Unlock()
	if !c.goAsync(func() { c.keepScanning(ctx, o, wasListed) }) {
		cancel()
		return nil, ErrClientClosed
	}
	return cancel, nil
}

// keepScanning is the loop of a kept scan; it returns when ctx ends. It
// calls listed once a listing succeeded and its subscriptions were opened.
func (c *Client) keepScanning(ctx context.Context, o KeepScanOptions, listed func()) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := o.After
	var ended time.Time
	seen := c.ListChanged(KindResources)
	for {
		wake := c.listChanges.wait()
		if c.ListChanged(KindResources) != seen {
			next = minTime(next, ended.Add(rescanGap))
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-wake:
			continue
		case <-timer.C:
		}
		seen = c.ListChanged(KindResources)
		rep, due := c.keptScan(ctx, o)
		if st := rep.Catalog.Status; st != "" && st != CatalogUnreconciled {
			listed()
		}
		ended = time.Now()
		next = due
		if ctx.Err() != nil {
			return
		}
		if rep.Err != nil && !errors.Is(rep.Err, ErrClientClosed) {
			c.report(errorf("kept scan: %w", rep.Err))
		}
		if o.OnScan != nil {
			o.OnScan(rep)
		}
	}
}

// keptScan runs one scan of a kept scan and returns its report and when
// the next scan is due.
func (c *Client) keptScan(ctx context.Context, o KeepScanOptions) (ScanReport, time.Time) {
	interval := c.scanner.opts.ReviewAfter
	if o.Every > 0 {
		interval = o.Every
	}
	review := time.Now().Add(interval)
	if c.Health().State != ConnectionUp {
		// Healing is under way and says so; the next session is scanned.
		return ScanReport{}, time.Now().Add(c.scanner.opts.BackoffMax)
	}
	var rep ScanReport
	rep.Catalog, rep.Err = c.Scan(ctx, KindResources)
	if rep.Err != nil {
		// A failed catalog's NextReviewAt is the scanner's retry.
		if next := rep.Catalog.NextReviewAt; !next.IsZero() && (o.Every == 0 || next.Before(review)) {
			review = next
		}
		return rep, review
	}
	review = rep.Catalog.NextReviewAt
	if o.Every > 0 {
		review = rep.Catalog.MeasuredAt.Add(o.Every)
	}
	var errs []error
	var err error
	if rep.Reconciliation, err = c.Reconcile(rep.Catalog); err != nil {
		errs = append(errs, err)
	}
	if o.Subscribe {
		var fresh []string
		for d := range rep.Catalog.Items() {
			if !c.watched(d.URI) {
				fresh = append(fresh, d.URI)
			}
		}
		// All at once: from 2026-07-28 on, one listen stream carries them.
		subs, subErrs := c.subscribeAll(ctx, fresh)
		for i, err := range subErrs {
			switch {
			case err == nil || errors.Is(err, ErrNotFound):
				// Listed, then gone before its first read: it is
				// subscribed, pending, and the next scans settle it.
				rep.Subscribed = append(rep.Subscribed, subs[i])
			case ctx.Err() == nil:
				errs = append(errs, fmt.Errorf("subscribe %s: %w", fresh[i], err))
			}
		}
	}
	rep.Err = errors.Join(errs...)
	if c.lostMissing(ctx, rep.Reconciliation.Missing) {
		return rep, time.Now() // the scan that may corroborate, now
	}
	if len(rep.Reconciliation.TooOld) > 0 {
		// A not-found came while the scan listed, so its listing is older
		// than the not-found and confirms nothing: a scan begun after it
		// may, and the review may be far.
		return rep, minTime(review, time.Now().Add(rescanGap))
	}
	return rep, review
}

// watched reports whether the caller watches uri.
func (c *Client) watched(uri string) bool {
	key, err := normalizeKey(uri)
	if err != nil {
		return true // nothing a Subscribe could open
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.watches[key]
	return ok
}

// lostMissing waits, at most RequestTimeout, for the reconcile reads of the
// open subscriptions a scan no longer listed, and reports whether any of
// them said not found: then a scan begun now may corroborate the deletion.
// A URI that is only unlisted (a resource of a template, say) reads as
// present and asks for nothing more.
func (c *Client) lostMissing(ctx context.Context, keys []string) bool {
	if len(keys) == 0 {
		return false
	}
	timer := time.NewTimer(c.opts.RequestTimeout + max(c.opts.CoalesceWindow, 0))
	defer timer.Stop()
	for {
		wake := c.progress.wait()
		pending, lost := false, false
		for _, key := range keys {
			sub, err := c.engine.Subscription(key)
			switch {
			case err != nil:
			case sub.State == ledger.StateTombstonePending:
				lost = true
			case sub.State == ledger.StateReadPending || sub.State == ledger.StateUpdateSeen:
				pending = true
			}
		}
		if !pending {
			return lost
		}
		select {
		case <-wake:
		case <-timer.C:
			return lost
		case <-ctx.Done():
			return false
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
