package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// The scenarios start Clients, whose goroutines must all be gone when a
// scenario returns.
func TestMain(m *testing.M) {
	if size := os.Getenv(stdioServerEnv); size != "" {
		os.Exit(serveStdio(size)) // the stdio server of the read cases
	}
	goleak.VerifyTestMain(m)
}

// knownFailures are figures that fail against the library as it is, each
// with the reason. The gate itself prints them as FAIL and exits 1; this
// list only keeps `make test` usable meanwhile, and it is a ratchet: a
// figure listed here that passes fails the test, so the entry must go.
var knownFailures = map[string]string{}

// requireFigures checks figures against the bound each one declares and
// the known failures.
func requireFigures(t *testing.T, figs []figure) {
	t.Helper()
	for _, f := range figs {
		if why, known := knownFailures[f.Name]; known {
			assert.False(t, f.Pass, "%s passes now (%s): remove it from knownFailures", f.Name, f.line())
			if !f.Pass {
				t.Logf("known failure %s: %s", f.line(), why)
			}
			continue
		}
		assert.True(t, f.Pass, "%s: %s", f.line(), f.Detail)
	}
}

// The short gate, as `make test` runs it: every figure once, one line each,
// the same figures in the JSON file, and an exit status that says whether
// any failed.
func TestRunShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-short", "-json", path}, &stdout, &stderr)
	require.Empty(t, stderr.String())

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var rep report
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Figures, len(lines), "one line per figure")
	names := map[string]bool{}
	anyFail := false
	for i, line := range lines {
		fields := strings.Fields(line)
		require.Len(t, fields, 4, "name value target PASS|FAIL: %q", line)
		f := rep.Figures[i]
		assert.Equal(t, f.line(), line, "the JSON holds the printed figure")
		assert.Contains(t, []string{"PASS", "FAIL"}, fields[3])
		assert.Equal(t, f.Pass, fields[3] == "PASS")
		assert.False(t, names[f.Name], "figure %s printed twice", f.Name)
		names[f.Name] = true
		anyFail = anyFail || !f.Pass
	}
	for _, name := range []string{
		"catalogs_accepted_without_reconciliation", "unproven_catalogs_consumed_by_completeness",
		"orderings_version_regressions", "orderings_late_tombstones", "orderings_outbox_after_closed",
		"orderings_stuck_subscriptions", "orderings_silently_stale",
		"read_amplification", "convergence_within_60s", "heal_p99_seconds", "served_past_bound",
		"corroborated_tombstone_seconds", "corroborated_late_tombstones", "corroborated_recreations_stuck",
		"revocation_p99_seconds", "memory_bytes_per_subscription",
	} {
		assert.True(t, names[name], "figure %s is missing", name)
	}
	assert.Equal(t, !anyFail, rep.Pass)
	if anyFail {
		assert.Equal(t, exitFail, code)
	} else {
		assert.Equal(t, exitPass, code)
	}
	assert.True(t, rep.Short)
	assert.Equal(t, 5000, rep.Orderings)
	requireFigures(t, rep.Figures)
}

// The time-based scenarios at their nominal intervals, in virtual time:
// revalidation every 30 s, a 60 s convergence window, backoffs of 50 ms
// and more. Nothing sleeps.
func TestTimedScenariosInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pace{scale: 1, wait: synctest.Wait}
		amp, err := runAmplification(t.Context(), p, 1, 20)
		require.NoError(t, err)
		conv, err := runConvergence(t.Context(), p, 1, 60)
		require.NoError(t, err)
		cats, err := runCatalogs(t.Context(), p, 1, 24)
		require.NoError(t, err)
		dels, err := runDeletions(t.Context(), p, 1, 24)
		require.NoError(t, err)
		t.Logf("deletions %+v", dels)
		// A recreated resource may be tombstoned before it is created again.
		assert.GreaterOrEqual(t, dels.Tombstoned, dels.Deleted, "every deletion confirmed")
		assert.NotZero(t, dels.Unnotified)
		t.Logf("amplification %+v", amp)
		t.Logf("convergence %+v", conv)
		t.Logf("catalogs %+v", cats)
		assert.Equal(t, 20*(1+duplicatesPerChange), amp.Pulses, "every duplicate reached the engine")
		assert.GreaterOrEqual(t, amp.ReadsIssued, amp.ReadsNeeded, "every change was read")
		assert.LessOrEqual(t, conv.MaxLatencySeconds, conv.BoundSeconds+convPoll.Seconds(),
			"in virtual time nothing is slower than the staleness bound")
		assert.Less(t, conv.PulsesSeen, conv.Changes, "notifications were dropped")
		assert.NotZero(t, cats.ByStatus[mcpsync.CatalogSnapshotUnproven])
		assert.NotZero(t, cats.ByStatus[mcpsync.CatalogSnapshotProven])
		requireFigures(t, append(append(catalogFigures(cats), amplificationFigure(amp), convergenceFigure(conv)), deletionFigures(dels)...))
	})
}

// Each check of the orderings counts what it must when fed a history that
// breaks it.
func TestCheckerCountsBrokenHistories(t *testing.T) {
	const uri = "file:///gate/doc0.md"
	updated := func(gen, ord uint64) mcpsync.OutboxEntry {
		return mcpsync.OutboxEntry{URI: uri, Reason: ledger.InvalidateUpdated,
			Version: mcpsync.ResourceVersion{URI: uri, SubscriptionGeneration: gen, ReadOrdinal: ord}}
	}
	tests := []struct {
		name    string
		history func(c *checker)
		want    orderingStats
	}{
		{"forward only", func(c *checker) {
			c.accepted(uri, fencePos{1, 1}, 1, false, false)
			c.accepted(uri, fencePos{1, 3}, 2, false, false)
			c.accepted(uri, fencePos{2, 1}, 2, false, false)
			c.served(uri, fencePos{2, 1})
			c.served(uri, fencePos{2, 1})
			c.outbox(updated(1, 1), false)
			c.outbox(updated(2, 1), false)
		}, orderingStats{Accepted: 3, OutboxEntries: 2}},
		{"accepted ordinal below the previous", func(c *checker) {
			c.accepted(uri, fencePos{1, 6}, 2, false, false)
			c.accepted(uri, fencePos{1, 5}, 2, false, false)
		}, orderingStats{Accepted: 2, VersionRegressions: 1}},
		{"older generation accepted after a newer one", func(c *checker) {
			c.accepted(uri, fencePos{2, 1}, 2, false, false)
			c.accepted(uri, fencePos{1, 9}, 2, false, false)
		}, orderingStats{Accepted: 2, VersionRegressions: 1}},
		{"the same ordinal accepted twice", func(c *checker) {
			c.accepted(uri, fencePos{1, 2}, 2, false, false)
			c.accepted(uri, fencePos{1, 2}, 2, false, false)
		}, orderingStats{Accepted: 2, VersionRegressions: 1}},
		{"older server content accepted", func(c *checker) {
			c.accepted(uri, fencePos{1, 1}, 5, false, false)
			c.accepted(uri, fencePos{1, 2}, 4, false, false)
		}, orderingStats{Accepted: 2, VersionRegressions: 1}},
		{"lookup serves an older version", func(c *checker) {
			c.served(uri, fencePos{1, 4})
			c.served(uri, fencePos{1, 3})
		}, orderingStats{VersionRegressions: 1}},
		{"outbox update not after the previous", func(c *checker) {
			c.outbox(updated(1, 4), false)
			c.outbox(updated(1, 4), false)
		}, orderingStats{OutboxEntries: 2, VersionRegressions: 1}},
		{"not-found accepted after the close began", func(c *checker) {
			c.accepted(uri, fencePos{1, 2}, 0, true, true)
		}, orderingStats{Accepted: 1, AcceptsAfterClose: 1, LateTombstones: 1}},
		{"tombstone the outcome did not admit to", func(c *checker) {
			c.hiddenTombstone()
		}, orderingStats{LateTombstones: 1}},
		{"content accepted after the close began", func(c *checker) {
			c.accepted(uri, fencePos{1, 2}, 3, true, false)
			c.outbox(updated(1, 2), true)
		}, orderingStats{Accepted: 1, AcceptsAfterClose: 1, OutboxEntries: 1, OutboxAfterClosed: 1}},
		{"tombstoned entry for a closing generation", func(c *checker) {
			c.outbox(mcpsync.OutboxEntry{URI: uri, Reason: ledger.InvalidateTombstoned}, true)
		}, orderingStats{OutboxEntries: 1, OutboxAfterClosed: 1, LateTombstones: 1}},
		{"revocation after the close is allowed", func(c *checker) {
			c.outbox(mcpsync.OutboxEntry{URI: uri, Reason: ledger.InvalidateRevoked}, true)
		}, orderingStats{OutboxEntries: 1}},
		{"settled: converged or a confirmed deletion", func(c *checker) {
			c.settled(true, 4, true, true, 4)
			c.settled(false, 4, false, false, 0)
			c.settled(false, 4, true, false, 0)
		}, orderingStats{LiveSubscriptions: 3}},
		{"settled: open but nothing served", func(c *checker) {
			c.settled(true, 4, true, false, 0)
		}, orderingStats{LiveSubscriptions: 1, StuckSubscriptions: 1}},
		{"settled: tombstoned while the server has it", func(c *checker) {
			c.settled(true, 4, false, false, 0)
		}, orderingStats{LiveSubscriptions: 1, StuckSubscriptions: 1}},
		{"settled: older content served", func(c *checker) {
			c.settled(true, 4, true, true, 3)
		}, orderingStats{LiveSubscriptions: 1, SilentlyStale: 1}},
		{"settled: content of a deleted resource served", func(c *checker) {
			c.settled(false, 4, true, true, 4)
		}, orderingStats{LiveSubscriptions: 1, SilentlyStale: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got orderingStats
			tt.history(newChecker(&got))
			assert.Equal(t, tt.want, got)
		})
	}
}

// The orderings are reproducible from the seed, and a different seed makes
// different ones.
func TestOrderingsDeterministic(t *testing.T) {
	a, err := runOrderings(7, 300)
	require.NoError(t, err)
	b, err := runOrderings(7, 300)
	require.NoError(t, err)
	c, err := runOrderings(8, 300)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a.Operations, c.Operations)
	assert.NotZero(t, a.DeliveriesAfterClose, "the orderings reach the cases the figures are about")
	assert.NotZero(t, a.LiveSubscriptions, "the orderings leave live subscriptions to judge")
	// The progress figures are judged over the short gate's 5000 orderings
	// (TestRunShort): 300 are too few to meet a rare stuck subscription, so
	// the known-failure ratchet cannot be applied to them here.
	requireFigures(t, orderingFigures(a)[:4])
}

// Every figure fails when its value is outside its bound.
func TestFiguresCanFail(t *testing.T) {
	bad := []figure{
		catalogFigures(catalogStats{AcceptedWithoutReconciliation: 1})[0],
		catalogFigures(catalogStats{UnprovenConsumed: 1})[1],
		orderingFigures(orderingStats{VersionRegressions: 1})[0],
		orderingFigures(orderingStats{LateTombstones: 1})[1],
		orderingFigures(orderingStats{OutboxAfterClosed: 1})[2],
		orderingFigures(orderingStats{AcceptsAfterClose: 1})[3],
		orderingFigures(orderingStats{StuckSubscriptions: 1})[4],
		orderingFigures(orderingStats{SilentlyStale: 1})[5],
		amplificationFigure(amplificationStats{Ratio: 1.2}),
		convergenceFigure(convergenceStats{Share: 0.998}),
		revocationFigure(revocationStats{P99Seconds: 30}),
		revocationFigure(revocationStats{P99Seconds: 0.001, Missing: 1}),
		memoryFigure(memoryStats{PerSub: 1025}),
		readFigures([]readCase{{Name: "read_ratio_1KiB", Ratio: 1.151}})[0],
		judge("nan", nan(), bound{">=", 0}, nil, "", true, ""),
	}
	for _, f := range bad {
		assert.False(t, f.Pass, f.line())
		assert.True(t, strings.HasSuffix(f.line(), " FAIL"), f.line())
	}
	good := []figure{
		amplificationFigure(amplificationStats{Ratio: 1.1}),
		convergenceFigure(convergenceStats{Share: 0.999}),
		revocationFigure(revocationStats{P99Seconds: 29.9}),
		memoryFigure(memoryStats{PerSub: 1024}),
		readFigures([]readCase{{Name: "read_ratio_1KiB", Ratio: 1.15}})[0],
	}
	for _, f := range good {
		assert.True(t, f.Pass, f.line())
	}
	assert.False(t, good[0].GoalMet, "1.1 misses the 1.05 goal")
	assert.Equal(t, "read_amplification 1.100000 <1.2 PASS", good[0].line())
}

// A catalog whose receipts do not earn its status is counted.
func TestReconciledChecksReceipts(t *testing.T) {
	items := []mcpsync.Descriptor{{Kind: mcpsync.KindResources, URI: "file:///a", Name: "a", MIMEType: "text/plain"}}
	good := mcpsync.Catalog{Kind: mcpsync.KindResources, Status: mcpsync.CatalogSnapshotUnproven, Descriptors: items}
	good.SetDigest = setDigest(good)
	pass := func(name string, digest string) mcpsync.ScanReceipt {
		return mcpsync.ScanReceipt{Attempt: 2, Pass: name, Outcome: mcpsync.PassClean, SetDigest: digest}
	}
	good.Scans = []mcpsync.ScanReceipt{pass("A", good.SetDigest), pass("B", good.SetDigest)}
	require.True(t, reconciled(good, false))

	breaks := map[string]func(c *mcpsync.Catalog){
		"passes disagree":        func(c *mcpsync.Catalog) { c.Scans[0].SetDigest = "sha256:other" },
		"one pass":               func(c *mcpsync.Catalog) { c.Scans = c.Scans[1:] },
		"passes of two attempts": func(c *mcpsync.Catalog) { c.Scans[0].Attempt = 1 },
		"unclean pass":           func(c *mcpsync.Catalog) { c.Scans[1].Outcome = mcpsync.PassUnclean },
		"list_changed seen":      func(c *mcpsync.Catalog) { c.Scans[0].ListChangedSeen = 1 },
		"items not the digest":   func(c *mcpsync.Catalog) { c.Descriptors = nil },
		"proven without the extension": func(c *mcpsync.Catalog) {
			c.Status, c.SnapshotID = mcpsync.CatalogSnapshotProven, "s1"
			c.Scans[1].SnapshotID = "s1"
		},
	}
	for name, brk := range breaks {
		t.Run(name, func(t *testing.T) {
			c := good
			c.Scans = append([]mcpsync.ScanReceipt(nil), good.Scans...)
			brk(&c)
			assert.False(t, reconciled(c, false))
		})
	}
}

// The read cases run both sides, in process and over stdio (this test
// binary serves the resource), and report medians of what they timed.
func TestReadsMeasureBothSides(t *testing.T) {
	cases, err := runReads(t.Context(), []readPlan{
		{name: "read_ratio_1KiB", size: 1 << 10, rounds: 3, batch: 2},
		{name: "read_ratio_stdio_1KiB", stdio: true, size: 1 << 10, rounds: 3, batch: 2},
	})
	require.NoError(t, err)
	require.Len(t, cases, 2)
	for _, rc := range cases {
		assert.Positive(t, rc.Ratio, rc.Name)
		assert.Positive(t, rc.RawMicros, rc.Name)
		assert.Positive(t, rc.MCPSyncMicros, rc.Name)
		assert.LessOrEqual(t, rc.P25, rc.Ratio, rc.Name)
		assert.LessOrEqual(t, rc.Ratio, rc.P75, rc.Name)
	}
	assert.Equal(t, "stdio", cases[1].Transport)
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 198*time.Millisecond, percentile(ds, 0.99))
	assert.Equal(t, 100*time.Millisecond, percentile(ds, 0.5))
	assert.Equal(t, 200*time.Millisecond, percentile(ds, 1))
	assert.Equal(t, time.Duration(0), percentile(nil, 0.99))
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-orderings", "-1"}, {"-nope"}, {"extra"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitUsage, run(args, &stdout, &stderr), "%q", args)
		assert.Empty(t, stdout.String())
		assert.NotEmpty(t, stderr.String())
	}
}
