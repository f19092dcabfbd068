package pgledger

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// subjectText writes no NUL, gives back every subject, and keys two
// subjects apart.
func TestSubjectText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alphabet := rapid.SampledFrom([]string{"a", "\\", "0", "\x00", "é"})
		word := func(label string) string {
			return strings.Join(rapid.SliceOf(alphabet).Draw(t, label), "")
		}
		a, b := word("a"), word("b")
		ka, kb := subjectText(a), subjectText(b)
		if strings.IndexByte(ka, 0) >= 0 {
			t.Fatalf("subjectText(%q) = %q holds NUL", a, ka)
		}
		if got := subjectOfText(ka); got != a {
			t.Fatalf("subjectOfText(subjectText(%q)) = %q", a, got)
		}
		if a != b && ka == kb {
			t.Fatalf("%q and %q share the key %q", a, b, ka)
		}
	})
}
