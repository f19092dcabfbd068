package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A URI argument that is no URI is a usage error (exit 2, before anything
// is dialed), as a flag that cannot be parsed is; watch instead connects,
// emits an error event and exits 1, a runtime failure.
func TestBreak19WatchWithAMalformedURIArgumentIsAUsageError(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--json", "--duration", "100ms", "::not a uri")
	assert.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
}
