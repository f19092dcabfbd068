package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// strEndByByte is strEnd as a plain walk, one byte at a time.
func strEndByByte(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// FuzzStringScan: the end of a string is where a byte-by-byte walk finds
// it, and the length measured of a string encoding/json decodes is the
// length it decodes to.
func FuzzStringScan(f *testing.F) {
	for _, seed := range []string{
		`"plain"`, `"esc\"aped\\"tail`, `"\\\\\\"`, `"\u00e9\ud83d\ude00"`, `"a\`, `"` + "\xff\xfe" + `"`,
		`"unterminated`, `""`, `"\"\"\""`, `"caf` + "\u00e9" + `"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := append([]byte{'"'}, data...)
		end := strEnd(b, 0)
		if want := strEndByByte(b, 0); end != want {
			t.Fatalf("strEnd(%q) = %d, a byte-by-byte walk: %d", b, end, want)
		}
		var s string
		if json.Unmarshal(b[:end], &s) == nil {
			if n := strLen(b[:end]); n != int64(len(s)) {
				t.Fatalf("strLen(%q) = %d, encoding/json decodes %d bytes", b[:end], n, len(s))
			}
		}
	})
}

// FuzzIDKey: an id spelled without decoding is spelled as mcp-go decodes
// it.
func FuzzIDKey(f *testing.F) {
	for _, seed := range []string{`1`, `0`, `-0`, `-7`, `007`, `123456789012345`, `1234567890123456`, `9007199254740993`,
		`1.0`, `1e3`, `"abc"`, `"a\"b"`, `"\u0041"`, `""`, "\"\xff\"", `"mcpsync-ping-1"`, `null`, `true`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, ok := appendPlainIDKey(nil, raw)
		if !ok {
			return
		}
		key := string(b)
		var id mcp.RequestId
		if err := json.Unmarshal(raw, &id); err != nil {
			t.Fatalf("appendPlainIDKey(%q) = %q, but mcp-go does not decode it: %v", raw, key, err)
		}
		if want := id.String(); key != want {
			t.Fatalf("appendPlainIDKey(%q) = %q, mcp-go: %q", raw, key, want)
		}
	})
}

// FuzzValid: valid judges every input as json.Valid does.
func FuzzValid(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"a","text":"h\u00e9\ud83d\ude00\n"}]}}`,
		`[1,-0,0.5,1e5,-1E-5,2.0e+3,true,false,null,"",{},[]]`, `01`, `-`, `1.`, `.5`, `1e`, `+1`, `tru`, `nul`,
		` {"a" : [ 1 , 2 ] } `, `{"a":1,}`, `[1,]`, `{"a"}`, `{1:2}`, `"\x"`, `"\u12G4"`, "\"\x1f\"", "\"\xff\xfe\"",
		`"a\"b\\"`, `[[[[[[[[[[]]]]]]]]]]`, `{"a":{"b":{"c":[]}}}`, ``, ` `, `"abcdefghijklmnop\"qrstuvwxyz"`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := valid(data), json.Valid(data); got != want {
			t.Fatalf("valid(%q) = %v, json.Valid: %v", data, got, want)
		}
	})
}
