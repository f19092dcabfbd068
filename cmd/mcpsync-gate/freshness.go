package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// duplicatesPerChange is how many extra copies of each change's
// notification the server sends.
const duplicatesPerChange = 10

// amplificationStats are the counts of the read amplification scenario.
type amplificationStats struct {
	Changes int `json:"changes"`
	// Pulses is how many resources/updated notifications reached the engine.
	Pulses      int     `json:"pulses"`
	ReadsIssued int     `json:"readsIssued"`
	ReadsNeeded int     `json:"readsNeeded"`
	Ratio       float64 `json:"ratio"`
}

// runAmplification subscribes one resource, then changes it n times; after
// each change the server sends the same resources/updated notification 10
// more times, back to back (a server that repeats itself, or a transport
// that replays). Once the client is idle again the next change follows.
// Reads issued are the reads the server answered (after the initial one);
// reads needed are one per change. Revalidation is pushed out of the way
// (an hour), so every read is caused by a notification.
func runAmplification(ctx context.Context, p pace, seed uint64, n int) (amplificationStats, error) {
	const uri = "file:///gate/amplified.md"
	st := amplificationStats{Changes: n, ReadsNeeded: n}
	srv := mcpsynctest.NewServer(nil)
	srv.Set(uri, "text/plain", "v0")
	r, err := newRig(ctx, srv, seed, mcpsync.ClientOptions{RevalidateEvery: p.d(time.Hour)})
	if err != nil {
		return st, err
	}
	defer r.c.Close()
	if _, err := r.c.Subscribe(ctx, uri); err != nil {
		return st, err
	}
	if err := p.settle(func() bool { t, _ := r.served(uri); return t == "v0" && r.completed() == 1 }); err != nil {
		return st, fmt.Errorf("initial read: %w", err)
	}
	base := srv.Reads(uri)
	for i := 1; i <= n; i++ {
		text := fmt.Sprintf("v%d", i)
		for range 1 + duplicatesPerChange {
			srv.Set(uri, "text/plain", text)
		}
		pulses := uint64(i * (1 + duplicatesPerChange))
		idle := func() bool {
			sub, err := r.c.Engine().Subscription(uri)
			t, _ := r.served(uri)
			return err == nil && sub.LastNotificationSeq == pulses && sub.State == ledger.StateActive &&
				r.completed()-1 == srv.Reads(uri)-base && t == text
		}
		if err := p.settle(idle); err != nil {
			return st, fmt.Errorf("change %d: %w", i, err)
		}
	}
	sub, err := r.c.Engine().Subscription(uri)
	if err != nil {
		return st, err
	}
	st.Pulses = int(sub.LastNotificationSeq)
	st.ReadsIssued = srv.Reads(uri) - base
	st.Ratio = float64(st.ReadsIssued) / float64(st.ReadsNeeded)
	return st, nil
}

func amplificationFigure(s amplificationStats) figure {
	return judge("read_amplification", s.Ratio, bound{"<", 1.2}, &bound{"<=", 1.05}, "reads issued / reads needed", false,
		fmt.Sprintf("%d changes, each notified %d times: %d pulses, %d reads issued, %d needed",
			s.Changes, 1+duplicatesPerChange, s.Pulses, s.ReadsIssued, s.ReadsNeeded))
}

// Convergence: the nominal intervals of the scenario.
const (
	convRevalidate = 30 * time.Second
	convJitter     = 0.2
	convWindow     = 60 * time.Second
	convPoll       = 250 * time.Millisecond
	convDropRate   = 0.2
	convReorder    = 0.05
)

type convergenceStats struct {
	Resources int `json:"resources"`
	Changes   int `json:"changes"`
	// Changed is how many resources the burst changed: the denominator.
	Changed      int     `json:"changed"`
	WithinWindow int     `json:"withinWindow"`
	WithinBound  int     `json:"withinBound"`
	Share        float64 `json:"share"`
	ShareInBound float64 `json:"shareWithinBound"`
	// BoundSeconds is the published staleness bound (revalidation interval
	// plus jitter), nominal.
	BoundSeconds      float64 `json:"boundSeconds"`
	MaxLatencySeconds float64 `json:"maxLatencySeconds"`
	Reordered         int     `json:"reordered"`
	NotificationsSent int     `json:"notificationsSent"`
	PulsesSeen        int     `json:"pulsesSeen"`
}

// runConvergence subscribes m resources (revalidation every 30 s ± 20%),
// then makes the kit drop 20% of notifications and hold 5% back behind the
// next one, and changes 2m resources picked at random in one burst (paced
// so that mcp-go's 100-slot notification buffer does not add losses of its
// own). From the end of the burst it polls every 250 ms (nominal) until 60 s
// after it, and records for each changed resource when the client first
// served the server's current text, measured from the resource's last
// change. The figure is the share converged within 60 s.
func runConvergence(ctx context.Context, p pace, seed uint64, m int) (convergenceStats, error) {
	st := convergenceStats{Resources: m, Changes: 2 * m,
		BoundSeconds: (convRevalidate + time.Duration(float64(convRevalidate)*convJitter)).Seconds()}
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, m)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///gate/converge/r%05d.md", i)
		srv.Set(uris[i], "text/plain", "v0")
	}
	r, err := newRig(ctx, srv, seed, mcpsync.ClientOptions{RevalidateEvery: p.d(convRevalidate), Jitter: convJitter})
	if err != nil {
		return st, err
	}
	defer r.c.Close()
	for _, u := range uris {
		if _, err := r.c.Subscribe(ctx, u); err != nil {
			return st, err
		}
	}
	if err := p.settle(func() bool {
		for _, u := range uris {
			if t, _ := r.served(u); t != "v0" {
				return false
			}
		}
		return true
	}); err != nil {
		return st, fmt.Errorf("initial reads: %w", err)
	}
	sentBefore := srv.NotificationsSent()
	kit := r.faults()
	kit.SetDropRate(convDropRate)
	rng := rand.New(rand.NewPCG(seed, 0xc0))
	lastChange := make(map[string]time.Time)
	for i := range st.Changes {
		u := uris[rng.IntN(m)]
		if rng.Float64() < convReorder {
			kit.ReorderNext(u)
			st.Reordered++
		}
		srv.Set(u, "text/plain", fmt.Sprintf("v%d", i+1))
		lastChange[u] = time.Now()
		if i%20 == 19 {
			p.yield()
		}
	}
	end := time.Now()
	st.Changed = len(lastChange)
	latency := make(map[string]time.Duration, len(lastChange))
	for {
		for u, at := range lastChange {
			if _, done := latency[u]; done {
				continue
			}
			want, _ := srv.Text(u)
			if got, ok := r.served(u); ok && got == want {
				latency[u] = p.nominal(time.Since(at))
			}
		}
		if len(latency) == len(lastChange) || p.nominal(time.Since(end)) > convWindow {
			break
		}
		p.sleep(convPoll)
	}
	window, limit := convWindow, time.Duration(st.BoundSeconds*float64(time.Second))
	for _, l := range latency {
		if l <= window {
			st.WithinWindow++
		}
		if l <= limit {
			st.WithinBound++
		}
		st.MaxLatencySeconds = max(st.MaxLatencySeconds, l.Seconds())
	}
	if st.Changed > 0 {
		st.Share = float64(st.WithinWindow) / float64(st.Changed)
		st.ShareInBound = float64(st.WithinBound) / float64(st.Changed)
	}
	st.NotificationsSent = srv.NotificationsSent() - sentBefore
	for sub, err := range r.c.Engine().Subscriptions() {
		if err != nil {
			return st, err
		}
		st.PulsesSeen += int(sub.LastNotificationSeq)
	}
	return st, nil
}

func convergenceFigure(s convergenceStats) figure {
	f := judge("convergence_within_60s", s.Share, bound{">=", 0.999}, nil, "share of changed resources", false,
		fmt.Sprintf("%d resources, %d changes to %d of them, %.0f%% of notifications dropped, %d held for reordering; "+
			"%d/%d converged within 60 s, %d/%d within the staleness bound %.0f s; slowest %.1f s",
			s.Resources, s.Changes, s.Changed, convDropRate*100, s.Reordered,
			s.WithinWindow, s.Changed, s.WithinBound, s.Changed, s.BoundSeconds, s.MaxLatencySeconds))
	// The goal is about a shorter window than the figure's: all of them
	// within the published staleness bound.
	f.Goal = fmt.Sprintf("100%% within %.0f s", s.BoundSeconds)
	f.GoalMet = s.Changed > 0 && s.WithinBound == s.Changed
	return f
}
