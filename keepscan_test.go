package mcpsync_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// keptReview is the review interval of the kept scans below: a scan every
// ten seconds of fake time.
const keptReview = 10 * time.Second

// keptRig is a rig over an mcpsynctest server without the snapshot
// extension, as every third-party server is, that sends no list_changed and
// holds uris (each with text "v1 of" it) and nothing else; scans are the
// reports of the scans keep kept.
type keptRig struct {
	*rig
	mu    sync.Mutex // protects scans
	scans []mcpsync.ScanReport
}

func newKeptRig(t *testing.T, w wiring, uris ...string) *keptRig {
	t.Helper()
	return newHandledKeptRig(t, w, nil, uris...)
}

// newHandledKeptRig is newKeptRig with handler h (nil: none) on the
// client.
func newHandledKeptRig(t *testing.T, w wiring, h mcpsync.ResourceHandler, uris ...string) *keptRig {
	t.Helper()
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{SuppressListChanged: true})
	for _, u := range uris {
		srv.Set(u, "text/plain", "v1 of "+u)
	}
	r := &keptRig{rig: buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{
		RequestTimeout: time.Second, Handler: h,
		Scanner: &mcpsync.ScannerOptions{ReviewAfter: keptReview, StaleAfter: 2 * keptReview, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond},
	}})}
	require.False(t, r.c.Capabilities().SnapshotList)
	return r
}

// newKeptRigWatching is newKeptRig with watched subscribed and the scan
// kept, without subscribing what it finds.
func newKeptRigWatching(t *testing.T, w wiring, watched string, others ...string) *keptRig {
	t.Helper()
	r := newKeptRig(t, w, append([]string{watched}, others...)...)
	r.watch(watched)
	r.keep(t, false)
	return r
}

// recreateUnnotified has uri, deleted, created again with text "v2",
// without a notification of it reaching the client.
func (r *keptRig) recreateUnnotified(uri string) {
	r.faults().DropNext(uri, 1)
	r.srv.Recreate(uri, "v2")
}

func (r *keptRig) keep(t *testing.T, subscribe bool) {
	t.Helper()
	_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: subscribe, OnScan: func(rep mcpsync.ScanReport) {
		r.mu.Lock()
		r.scans = append(r.scans, rep)
		r.mu.Unlock()
	}})
	require.NoError(t, err)
	quiesce()
}

// requireFoundAfter has uri appear on the server, lets d pass, and checks
// that a kept scan subscribed it by then (why says which), serving its
// text.
func (r *keptRig) requireFoundAfter(t *testing.T, uri string, d time.Duration, why string) {
	t.Helper()
	r.srv.Set(uri, "text/plain", "new")
	time.Sleep(d)
	quiesce()
	entry, err := r.c.Lookup(uri)
	require.NoError(t, err, why)
	assert.Equal(t, "new", entry.Contents[0].Text)
}

// tombstones returns the tombstoned outbox entries of uri.
func (r *keptRig) tombstones(t *testing.T, uri string) []mcpsync.OutboxEntry {
	t.Helper()
	entries, err := r.c.Engine().PullOutbox(0, 0)
	require.NoError(t, err)
	return slices.DeleteFunc(entries, func(en mcpsync.OutboxEntry) bool {
		return en.URI != uri || en.Reason != ledger.InvalidateTombstoned
	})
}

// waitTombstone lets fake time run, a second at a time, up to limit, until
// uri's deletion is confirmed, and returns how long that took.
func (r *keptRig) waitTombstone(t *testing.T, uri string, limit time.Duration) (time.Duration, mcpsync.OutboxEntry) {
	t.Helper()
	start := time.Now()
	for time.Since(start) <= limit {
		if ts := r.tombstones(t, uri); len(ts) > 0 {
			require.Len(t, ts, 1)
			return time.Since(start), ts[0]
		}
		time.Sleep(time.Second)
		quiesce()
	}
	sub, _ := r.c.Engine().Subscription(uri)
	require.FailNow(t, "no tombstone", "%s after %v: %s", uri, limit, sub.State)
	return 0, mcpsync.OutboxEntry{}
}

// A resource deleted on a server that can prove nothing is tombstoned by
// the kept scan within two scan intervals, whether or not its deletion was
// notified, and its outbox entry names corroborated evidence.
func TestKeptScanTombstonesDeletionsWithinTwoIntervals(t *testing.T) {
	const gone, kept = "file:///docs/gone.md", "file:///docs/kept.md"
	eachEraAnd(t, []bool{true, false}, named("not notified", "notified"), func(t *testing.T, w wiring, notified bool) {
		r := newKeptRig(t, w, gone, kept)
		r.watch(gone, kept)
		r.keep(t, false)
		time.Sleep(keptReview / 3) // mid-interval
		if !notified {
			r.faults().DropNext(gone, 1)
		}
		r.srv.Delete(gone)
		took, entry := r.waitTombstone(t, gone, 2*keptReview)
		assert.LessOrEqual(t, took, 2*keptReview)
		require.NotNil(t, entry.Evidence)
		assert.Equal(t, ledger.EvidenceCorroborated, entry.Evidence.Kind)
		assert.Len(t, entry.Evidence.Scans, 2)
		require.Len(t, entry.Evidence.Reads, 2)
		assert.Less(t, entry.Evidence.Reads[0], entry.Evidence.Reads[1])
		_, err := r.c.Lookup(gone)
		require.ErrorIs(t, err, mcpsync.ErrTombstoned)
		assert.Empty(t, r.tombstones(t, kept))
		_, err = r.c.Lookup(kept)
		require.NoError(t, err)

		// Still watched: created again, it comes back.
		r.srv.Set(gone, "text/plain", "v2")
		quiesce()
		entryBack, err := r.c.Lookup(gone)
		require.NoError(t, err)
		assert.Equal(t, "v2", entryBack.Contents[0].Text)
	})
}

// A resource deleted and created again between any two steps of a
// corroboration is never tombstoned: between the not-found and the scan,
// between the scan's two passes, and between the scan and the second read.
// Each recreation is left unnotified, so only the evidence can tell.
func TestKeptScanNeverTombstonesARecreatedResource(t *testing.T) {
	const doc = "file:///docs/doc.md"
	eachEraAnd(t, []string{"not-found and scan", "the two passes", "scan and second read"}, nil, func(t *testing.T, w wiring, between string) {
		r := newKeptRigWatching(t, w, doc, "file:///docs/other.md")
		recreate := func() { r.recreateUnnotified(doc) }
		r.srv.Delete(doc) // notified: the first not-found
		quiesce()
		sub, err := r.c.Engine().Subscription(doc)
		require.NoError(t, err)
		require.Equal(t, ledger.StateTombstonePending, sub.State)
		switch between {
		case "not-found and scan":
			recreate()
		case "the two passes":
			// The listing fits one page: the hook runs once a
			// pass has its page, so the first call ends pass A.
			var once sync.Once
			r.srv.OnPage(func(kind string, _ int) {
				if kind == mcpsynctest.KindResources {
					once.Do(recreate)
				}
			})
		case "scan and second read":
			h := r.faults().HoldNextRequest(string(mcp.MethodResourcesRead), doc)
			time.Sleep(keptReview)
			quiesce()
			<-h.Arrived()
			recreate()
			h.Release()
		}
		for range 3 * int(keptReview/time.Second) {
			time.Sleep(time.Second)
			quiesce()
		}
		assert.Empty(t, r.tombstones(t, doc), "tombstoned while the server has it")
		entry, err := r.c.Lookup(doc)
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text)
	})
}

// A corroboration's second read answered while the resource was deleted,
// its answer late, after the resource was created again unnotified: the
// tombstone it confirms was true when the server gave the answer, and the
// next kept scan, which lists the resource, brings it back; Lookup serves
// the new text and the outbox says so after the tombstone.
func TestKeptScanBringsBackAResourceTombstonedByALateNotFound(t *testing.T) {
	const doc = "file:///docs/doc.md"
	eachEra(t, func(t *testing.T, w wiring) {
		r := newKeptRigWatching(t, w, doc, "file:///docs/other.md")
		r.srv.Delete(doc) // notified: the first not-found
		quiesce()
		late := r.faults().HoldNext(string(mcp.MethodResourcesRead), doc)
		time.Sleep(keptReview)
		quiesce()
		<-late.Arrived() // the second read, answered not found
		r.recreateUnnotified(doc)
		late.Release()
		<-late.Passed()
		quiesce()
		require.Len(t, r.tombstones(t, doc), 1, "the late not-found confirms the deletion it saw")
		time.Sleep(keptReview)
		quiesce()
		entry, err := r.c.Lookup(doc)
		require.NoError(t, err, "listed by the next scan, read again")
		assert.Equal(t, "v2", entry.Contents[0].Text)
		entries, err := r.c.Engine().PullOutbox(r.tombstones(t, doc)[0].Seq, 0)
		require.NoError(t, err)
		require.NotEmpty(t, entries, "consumers hear that it is back")
		assert.Equal(t, ledger.InvalidateUpdated, entries[len(entries)-1].Reason)
	})
}

// With Subscribe, a kept scan subscribes what appeared on the server since
// the last one, without a list_changed.
func TestKeptScanSubscribesWhatAppeared(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const first, later = "file:///docs/first.md", "file:///docs/later.md"
		r := newKeptRig(t, w, first)
		r.keep(t, true)
		_, err := r.c.Lookup(first)
		require.NoError(t, err, "subscribed by the first scan")
		r.requireFoundAfter(t, later, keptReview, "subscribed by the next scan")
		r.mu.Lock()
		defer r.mu.Unlock()
		require.GreaterOrEqual(t, len(r.scans), 2)
		assert.Empty(t, r.errs.list())
		var subscribed []string
		for _, rep := range r.scans {
			for _, s := range rep.Subscribed {
				subscribed = append(subscribed, s.URI)
			}
		}
		assert.Equal(t, []string{first, later}, subscribed)
	})
}

// WaitForSync after KeepScanning waits for what the kept scan's first
// listing subscribed: once it returns, every listed resource has its first
// version, with no wait on OnScan. A listing that fails does not count (the
// failure is told to OnError), a kept scan stopped before it listed
// anything releases the wait, and one whose first scan the caller put off
// (After: it has just listed) is not waited for.
func TestWaitForSyncWaitsForTheFirstKeptScan(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		uris := []string{"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md"}
		r := newKeptRig(t, w, uris...)
		_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true})
		require.NoError(t, err)
		require.NoError(t, r.c.WaitForSync(t.Context()))
		for _, u := range uris {
			entry, err := r.c.Lookup(u)
			require.NoError(t, err, "%s read before WaitForSync returned", u)
			assert.Equal(t, "v1 of "+u, entry.Contents[0].Text)
		}
	})
	t.Run("stopped before its first listing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newKeptRig(t, eras[0], "file:///docs/a.md")
			stop, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true})
			require.NoError(t, err)
			stop()
			require.NoError(t, r.c.WaitForSync(t.Context()))
		})
	})
	t.Run("whose first scan is put off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newKeptRig(t, eras[0], "file:///docs/a.md")
			_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true, After: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, r.c.WaitForSync(t.Context()))
			assert.Less(t, time.Since(start), time.Minute, "the caller listed already: nothing to wait for")
		})
	})
	t.Run("a first listing that fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newKeptRig(t, eras[0], "file:///docs/a.md")
			r.faults().FailNext(string(mcp.MethodResourcesList), "", -32603, "listing is down")
			_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true})
			require.NoError(t, err)
			require.NoError(t, r.c.WaitForSync(t.Context()))
			_, err = r.c.Lookup("file:///docs/a.md")
			require.NoError(t, err, "read once a listing succeeded")
			r.mu.Lock()
			defer r.mu.Unlock()
			assert.NotEmpty(t, r.errs.list(), "the failed listing was told")
		})
	})
}

// A kept scan of a server that lists no resources is refused at once, and
// one stops at Close with the rest of the client (goleak checks).
func TestKeptScanRefusalsAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKeptRig(t, eras[0], "file:///docs/a.md")
		stop, err := r.c.KeepScanning(nil)
		require.NoError(t, err)
		quiesce()
		stop()
		stop()
		require.NoError(t, r.c.Close())
		_, err = r.c.KeepScanning(nil)
		require.ErrorIs(t, err, mcpsync.ErrClientClosed)
	})
}

// A Subscribe to a URI the server does not have says so: the error matches
// ErrNotFound and the subscription is TOMBSTONE_PENDING, not a silent "not
// synced yet". It stays watched, so the resource is read once it exists.
func TestSubscribeToAMissingResource(t *testing.T) {
	const missing = "file:///docs/missing.md"
	eachEra(t, func(t *testing.T, w wiring) {
		r := newKeptRig(t, w, "file:///docs/a.md")
		sub, err := r.c.Subscribe(t.Context(), missing)
		require.ErrorIs(t, err, mcpsync.ErrNotFound)
		assert.Equal(t, ledger.StateTombstonePending, sub.State)
		assert.Equal(t, uint64(1), sub.SubscriptionGeneration)

		sub, err = r.c.Subscribe(t.Context(), "file:///docs/a.md")
		require.NoError(t, err, "a resource the server has")
		assert.Positive(t, sub.Watermark, "its first read is in the subscription returned")

		r.srv.Set(missing, "text/plain", "here now")
		quiesce()
		entry, err := r.c.Lookup(missing)
		require.NoError(t, err)
		assert.Equal(t, "here now", entry.Contents[0].Text)
		assert.False(t, errors.Is(err, mcpsync.ErrNotFound))
	})
}

// A kept scan subscribes what it found all at once: from 2026-07-28 on,
// one listen stream carries every resource of the first scan, not one
// stream per resource (each naming all before it).
func TestKeptScanSubscribesACatalogOnOneStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := numbered("file:///docs/%03d.md", 100)
		r := newKeptRig(t, eras[1], uris...)
		r.keep(t, true)
		for _, u := range uris {
			_, err := r.c.Lookup(u)
			require.NoError(t, err, u)
		}
		assert.Equal(t, 1, r.srv.SubscribeCalls(), "listen streams opened for the first scan's resources")
		r.mu.Lock()
		defer r.mu.Unlock()
		assert.Empty(t, r.errs.list())
		require.NotEmpty(t, r.scans)
		assert.Len(t, r.scans[0].Subscribed, len(uris))
	})
}

// KeepScanOptions.Every is the one knob of how often a kept scan lists the
// server, whatever the scanner's review interval: a resource created on a
// server that never announces it is subscribed within Every, and the
// server is listed about once per Every, not more.
func TestKeptScanEveryBoundsHowLateANewResourceIsFound(t *testing.T) {
	const every = 2 * time.Second // keptReview, the catalogs' review, is 10 s
	eachEra(t, func(t *testing.T, w wiring) {
		const first, later = "file:///docs/first.md", "file:///docs/later.md"
		r := newKeptRig(t, w, first)
		_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true, Every: every, OnScan: func(rep mcpsync.ScanReport) {
			r.mu.Lock()
			r.scans = append(r.scans, rep)
			r.mu.Unlock()
		}})
		require.NoError(t, err)
		quiesce()
		r.requireFoundAfter(t, later, every, "subscribed by the scan one interval later")

		time.Sleep(5 * every)
		quiesce()
		r.mu.Lock()
		defer r.mu.Unlock()
		assert.Empty(t, r.errs.list())
		assert.InDelta(t, 7, len(r.scans), 1, "one scan now, then one per interval")
	})
}

// Every must not be negative.
func TestKeptScanRefusesANegativeInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKeptRig(t, eras[0], "file:///docs/a.md")
		stop, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Every: -time.Second})
		require.Error(t, err)
		assert.Nil(t, stop)
	})
}

// WaitForSync with a kept scan running says why it cannot return as it
// does without one: once healing gave up on the connection it returns
// ErrReconnectGaveUp, not the caller's deadline, though the kept scan never
// listed anything (it skips scans while the session is lost).
func TestWaitForSyncWithAKeptScanReturnsWhenHealingGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{
			PingEvery: time.Second, PingTimeout: time.Second,
			Reconnect: mcpsync.ReconnectPolicy{MaxAttempts: 2, Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond},
		})
		r.subscribe()
		r.loseSession()
		time.Sleep(5 * time.Second)
		quiesce()
		require.Equal(t, mcpsync.ConnectionFailed, r.c.Health().State, "errors %v", r.errs.list())
		_, err := r.c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true})
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		err = r.c.WaitForSync(ctx)
		require.ErrorIs(t, err, mcpsync.ErrReconnectGaveUp, "WaitForSync with a kept scan, healing given up")
	})
}

// A deleted resource is confirmed within a second or so of the kept scan
// that first misses it, whatever the order of that scan's listing and the
// read that says not found: a not-found before the listing is corroborated
// by it; one that comes while it lists (the first, or again for a URI
// already pending) leaves the listing too old to count, and the next scan,
// which is not one review interval later, counts; one whose answer comes
// after the scan's reconciliation is waited for, and the scan that may
// corroborate follows.
func TestKeptScanConfirmsADeletionWhateverOrderTheReadAndTheListingCome(t *testing.T) {
	const doc, other = "file:///docs/doc.md", "file:///docs/other.md"
	const soon = 2 * time.Second // keptReview, when the next scan is due, is 10 s
	eachEraAnd(t, []string{"not found before the listing", "not found while it lists", "not found again while it lists", "not found after the reconciliation"}, nil, func(t *testing.T, w wiring, order string) {
		r := newKeptRigWatching(t, w, doc, other)
		r.mu.Lock()
		first := r.scans[0].Catalog
		r.mu.Unlock()
		require.Equal(t, mcpsync.CatalogSnapshotUnproven, first.Status)
		scanAt := first.NextReviewAt
		pending := func() {
			t.Helper()
			sub, err := r.c.Engine().Subscription(doc)
			require.NoError(t, err)
			require.Equal(t, ledger.StateTombstonePending, sub.State)
		}
		switch order {
		case "not found before the listing":
			r.srv.Delete(doc)
			quiesce()
			pending()
			time.Sleep(time.Until(scanAt))
		case "not found while it lists", "not found again while it lists":
			if order == "not found again while it lists" {
				r.srv.Delete(doc)
				quiesce()
				pending()
			}
			// The scan's first page waits at the kit while the
			// not-found comes, later than the scan began.
			h := r.faults().HoldNextRequest(string(mcp.MethodResourcesList), "")
			defer h.Release()
			<-h.Arrived()
			require.False(t, time.Now().Before(scanAt))
			time.Sleep(100 * time.Millisecond)
			if order == "not found while it lists" {
				r.srv.Delete(doc)
			} else {
				out, err := r.c.Read(t.Context(), doc)
				require.NoError(t, err)
				require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
			}
			quiesce()
			pending()
			h.Release()
		case "not found after the reconciliation":
			time.Sleep(time.Until(scanAt) - 100*time.Millisecond)
			// The server says not found at once; the client hears
			// it after the scan reconciled.
			h := r.faults().HoldNext(string(mcp.MethodResourcesRead), doc)
			defer h.Release()
			r.srv.Delete(doc)
			<-h.Arrived()
			time.Sleep(200 * time.Millisecond)
			quiesce()
			h.Release()
		}
		quiesce()
		_, entry := r.waitTombstone(t, doc, soon)
		took := time.Since(scanAt)
		assert.LessOrEqual(t, took, soon, "confirmed %v after the first scan that missed it", took)
		require.NotNil(t, entry.Evidence)
		assert.Equal(t, ledger.EvidenceCorroborated, entry.Evidence.Kind)
		r.mu.Lock()
		defer r.mu.Unlock()
		assert.Empty(t, r.errs.list())
		// The order asked for is the order that came: the scan
		// that first missed the URI says which.
		require.GreaterOrEqual(t, len(r.scans), 2)
		rec := r.scans[1].Reconciliation
		switch order {
		case "not found before the listing":
			assert.Equal(t, []string{doc}, rec.Corroborating)
		case "not found while it lists", "not found again while it lists":
			assert.Equal(t, []string{doc}, rec.TooOld)
		case "not found after the reconciliation":
			assert.Equal(t, []string{doc}, rec.Missing)
		}
	})
}

// A server that keeps answering not found while it is listed never draws
// the kept scan into listing back to back: each listing the not-found
// overtakes is followed by another about a second later, not at once; and
// once the deletion is confirmed, the kept scan lists once per review.
func TestKeptScanNeverListsBackToBackWhileNotFoundsOvertakeIt(t *testing.T) {
	const doc = "file:///docs/doc.md"
	eachEra(t, func(t *testing.T, w wiring) {
		r := newKeptRigWatching(t, w, doc, "file:///docs/other.md")
		r.srv.Delete(doc)
		quiesce()
		// Each scan's first pass (one page) waits at the kit while a
		// not-found comes; every list request is held, so that a
		// scan begun at once would be seen at once.
		hold := func() *mcpsynctest.Hold {
			return r.faults().HoldNextRequest(string(mcp.MethodResourcesList), "")
		}
		var began []time.Time
		h := hold()
		for i := range 5 {
			<-h.Arrived() // pass A
			began = append(began, time.Now())
			time.Sleep(100 * time.Millisecond)
			out, err := r.c.Read(t.Context(), doc)
			require.NoError(t, err)
			require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
			passB := hold()
			h.Release()
			<-passB.Arrived()
			if i < 4 {
				h = hold()
			}
			passB.Release()
		}
		quiesce()
		for i := 1; i < len(began); i++ {
			assert.GreaterOrEqual(t, began[i].Sub(began[i-1]), time.Second, "scan %d began %v after the one before", i, began[i].Sub(began[i-1]))
		}
		r.waitTombstone(t, doc, 2*time.Second)
		r.mu.Lock()
		n := len(r.scans)
		r.mu.Unlock()
		time.Sleep(3 * keptReview)
		quiesce()
		r.mu.Lock()
		defer r.mu.Unlock()
		assert.InDelta(t, 3, len(r.scans)-n, 1, "scans in three review intervals once the deletion is confirmed")
		assert.Empty(t, r.errs.list())
	})
}
