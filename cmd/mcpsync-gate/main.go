// Command mcpsync-gate is the release gate of mcpsync: it runs seeded,
// reproducible scenarios against the library, prints one line per figure as
//
//	name value target PASS|FAIL
//
// (target is the pass condition, such as "==0" or "<1.2"), optionally
// writes the same figures with their details as JSON, and exits 1 if any
// figure fails (2 on a usage error or a scenario that could not run).
//
//	mcpsync-gate [-short] [-seed S] [-orderings N] [-scale X] [-json FILE]
//
// The scenarios, each described where it is defined:
//
//   - catalogs (catalogs.go): scans of listings that change between pages
//     without list_changed, through mcpsynctest; no catalog is usable
//     without the reconciliation its status claims, and no catalog short
//     of SNAPSHOT_PROVEN serves a completeness task.
//   - orderings (orderings.go): random interleavings of notifications,
//     reads, closes and sessions against the Engine, judged by an
//     independent record of what the harness did; after the last fault of
//     each, the harness settles it as a Client would and counts the live
//     subscriptions that are stuck or silently stale.
//   - amplification and convergence (freshness.go): a Client over
//     mcpsynctest under duplicated, dropped and reordered notifications.
//   - deletions (deletions.go): a Client that keeps scanning a server
//     without the snapshot extension; deletions are corroborated within two
//     scan intervals, and a resource created again is never tombstoned.
//   - healing (healing.go): a Client whose server dies again and again;
//     how long until every subscription is validated again, and whether
//     any lookup served a copy past its bound meanwhile.
//   - revocation (revocation.go) and memory (memory.go): the Engine alone.
//   - reads (reads.go, not in -short): a Client's fenced read beside
//     mcp-go's own, interleaved, in process and over stdio.
//
// Scenarios that wait on time run in real time with every nominal interval
// divided by -scale (default 20: the 60 s convergence window lasts 3 s of
// wall time); this package's tests also run them in a testing/synctest
// bubble at their nominal intervals. Every random choice comes from the
// seed. The orderings and catalog figures are reproducible from it; the
// amplification, convergence, revocation and memory figures depend on
// timing or on the runtime and vary a little from run to run (each
// figure's JSON says which).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if size := os.Getenv(stdioServerEnv); size != "" {
		os.Exit(serveStdio(size))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitPass  = 0
	exitFail  = 1
	exitUsage = 2
)

// config is what the flags select.
type config struct {
	seed      uint64
	orderings int
	scale     float64
	jsonPath  string
	short     bool

	// Sizes of the scenarios.
	ampChanges    int
	convResources int
	catalogScans  int
	revSubjects   int
	revURIs       int
	memSubs       int
	healRestarts  int
	healURIs      int
	delResources  int
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("mcpsync-gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.Uint64Var(&c.seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&c.orderings, "orderings", 0, "random orderings of notifications, reads and closes (default 100000, 5000 with -short)")
	fs.Float64Var(&c.scale, "scale", 0, "real-time compression of the time-based scenarios (default 20)")
	fs.StringVar(&c.jsonPath, "json", "", "also write the figures as JSON to `FILE`")
	fs.BoolVar(&c.short, "short", false, "smaller scenarios, for make test")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.orderings < 0 || c.scale < 0 {
		return c, errors.New("-orderings and -scale must not be negative")
	}
	c.scale = cmp.Or(c.scale, 20)
	if c.short {
		c.orderings = cmp.Or(c.orderings, 5_000)
		c.ampChanges, c.convResources, c.catalogScans = 30, 100, 40
		c.revSubjects, c.revURIs, c.memSubs = 50, 500, 10_000
		c.healRestarts, c.healURIs = 20, 10
		c.delResources = 12
	} else {
		c.orderings = cmp.Or(c.orderings, 100_000)
		c.ampChanges, c.convResources, c.catalogScans = 200, 1_000, 200
		c.revSubjects, c.revURIs, c.memSubs = 200, 5_000, 100_000
		c.healRestarts, c.healURIs = 100, 50
		c.delResources = 60
	}
	return c, nil
}

// report is what -json writes.
type report struct {
	Seed      uint64            `json:"seed"`
	Short     bool              `json:"short"`
	Orderings int               `json:"orderings"`
	Scale     float64           `json:"scale"`
	Pass      bool              `json:"pass"`
	Figures   []figure          `json:"figures"`
	Durations map[string]string `json:"durations"`
	Stats     map[string]any    `json:"stats"`
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "mcpsync-gate:", err)
		}
		return exitUsage
	}
	rep := report{Seed: cfg.seed, Short: cfg.short, Orderings: cfg.orderings, Scale: cfg.scale,
		Durations: map[string]string{}, Stats: map[string]any{}}
	p := pace{scale: cfg.scale}
	ctx := context.Background()

	// Memory first, while the heap holds nothing else of the gate's.
	steps := []struct {
		name string
		run  func() ([]figure, any, error)
	}{
		{"memory", func() ([]figure, any, error) {
			m, err := measureMemory(cfg.memSubs)
			return []figure{memoryFigure(m)}, m, err
		}},
		{"reads", func() ([]figure, any, error) {
			if cfg.short {
				return nil, nil, nil // timing figures: the long form only
			}
			s, err := runReads(ctx, readPlans)
			return readFigures(s), s, err
		}},
		{"catalogs", func() ([]figure, any, error) {
			s, err := runCatalogs(ctx, p, cfg.seed, cfg.catalogScans)
			return catalogFigures(s), s, err
		}},
		{"orderings", func() ([]figure, any, error) {
			s, err := runOrderings(cfg.seed, cfg.orderings)
			return orderingFigures(s), s, err
		}},
		{"amplification", func() ([]figure, any, error) {
			s, err := runAmplification(ctx, p, cfg.seed, cfg.ampChanges)
			return []figure{amplificationFigure(s)}, s, err
		}},
		{"convergence", func() ([]figure, any, error) {
			s, err := runConvergence(ctx, p, cfg.seed, cfg.convResources)
			return []figure{convergenceFigure(s)}, s, err
		}},
		{"deletions", func() ([]figure, any, error) {
			s, err := runDeletions(ctx, p, cfg.seed, cfg.delResources)
			return deletionFigures(s), s, err
		}},
		{"revocation", func() ([]figure, any, error) {
			s, err := runRevocation(cfg.seed, cfg.revSubjects, cfg.revURIs)
			return []figure{revocationFigure(s)}, s, err
		}},
		{"healing", func() ([]figure, any, error) {
			s, err := runHealing(ctx, p, cfg.seed, cfg.healRestarts, cfg.healURIs)
			return healingFigures(s), s, err
		}},
	}
	begin := time.Now()
	byStep := map[string][]figure{}
	for _, st := range steps {
		start := time.Now()
		figs, stats, err := st.run()
		rep.Durations[st.name] = time.Since(start).Round(time.Millisecond).String()
		rep.Stats[st.name] = stats
		if err != nil {
			fmt.Fprintf(stderr, "mcpsync-gate: %s: %v\n", st.name, err)
			return exitUsage
		}
		byStep[st.name] = figs
	}
	rep.Durations["total"] = time.Since(begin).Round(time.Millisecond).String()
	// Printed in a fixed order, catalogs first.
	failed := false
	for _, name := range []string{"catalogs", "orderings", "amplification", "convergence", "deletions", "healing", "revocation", "memory", "reads"} {
		for _, f := range byStep[name] {
			fmt.Fprintln(stdout, f.line())
			rep.Figures = append(rep.Figures, f)
			failed = failed || !f.Pass
		}
	}
	rep.Pass = !failed
	if cfg.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(cfg.jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "mcpsync-gate:", err)
			return exitUsage
		}
	}
	if failed {
		return exitFail
	}
	return exitPass
}
