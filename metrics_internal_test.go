package mcpsync

import "testing"

import "github.com/mcpsync/mcpsync/ledger"

// Counting a read allocates nothing once its trigger and outcome were
// counted before: every read is counted.
func TestCountingAReadAllocatesNothing(t *testing.T) {
	m, err := newMetrics(&Client{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.read(ledger.TriggerRevalidate, string(DecisionAccepted))
	if n := testing.AllocsPerRun(1000, func() { m.read(ledger.TriggerRevalidate, string(DecisionAccepted)) }); n > 0 {
		t.Errorf("%v allocations, want none", n)
	}
}
