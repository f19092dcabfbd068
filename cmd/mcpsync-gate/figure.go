package main

import (
	"fmt"
	"math"
	"strconv"
)

// figure is one number of the gate with its pass condition.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Target is the pass condition as printed: an operator and a bound
	// ("==0", "<1.2", ">=0.999", "<=1024").
	Target string `json:"target"`
	// Goal is the stricter aim set beside the bound, if any.
	Goal    string `json:"goal,omitempty"`
	GoalMet bool   `json:"goalMet"`
	Pass    bool   `json:"pass"`
	Unit    string `json:"unit,omitempty"`
	// Deterministic says whether the value is reproducible from the seed.
	Deterministic bool   `json:"deterministic"`
	Detail        string `json:"detail,omitempty"`
}

// bound is a pass condition: value op limit.
type bound struct {
	op    string // "==", "<", "<=", ">="
	limit float64
}

func (b bound) holds(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	switch b.op {
	case "==":
		return v == b.limit
	case "<":
		return v < b.limit
	case "<=":
		return v <= b.limit
	case ">=":
		return v >= b.limit
	}
	return false
}

func (b bound) String() string { return b.op + strconv.FormatFloat(b.limit, 'g', -1, 64) }

// judge builds a figure from its value, its pass bound and an optional goal.
func judge(name string, v float64, pass bound, goal *bound, unit string, deterministic bool, detail string) figure {
	f := figure{Name: name, Value: v, Target: pass.String(), Pass: pass.holds(v), Unit: unit,
		Deterministic: deterministic, Detail: detail}
	if goal != nil {
		f.Goal, f.GoalMet = goal.String(), goal.holds(v)
	} else {
		f.GoalMet = f.Pass
	}
	return f
}

// line is the figure as the gate prints it: name value target PASS|FAIL.
func (f figure) line() string {
	verdict := "PASS"
	if !f.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s %s %s", f.Name, formatValue(f.Value), f.Target, verdict)
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}

func orderingFigures(s orderingStats) []figure {
	zero := bound{"==", 0}
	detail := fmt.Sprintf("%d orderings, %d operations, %d deliveries (%d after a close began or the session ended, %d of them not found), %d accepted, %d outbox entries",
		s.Orderings, s.Operations, s.Deliveries, s.DeliveriesAfterClose, s.NotFoundAfterClose, s.Accepted, s.OutboxEntries)
	progress := fmt.Sprintf("%d orderings settled, %d live subscriptions judged: %d stuck, %d silently stale",
		s.Orderings, s.LiveSubscriptions, s.StuckSubscriptions, s.SilentlyStale)
	return []figure{
		judge("orderings_version_regressions", float64(s.VersionRegressions), zero, nil, "count", true, detail),
		judge("orderings_late_tombstones", float64(s.LateTombstones), zero, nil, "count", true, detail),
		judge("orderings_outbox_after_closed", float64(s.OutboxAfterClosed), zero, nil, "count", true, detail),
		// Beyond the gate's list: a result of a closing generation that
		// passed the fence as UNCHANGED writes no outbox entry, so the
		// figure above cannot see it.
		judge("orderings_accepts_after_close", float64(s.AcceptsAfterClose), zero, nil, "count", true, detail),
		// Progress: with the harness quiet after the last fault, every live
		// subscription reaches the server's current content.
		judge("orderings_stuck_subscriptions", float64(s.StuckSubscriptions), zero, nil, "count", true, progress),
		judge("orderings_silently_stale", float64(s.SilentlyStale), zero, nil, "count", true, progress),
	}
}
