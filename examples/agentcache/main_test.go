package main

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"
)

// The program is its own test: it fails when its end-of-run checks fail.
// Two runs must also print the same thing, or the output is not
// documentation anyone can compare against; and a run leaves no goroutine
// behind once its clients are closed.
func TestRunIsDeterministic(t *testing.T) {
	defer goleak.VerifyNone(t)
	var first, second bytes.Buffer
	if err := run(t.Context(), &first); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), &second); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() {
		t.Errorf("two runs printed different output:\n%s\n---\n%s", first.String(), second.String())
	}
}
