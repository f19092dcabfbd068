package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Healing: a Client holds subscriptions to a server that dies again and
// again (its session is dropped under the client, as when a stdio process
// is killed); the server is back at once, so each heal is the client's own
// time: noticing the loss (the heartbeat, or a read that fails), backing
// off, dialing, resubscribing and re-reading every URI. The caller never
// calls Reconnect.
//
// heal_p99_seconds is, over every restart, the 99th percentile of the time
// from the loss to the moment the server has confirmed every
// subscription's copy again (Entry.ValidatedAt). served_past_bound counts, over lookups made all
// through the healing, a strict lookup (RequireFresh) that returned a copy
// older than its staleness bound, and a plain lookup that returned such a
// copy with no Degraded reason (silently stale).
//
// This scenario runs in real time at fixed options, not scaled by -scale:
// its figures are the ones docs/performance.md publishes for these options.
const (
	healPingEvery   = 100 * time.Millisecond
	healPingTimeout = time.Second
	healInitial     = 100 * time.Millisecond
	healMax         = time.Second
	healRevalidate  = 2 * time.Second
)

type healingStats struct {
	Restarts          int     `json:"restarts"`
	URIs              int     `json:"uris"`
	HealP50Seconds    float64 `json:"healP50Seconds"`
	HealP99Seconds    float64 `json:"healP99Seconds"`
	HealMaxSeconds    float64 `json:"healMaxSeconds"`
	Lookups           int     `json:"lookups"`
	StrictPastBound   int     `json:"strictPastBound"`
	SilentlyStale     int     `json:"silentlyStale"`
	RefusedStale      int     `json:"refusedStale"`
	Reconnects        uint64  `json:"reconnects"`
	ConnectionReports int     `json:"connectionReports"`
}

func runHealing(ctx context.Context, p pace, seed uint64, restarts, n int) (healingStats, error) {
	st := healingStats{Restarts: restarts, URIs: n}
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///gate/heal/r%03d.md", i)
		srv.Set(uris[i], "text/plain", "v0")
	}
	var mu sync.Mutex // protects reports
	reports := 0
	r, err := newRig(ctx, srv, seed, mcpsync.ClientOptions{
		RevalidateEvery: healRevalidate, PingEvery: healPingEvery, PingTimeout: healPingTimeout,
		Reconnect: mcpsync.ReconnectPolicy{Initial: healInitial, Max: healMax},
		OnError: func(err error) {
			if _, ok := errors.AsType[*mcpsync.ConnectionError](err); ok {
				mu.Lock()
				reports++
				mu.Unlock()
			}
		},
	})
	if err != nil {
		return st, err
	}
	defer r.c.Close()
	for _, u := range uris {
		if _, err := r.c.Subscribe(ctx, u); err != nil {
			return st, err
		}
	}
	// validated reports whether the server confirmed every URI's copy after
	// since (an unchanged read keeps the version and moves ValidatedAt),
	// judging every lookup on the way.
	validated := func(since time.Time) bool {
		all := true
		for _, u := range uris {
			st.Lookups++
			e, err := r.c.Lookup(u, mcpsync.RequireFresh())
			switch {
			case errors.Is(err, mcpsync.ErrStale):
				st.RefusedStale++
			case err == nil && time.Since(e.ValidatedAt) > e.StalenessBound:
				st.StrictPastBound++
			}
			e, err = r.c.Lookup(u)
			if err != nil {
				all = false
				continue
			}
			if e.StalenessBound > 0 && time.Since(e.ValidatedAt) > e.StalenessBound && e.Degraded == "" {
				st.SilentlyStale++
			}
			all = all && e.ValidatedAt.After(since)
		}
		return all
	}
	if err := p.settle(func() bool { return validated(time.Time{}) }); err != nil {
		return st, fmt.Errorf("initial reads: %w", err)
	}
	heals := make([]time.Duration, 0, restarts)
	for i := range restarts {
		start := time.Now()
		r.faults().DropSession() // the server dies under the client
		if err := p.settle(func() bool { return validated(start) }); err != nil {
			return st, fmt.Errorf("restart %d: not healed (%+v): %w", i+1, r.c.Health(), err)
		}
		heals = append(heals, time.Since(start))
	}
	slices.Sort(heals)
	st.HealP50Seconds = quantile(heals, 0.50).Seconds()
	st.HealP99Seconds = quantile(heals, 0.99).Seconds()
	st.HealMaxSeconds = heals[len(heals)-1].Seconds()
	st.Reconnects = r.c.Health().Reconnects
	mu.Lock()
	st.ConnectionReports = reports
	mu.Unlock()
	return st, nil
}

// quantile is the nearest-rank q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func healingFigures(s healingStats) []figure {
	detail := fmt.Sprintf("%d restarts of a server with %d subscriptions; heal p50 %.3f s, max %.3f s; %d reconnects, %d connection reports; "+
		"heartbeat %v (timeout %v), reconnect backoff %v..%v, revalidation %v",
		s.Restarts, s.URIs, s.HealP50Seconds, s.HealMaxSeconds, s.Reconnects, s.ConnectionReports,
		healPingEvery, healPingTimeout, healInitial, healMax, healRevalidate)
	lookups := fmt.Sprintf("%d lookups during healing: %d strict past the bound, %d silently stale, %d refused ErrStale",
		s.Lookups, s.StrictPastBound, s.SilentlyStale, s.RefusedStale)
	return []figure{
		judge("heal_p99_seconds", s.HealP99Seconds, bound{"<", 5}, &bound{"<", 1}, "seconds", false, detail),
		judge("served_past_bound", float64(s.StrictPastBound+s.SilentlyStale), bound{"==", 0}, nil, "count", false, lookups),
	}
}
