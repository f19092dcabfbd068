package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two spellings of one resource are one key (README: "Two spellings of one
// resource share one fence"). watch given both subscribes once, yet reports
// two subscriptions and counts the URI twice in its summary.
func TestBreak19WatchCountsTwoSpellingsOfOneURITwice(t *testing.T) {
	f := newFixture(t, nil)
	r := runCmd(t.Context(), "watch", "--url", f.url, "--json", "--duration", "200ms",
		"file:///docs/a.md", "FILE:///docs/%61.md")
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.Len(t, ofKind(evs, "subscribed"), 1, "one resource, one subscription")
	assert.EqualValues(t, 1, sum["subscriptions"], "one resource, one subscription")
}
