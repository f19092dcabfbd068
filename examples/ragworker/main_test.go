package main

import (
	"bytes"
	"os"
	"testing"
)

// TestMain runs the worker when the run under test starts it: the worker
// process is this test binary again.
func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(configEnv); ok {
		os.Exit(workerMain(raw))
	}
	os.Exit(m.Run())
}

// The program is its own test: it fails when its end-of-run checks fail.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}
