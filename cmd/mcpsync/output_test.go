package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// atPattern is RFC 3339 in UTC with all nine digits of the nanoseconds.
var atPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`)

// Every JSON line of scan, read and watch carries "at": when it was
// written, RFC 3339 with nanoseconds in UTC, never earlier than the line
// before it.
func TestEveryJSONLineHasItsTimeInUTC(t *testing.T) {
	f := newFixture(t, nil)
	for name, args := range map[string][]string{
		"scan":  {"scan", "--url", f.url, "--json"},
		"read":  {"read", "--url", f.url, "--json", "file:///docs/a.md"},
		"watch": {"watch", "--url", f.url, "--json", "--all", "--duration", "300ms"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t.Context(), args...)
			require.Equal(t, exitOK, r.code, r)
			evs := events(t, r.stdout)
			require.NotEmpty(t, evs)
			var last time.Time
			for _, ev := range evs {
				at, ok := ev["at"].(string)
				require.True(t, ok, "no at in %v", ev)
				assert.Regexp(t, atPattern, at)
				ts, err := time.Parse(time.RFC3339Nano, at)
				require.NoError(t, err)
				assert.False(t, ts.Before(last), "%s before the line above (%s)", ts, last)
				last = ts
			}
		})
	}
}

// --events selects the kinds of event watch prints, in JSON and text
// alike. By default JSON has every kind and text leaves the state
// transitions out.
func TestWatchEventsSelectsKinds(t *testing.T) {
	f := newFixture(t, nil)
	watch := func(extra ...string) result {
		r := runCmd(t.Context(), append([]string{"watch", "--url", f.url, "--all", "--duration", "300ms"}, extra...)...)
		require.Equal(t, exitOK, r.code, r)
		return r
	}
	kinds := func(r result) map[string]int {
		n := map[string]int{}
		for _, ev := range events(t, r.stdout) {
			n[ev["event"].(string)]++
		}
		return n
	}

	all := kinds(watch("--json"))
	for _, k := range []string{"session", "scan", "subscribed", "state", "version", "change", "summary"} {
		assert.Positive(t, all[k], "JSON has %s events by default", k)
	}

	some := kinds(watch("--json", "--events", "change,delete,error"))
	assert.Equal(t, 3, some["change"], "one per first version")
	for k := range some {
		assert.Contains(t, []string{"change", "delete", "error"}, k)
	}

	text := watch().stdout
	assert.Contains(t, text, "\nversion ")
	assert.NotContains(t, text, "\nstate ", "text leaves state transitions out by default")
	text = watch("--events", "state,summary").stdout
	assert.Contains(t, text, "\nstate ")
	assert.NotContains(t, text, "\nversion ")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	assert.True(t, strings.HasPrefix(lines[0], "state "), lines[0])
}
