package uri

import (
	"math/rand/v2"
	"testing"
)

// TestAlreadyKeyIsNormalize checks the shortcut of Normalize against the
// whole algorithm: whatever alreadyKey accepts, normalize returns as it is.
// The inputs mix the characters that change a key (upper case, "%", ports,
// userinfo, literals, octets to encode) into key-like strings.
func TestAlreadyKeyIsNormalize(t *testing.T) {
	parts := []string{
		"file", "http", "https", "ws", "test", "urn", "HTTP", "File", ":", "://", ":///", "//",
		"/", "a", "Z", "docs", "example.com", "Example", "h", ":80", ":443", ":", "@", "user@",
		"[::1]", "]", "[", "%", "%41", "%7e", "%2F", "%zz", " ", "\xff", "?", "#", "q=1", "-", ".", "_", "~",
		"文", "\t", "{", "|",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 200_000 {
		s := ""
		for range 1 + rng.IntN(8) {
			s += parts[rng.IntN(len(parts))]
		}
		n := schemeEnd(s)
		if n < 0 || !alreadyKey(s, n) {
			continue
		}
		accepted++
		got, err := normalize(s, n)
		if err != nil || got != s {
			t.Fatalf("alreadyKey(%q), but normalize returns %q, %v", s, got, err)
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d inputs took the shortcut", accepted)
	}
}
