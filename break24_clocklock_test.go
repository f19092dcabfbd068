package mcpsync

import (
	"testing"
	"time"
)

// TestBreak24ClockUnderLedgerLock: the fence promises to read Options.Now
// before it takes the memory ledger's lock ("The clock is user code: it is
// read before the ledger's lock is taken", CHANGELOG: "The fence reads
// Options.Now before it takes the memory ledger's lock, once per accept").
// With a content guard set, an accept on the memory ledger goes through
// acceptChecked, whose step reads the clock inside memoryLedger.update,
// under the ledger's lock. A clock that touches the engine or the ledger
// there (a metrics clock reading StaleCounts, whose mutex is the ledger's)
// deadlocks every accept. The clock here only asks whether the ledger's
// lock is free each time it is read.
func TestBreak24ClockUnderLedgerLock(t *testing.T) {
	l := NewMemoryLedger(nil).(*memoryLedger)
	underLock := 0
	clock := func() time.Time {
		if l.mu.TryLock() {
			l.mu.Unlock()
		} else {
			underLock++
		}
		return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	}
	e, err := NewEngine(&Options{
		Ledger: l, Now: clock,
		Guard: func(string, []Content) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.BeginSession(SessionInfo{Capabilities: CapabilityReceipt{Resources: true, Subscribe: true}}); err != nil {
		t.Fatal(err)
	}
	const doc = "file:///docs/a.md"
	if _, err := e.Subscribe(doc, "user:alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Activate(doc, ModePush); err != nil {
		t.Fatal(err)
	}
	tk, err := e.IssueTicket(doc, TriggerInitial)
	if err != nil {
		t.Fatal(err)
	}
	underLock = 0
	out, err := e.AcceptResourceVersion(tk, NewReadResult([]Content{{URI: doc, MIMEType: "text/plain", Text: "v1"}}))
	if err != nil || !out.Changed() {
		t.Fatalf("accept: %v %v", out.Decision(), err)
	}
	if underLock > 0 {
		t.Fatalf("Options.Now was called %d time(s) while the memory ledger's lock was held (accept with a content guard)", underLock)
	}
}
