package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Deletions: a Client keeps scanning (KeepScanning) a server that, like
// every third-party server, has no snapshot extension and sends no
// list_changed, so a deletion can only be corroborated. Half the resources
// are deleted at random moments, half of those without the notification;
// the other half are deleted (notified) and created again a random while
// later, without a notification, so only the evidence can tell them apart.
//
// corroborated_tombstone_seconds is the longest time, over the deleted
// resources, from the deletion to its tombstoned outbox entry; it must stay
// within two scan intervals. corroborated_late_tombstones counts tombstones
// written while the server had the resource, created longer ago than a read
// may take (so the read that confirmed the deletion must have found it):
// it must be 0. A recreated resource still not served at the end is stuck.
const (
	delReview  = 10 * time.Second // the kept scan's interval, nominal
	delTimeout = time.Second      // RequestTimeout, nominal
	delPoll    = 250 * time.Millisecond
)

type deletionStats struct {
	Resources  int `json:"resources"`
	Deleted    int `json:"deleted"`
	Unnotified int `json:"unnotified"`
	Recreated  int `json:"recreated"`
	Tombstoned int `json:"tombstoned"`
	// NotCorroborated are tombstones whose evidence is not corroborated
	// (only corroboration is possible here).
	NotCorroborated   int     `json:"notCorroborated"`
	MaxLatencySeconds float64 `json:"maxLatencySeconds"`
	LateTombstones    int     `json:"lateTombstones"`
	// RaceTombstones are tombstones written while the server had the
	// resource, created so recently that the confirming read may have been
	// answered before: not counted as late.
	RaceTombstones int     `json:"raceTombstones"`
	Stuck          int     `json:"stuck"`
	IntervalSecs   float64 `json:"intervalSeconds"`
}

type delResource struct {
	uri       string
	exists    bool
	createdAt time.Time
	deletedAt time.Time
	recreate  bool
	tombAt    time.Time
}

func runDeletions(ctx context.Context, p pace, seed uint64, n int) (deletionStats, error) {
	st := deletionStats{Resources: n, IntervalSecs: delReview.Seconds()}
	rng := rand.New(rand.NewPCG(seed, 0xde1e7e))
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{SuppressListChanged: true})
	var mu sync.Mutex // protects res and st's tombstone counts
	res := map[string]*delResource{}
	uris := make([]string, n)
	start := time.Now()
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///gate/del/r%03d.md", i)
		srv.Set(uris[i], "text/plain", "v0")
		res[uris[i]] = &delResource{uri: uris[i], exists: true, createdAt: start}
	}
	onOutcome := func(o mcpsync.Outcome) {
		if o.Tombstone == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		r := res[o.Tombstone.URI]
		st.Tombstoned++
		if o.Tombstone.Evidence.Kind != ledger.EvidenceCorroborated {
			st.NotCorroborated++
		}
		if r.exists {
			if time.Since(r.createdAt) > p.d(delTimeout) {
				st.LateTombstones++
			} else {
				st.RaceTombstones++
			}
			return
		}
		if r.tombAt.IsZero() {
			r.tombAt = time.Now()
		}
	}
	rg, err := newRig(ctx, srv, seed, mcpsync.ClientOptions{
		RequestTimeout: p.d(delTimeout), RevalidateEvery: p.d(time.Hour), OnOutcome: onOutcome,
		Scanner: &mcpsync.ScannerOptions{
			ReviewAfter: p.d(delReview), StaleAfter: p.d(2 * delReview),
			BackoffBase: p.d(50 * time.Millisecond), BackoffMax: p.d(time.Second),
		},
	})
	if err != nil {
		return st, err
	}
	defer rg.c.Close()
	for _, u := range uris {
		if _, err := rg.c.Subscribe(ctx, u); err != nil {
			return st, err
		}
	}
	if _, err := rg.c.KeepScanning(nil); err != nil {
		return st, err
	}

	// The schedule: every resource gets one event in the first two
	// intervals; a recreation follows its deletion within 1.5 intervals.
	type event struct {
		at       time.Duration
		uri      string
		recreate bool // the recreation, not the deletion
		notify   bool
	}
	var events []event
	for i, u := range uris {
		at := time.Duration(rng.Int64N(int64(2 * delReview)))
		if i%2 == 0 {
			notify := rng.IntN(2) == 0
			events = append(events, event{at: at, uri: u, notify: notify})
			st.Deleted++
			if !notify {
				st.Unnotified++
			}
			continue
		}
		res[u].recreate = true
		st.Recreated++
		events = append(events, event{at: at, uri: u, notify: true},
			event{at: at + time.Duration(rng.Int64N(int64(3*delReview/2))), uri: u, recreate: true})
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	began, elapsed := time.Now(), time.Duration(0)
	for _, ev := range events {
		p.sleep(ev.at - elapsed)
		elapsed = ev.at
		kit := rg.faults()
		mu.Lock()
		r := res[ev.uri]
		if ev.recreate {
			kit.DropNext(ev.uri, 1)
			srv.Recreate(ev.uri, "v1")
			r.exists, r.createdAt = true, time.Now()
		} else {
			if !ev.notify {
				kit.DropNext(ev.uri, 1)
			}
			srv.Delete(ev.uri)
			r.exists, r.deletedAt = false, time.Now()
		}
		mu.Unlock()
		p.yield()
	}
	// Three intervals after the last event: every deletion is confirmed
	// by then, and every recreation read again by a scan.
	for end := began.Add(p.d(elapsed + 3*delReview)); time.Now().Before(end); {
		p.sleep(delPoll)
		if p.wait != nil {
			p.wait()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, u := range uris {
		r := res[u]
		switch {
		case r.recreate:
			if text, ok := rg.served(u); !ok || text != "v1" {
				st.Stuck++
			}
		case r.tombAt.IsZero():
			st.MaxLatencySeconds = math.Inf(1)
		default:
			st.MaxLatencySeconds = max(st.MaxLatencySeconds, p.nominal(r.tombAt.Sub(r.deletedAt)).Seconds())
		}
	}
	return st, nil
}

func deletionFigures(s deletionStats) []figure {
	detail := fmt.Sprintf("%d resources, kept scan every %vs: %d deleted (%d not notified), %d deleted and created again unnotified; %d tombstones (%d not corroborated, %d racing a recreation), %d recreated not served at the end",
		s.Resources, s.IntervalSecs, s.Deleted, s.Unnotified, s.Recreated, s.Tombstoned, s.NotCorroborated, s.RaceTombstones, s.Stuck)
	return []figure{
		judge("corroborated_tombstone_seconds", s.MaxLatencySeconds, bound{"<=", 2 * delReview.Seconds()}, nil, "seconds", false, detail),
		judge("corroborated_late_tombstones", float64(s.LateTombstones+s.NotCorroborated), bound{"==", 0}, nil, "count", false, detail),
		judge("corroborated_recreations_stuck", float64(s.Stuck), bound{"==", 0}, nil, "count", false, detail),
	}
}
