package mcpsync

// The clock (EngineOptions.Now) is user code: the fence reads it before it takes
// the memory ledger's lock, never under it ("The clock is user code: it is
// read before the ledger's lock is taken"). A clock that touches the
// engine or the ledger (a metrics clock reading StaleCounts, whose mutex
// is the ledger's) would otherwise deadlock. The clocks here only ask
// whether the ledger's lock is free each time they are read.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcpsync/mcpsync/internal/inplace"
	"github.com/mcpsync/mcpsync/ledger"
)

// memMutex is the lock of l, a memory ledger.
func memMutex(t *testing.T, l ledger.Ledger) *sync.Mutex {
	s, ok := inplace.Get[ledger.Record, ledger.OutboxEntry, ledger.StoredVersion](l)
	if !ok {
		t.Fatal("not a memory ledger")
	}
	return s.Mutex()
}

// With a content guard set, an accept on the memory ledger reads the clock
// before it takes the ledger's lock, as an accept without a guard does.
func TestClockIsReadBeforeTheLedgerLockWithAGuard(t *testing.T) {
	l := ledger.NewMemory(nil)
	mu := memMutex(t, l)
	underLock := 0
	clock := func() time.Time {
		if mu.TryLock() {
			mu.Unlock()
		} else {
			underLock++
		}
		return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	}
	e, err := NewEngine(&EngineOptions{
		Ledger: l, Now: clock,
		Guard: func(string, []Content) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.BeginSession(SessionInfo{Capabilities: ledger.CapabilityReceipt{Resources: true, Subscribe: true}}); err != nil {
		t.Fatal(err)
	}
	const doc = "file:///docs/a.md"
	if _, err := e.Subscribe(doc, "user:alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Activate(doc, ledger.ModePush); err != nil {
		t.Fatal(err)
	}
	tk, err := e.IssueTicket(doc, ledger.TriggerInitial)
	if err != nil {
		t.Fatal(err)
	}
	underLock = 0
	out, err := e.AcceptResourceVersion(tk, NewReadResult([]Content{{URI: doc, MIMEType: "text/plain", Text: "v1"}}))
	if err != nil || !out.Changed() {
		t.Fatalf("accept: %v %v", out.Decision(), err)
	}
	if underLock > 0 {
		t.Fatalf("EngineOptions.Now was called %d time(s) while the memory ledger's lock was held (accept with a content guard)", underLock)
	}
}

// Every kind of write and read of the engine on the memory ledger, with and
// without a guard, reads the clock only while the ledger's lock is free.
func TestClockIsNeverReadUnderTheLedgerLock(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		l := ledger.NewMemory(nil)
		mu := memMutex(t, l)
		underLock := 0
		at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		clock := func() time.Time {
			if mu.TryLock() {
				mu.Unlock()
			} else {
				underLock++
			}
			at = at.Add(time.Millisecond)
			return at
		}
		opts := &EngineOptions{Ledger: l, Now: clock}
		if guarded {
			opts.Guard = func(string, []Content) error { return nil }
		}
		e, err := NewEngine(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.BeginSession(SessionInfo{Capabilities: ledger.CapabilityReceipt{Resources: true, Subscribe: true}}); err != nil {
			t.Fatal(err)
		}
		const doc, alice = "file:///docs/a.md", "user:alice"
		read := func(text string) ReadResult {
			return NewReadResult([]Content{{URI: doc, MIMEType: "text/plain", Text: text}})
		}
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		_, err = e.Subscribe(doc, alice)
		must("subscribe", err)
		_, err = e.Activate(doc, ledger.ModePush)
		must("activate", err)
		tk, err := e.IssueTicket(doc, ledger.TriggerInitial)
		must("issue", err)
		_, err = e.AcceptResourceVersion(tk, read("v1"))
		must("accept", err)
		_, err = e.AcceptResourceVersion(tk, read("v1 again")) // stale
		if err == nil {
			t.Fatal("a spent ticket was accepted twice")
		}
		tk, ok, err := e.Notify(doc)
		must("notify", err)
		if !ok {
			t.Fatal("notify issued no read")
		}
		e.Sending(tk)
		_, err = e.FinishRead(tk, read("v2"))
		must("finish read", err)
		tk, err = e.IssueTicket(doc, ledger.TriggerRevalidate)
		must("issue", err)
		must("abandon", e.AbandonRead(tk))
		_, err = e.Lookup(alice, doc, RequireFresh())
		if err != nil && !errors.Is(err, ErrStale) {
			t.Fatalf("lookup: %v", err)
		}
		must("record derived", e.RecordDerived(ledger.DerivedArtifact{Index: "idx", ArtifactID: "a1", Version: ResourceVersion{URI: doc, Subject: alice}}))
		_, err = e.RevokeSubject("user:mallory")
		must("revoke", err)
		_, err = e.BeginClose(doc)
		must("begin close", err)
		_, err = e.FinishClose(doc, true)
		must("finish close", err)
		if underLock > 0 {
			t.Errorf("guard=%v: EngineOptions.Now was read %d time(s) under the memory ledger's lock", guarded, underLock)
		}
	}
}
