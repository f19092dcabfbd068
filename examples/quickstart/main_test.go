package main

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"
)

// The program is its own test: it fails when the prompt or the index does
// not reach the server's text after a step, and leaves no goroutine behind.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	err := run(t.Context(), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
