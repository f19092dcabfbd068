package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// revocationStats are the measurements of the revocation scenario.
type revocationStats struct {
	Subjects  int `json:"subjects"`
	URIs      int `json:"uris"`
	Artifacts int `json:"artifacts"`
	// Missing counts derived artifacts of a revoked subject that had no
	// invalidation in the outbox once RevokeSubject returned.
	Missing       int     `json:"missing"`
	P50Seconds    float64 `json:"p50Seconds"`
	P99Seconds    float64 `json:"p99Seconds"`
	MaxSeconds    float64 `json:"maxSeconds"`
	LoadAccepted  int     `json:"loadAccepted"`
	OutboxEntries int     `json:"outboxEntries"`
}

// Versions per generation and indexes per version of the revocation scenario.
const (
	revVersions = 3
	revIndexes  = 2
	// revLoadBatch is how many reads the background writer completes
	// alongside each revocation.
	revLoadBatch = 200
)

func revocationContent(uri string, v int) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: fmt.Sprintf("%s v%d", uri, v)}})
}

// runRevocation builds, in one Engine, uris resources, each read in two
// subscription generations by two subjects drawn from subjects, each
// generation accepting 3 versions, and records 2 derived artifacts (two
// indexes) against every version. Then, while a background writer keeps
// accepting new versions of every resource, it revokes the subjects one at
// a time in random order and measures, for each, the wall time from calling
// RevokeSubject to the moment the outbox holds an invalidation for every
// artifact the harness recorded against that subject (RevokeSubject is
// synchronous, so this is its duration plus one pull of the outbox). The
// figure is the 99th percentile.
func runRevocation(seed uint64, subjects, uris int) (revocationStats, error) {
	st := revocationStats{Subjects: subjects, URIs: uris}
	rng := rand.New(rand.NewPCG(seed, 0x7e0))
	e, err := mcpsync.NewEngine(nil)
	if err != nil {
		return st, err
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		return st, err
	}
	subjectName := func(i int) string { return fmt.Sprintf("user:%04d", i) }
	type artifactKey struct{ index, id string }
	recorded := make(map[string]map[artifactKey]bool) // subject -> artifacts
	keys := make([]string, uris)
	for i := range keys {
		keys[i] = fmt.Sprintf("file:///gate/revoke/doc%05d.md", i)
		for g := range 2 {
			who := subjectName(rng.IntN(subjects))
			if g > 0 {
				if _, err := e.BeginClose(keys[i]); err != nil {
					return st, err
				}
				if _, err := e.FinishClose(keys[i], true); err != nil {
					return st, err
				}
			}
			if _, err := e.Subscribe(keys[i], who); err != nil {
				return st, err
			}
			if _, err := e.Activate(keys[i], ledger.ModePush); err != nil {
				return st, err
			}
			for v := range revVersions {
				t, err := e.IssueTicket(keys[i], ledger.TriggerRevalidate)
				if err != nil {
					return st, err
				}
				out, err := e.FinishRead(t, revocationContent(keys[i], g*revVersions+v))
				if err != nil {
					return st, err
				}
				for x := range revIndexes {
					a := ledger.DerivedArtifact{Index: fmt.Sprintf("index%d", x),
						ArtifactID: fmt.Sprintf("%s#g%dv%d", keys[i], g, v), Version: out.Version.Version}
					if err := e.RecordDerived(a); err != nil {
						return st, err
					}
					if recorded[who] == nil {
						recorded[who] = map[artifactKey]bool{}
					}
					recorded[who][artifactKey{a.Index, a.ArtifactID}] = true
					st.Artifacts++
				}
			}
		}
	}
	entries, err := e.PullOutbox(0, 0)
	if err != nil {
		return st, err
	}
	var cursor uint64
	if len(entries) > 0 {
		cursor = entries[len(entries)-1].Seq
	}
	st.OutboxEntries = len(entries)

	// The background writer: with every revocation, a batch of reads of
	// other resources passes the fence at the same time (refused once their
	// subject is revoked), so the revocation contends with accepts.
	tick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	var loadAccepted int
	wg.Go(func() {
		n := 0
		for range tick {
			for range revLoadBatch {
				key := keys[n%len(keys)]
				n++
				if t, ok, err := e.RequestRead(key, ledger.TriggerRevalidate); err == nil && ok {
					if out, _ := e.FinishRead(t, revocationContent(key, 1000+n)); out.Accepted {
						loadAccepted++
					}
				}
			}
		}
	})
	stopLoad := func() {
		close(tick)
		wg.Wait()
	}

	order := rng.Perm(subjects)
	var latencies []time.Duration
	for _, i := range order {
		who := subjectName(i)
		want := recorded[who]
		tick <- struct{}{}
		start := time.Now()
		if _, err := e.RevokeSubject(who); err != nil {
			stopLoad()
			return st, err
		}
		entries, err := e.PullOutbox(cursor, 0)
		if err != nil {
			stopLoad()
			return st, err
		}
		got := 0
		for _, en := range entries {
			if en.Reason == ledger.InvalidateRevoked && en.Subject == who && en.Artifact != nil &&
				want[artifactKey{en.Artifact.Index, en.Artifact.ArtifactID}] {
				got++
			}
		}
		latencies = append(latencies, time.Since(start))
		st.Missing += len(want) - got
		if len(entries) > 0 {
			cursor = entries[len(entries)-1].Seq
		}
		st.OutboxEntries += len(entries)
	}
	stopLoad()
	st.LoadAccepted = loadAccepted
	st.P50Seconds = percentile(latencies, 0.50).Seconds()
	st.P99Seconds = percentile(latencies, 0.99).Seconds()
	st.MaxSeconds = percentile(latencies, 1).Seconds()
	return st, nil
}

// percentile returns the q-quantile of ds by the nearest-rank method.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*q+0.999999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func revocationFigure(s revocationStats) figure {
	v := s.P99Seconds
	detail := fmt.Sprintf("%d subjects revoked one at a time over %d resources and %d derived artifacts, under a concurrent writer (%d versions accepted meanwhile); p50 %.6f s, max %.6f s",
		s.Subjects, s.URIs, s.Artifacts, s.LoadAccepted, s.P50Seconds, s.MaxSeconds)
	if s.Missing > 0 {
		// An artifact never invalidated has no latency: the figure fails.
		v = 1e9
		detail += fmt.Sprintf("; %d artifacts of revoked subjects had no invalidation", s.Missing)
	}
	return judge("revocation_p99_seconds", v, bound{"<", 30}, &bound{"<", 1}, "s", false, detail)
}
