package mcpsync

import (
	"errors"
	"testing"
)

// TestTransitionIndexIsTheTable checks that the array move looks steps up
// in says what transitionTable says, for every event and state, and that
// an event or state the array does not know still gets the table's answer.
func TestTransitionIndexIsTheTable(t *testing.T) {
	for _, event := range append(eventNames[:], "no such event") {
		for _, from := range append(stateNames[:], "NO_SUCH_STATE") {
			want, wantOK := transitionTable[event][from]
			got, ok := nextState(event, from)
			if got != want || ok != wantOK {
				t.Errorf("%s from %s: got %q %v, the table says %q %v", event, from, got, ok, want, wantOK)
			}
		}
	}
	for event := range transitionTable {
		if eventIndex(event) < 0 {
			t.Errorf("event %q of the table has no index", event)
		}
		for from, to := range transitionTable[event] {
			if stateIndex(from) < 0 || stateIndex(to) < 0 {
				t.Errorf("%s: state %q or %q has no index", event, from, to)
			}
		}
	}
	for i, name := range eventNames {
		if eventIndex(name) != i {
			t.Errorf("eventIndex(%q) = %d, want %d", name, eventIndex(name), i)
		}
	}
	for i, name := range stateNames {
		if stateIndex(name) != i {
			t.Errorf("stateIndex(%q) = %d, want %d", name, stateIndex(name), i)
		}
	}
}

// TestReasonIndex checks the index the audit counts reasons by and the
// sentinel each reason is refused with.
func TestReasonIndex(t *testing.T) {
	for i, reason := range staleReasons {
		if reasonIndex(reason) != i {
			t.Errorf("reasonIndex(%q) = %d, want %d", reason, reasonIndex(reason), i)
		}
		var re *RefusalError
		if err := refusal(reason); !errors.As(err, &re) || re.Reason != reason || !errors.Is(err, ErrRefused) {
			t.Errorf("refusal(%q) = %v", reason, err)
		}
	}
	if reasonIndex("SOMETHING_ELSE") >= 0 {
		t.Error("an unknown reason has an index")
	}
	for _, sentinel := range []*RefusalError{
		ErrStaleOrdinal, ErrStaleAfterClose, ErrGenerationMismatch, ErrUnknownRequest,
		ErrURIMismatch, ErrNotActive, ErrSubjectRevoked, ErrEmptyContents,
		ErrInvalidContent, ErrReconciliationRequired,
	} {
		if refusal(sentinel.Reason) != sentinel {
			t.Errorf("refusal(%q) is not its sentinel", sentinel.Reason)
		}
	}
	e := &Engine{}
	e.audit.init(4, nil)
	for _, reason := range []StaleReason{ReasonStaleOrdinal, "SOMETHING_ELSE", ReasonStaleOrdinal, ReasonNotSubscribed} {
		e.audit.record(&StaleReceipt{Reason: reason})
	}
	got := e.StaleCounts()
	want := map[StaleReason]uint64{ReasonStaleOrdinal: 2, "SOMETHING_ELSE": 1, ReasonNotSubscribed: 1}
	if len(got) != len(want) {
		t.Fatalf("StaleCounts() = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("StaleCounts() = %v, want %v", got, want)
		}
	}
}
