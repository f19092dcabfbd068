package jsontext

import (
	"encoding/json"
	"testing"

	"pgregory.net/rapid"
)

// AsStored is what a JSON round trip gives, for any bytes.
func TestAsStoredIsTheJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOf(rapid.Byte()).Draw(t, "s"))
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := AsStored(s); got != back {
			t.Fatalf("AsStored(%q) = %q, JSON gives %q", s, got, back)
		}
	})
}
