package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A pinned --protocol the server does not accept is an error (exit 1),
// never a run in another era: scan, read and watch stop before printing
// anything of the session. The same server pinned to a revision it
// speaks, or with auto, serves them.
func TestPinnedProtocolTheServerDidNotAcceptIsAnError(t *testing.T) {
	f := newFixture(t, &mcpsynctest.ServerOptions{LegacyOnly: true})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"scan", []string{"scan", "--url", f.url, "--json"}},
		{"read", []string{"read", "--url", f.url, "--json", "file:///docs/a.md"}},
		{"watch", []string{"watch", "--url", f.url, "--json", "--duration", "200ms", "file:///docs/a.md"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := dispatch(t.Context(), append(tc.args, "--protocol", "2026-07-28"), &stdout, &stderr)
			var perr *protocolError
			require.True(t, errors.As(err, &perr), "error %v", err)
			assert.Equal(t, "2026-07-28", perr.pinned)
			assert.Equal(t, "2025-11-25", perr.negotiated)
			assert.Empty(t, stdout.String(), "nothing of the session is printed")

			r := runCmd(t.Context(), append(tc.args, "--protocol", "2026-07-28")...)
			assert.Equal(t, exitFailure, r.code, r)

			for _, protocol := range []string{"2025-11-25", "auto"} {
				r := runCmd(t.Context(), append(tc.args, "--protocol", protocol)...)
				assert.Equal(t, exitOK, r.code, r)
			}
		})
	}
}
