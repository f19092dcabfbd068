package wire

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// The functions here read the parts of a message the wire layer needs
// without decoding it: a message is refused before anything the size of its
// contents is allocated, and one nested beyond every limit costs no stack.
// They walk bytes iteratively and never fail; valid judges validity.
//
// They must see a message as the decoders that run afterwards will, or a
// respelled message passes a limit its decoded form breaks. Member names
// are compared by keyIs: unescaped, and case-folded as encoding/json folds
// them when it decodes into a struct (mcp-go's JSONRPCResponse, its list
// results, our listResult). mcp-go's map lookups (a read's "contents",
// "text", "blob") match exactly, a subset of that. Where a name occurs
// more than once, a decoder keeps one of the values but parses them all,
// so the sizes are summed over every member keyIs accepts; the frame's own
// members (id, method, result, error) may occur only once.

// frame is what the wire layer needs of one message.
type frame struct {
	depth     int    // deepest nesting of arrays and objects
	object    bool   // the message is a JSON object
	id        []byte // raw top-level "id", nil when absent or null
	method    bool   // a top-level "method" is present
	answer    bool   // a top-level "result" or "error" is present
	result    []byte // raw top-level "result"
	duplicate bool   // one of the members above occurs twice
}

func scanFrame(b []byte) frame {
	f := frame{depth: maxDepth(b)}
	i := skipWS(b, 0)
	f.object = i < len(b) && b[i] == '{'
	var seen [4]bool // id, method, result, error
	once := func(k int) {
		f.duplicate = f.duplicate || seen[k]
		seen[k] = true
	}
	fields(b, func(key, val []byte) {
		switch {
		case keyIs(key, "id"):
			once(0)
			if string(val) != "null" {
				f.id = val
			}
		case keyIs(key, "method"):
			once(1)
			f.method = true
		case keyIs(key, "result"):
			once(2)
			f.answer, f.result = true, val
		case keyIs(key, "error"):
			once(3)
			f.answer = true
		}
	})
	return f
}

// keyIs reports whether the raw member name key (unquoted, still escaped)
// is want as encoding/json matches a struct field: unescaped, then compared
// by Unicode simple case folding (bytes.EqualFold), under which "ſ" is "s"
// and the Kelvin sign is "k". want is ASCII.
func keyIs(key []byte, want string) bool {
	// Every rune of want matches one rune of the name, and a rune is at
	// most 12 bytes escaped (a surrogate pair), so a longer name is another.
	if len(key) > 12*len(want) {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return bytes.EqualFold(key, []byte(want))
	}
	var buf [12 * 16]byte
	return bytes.EqualFold(unescape(buf[:0], key), []byte(want))
}

// unescape appends the JSON string body s, unescaped, to dst, as
// encoding/json decodes it: a lone or mismatched surrogate becomes U+FFFD
// and the escape after a mismatched one is decoded on its own.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		i++
		if i >= len(s) {
			return dst
		}
		switch c := s[i]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			if i+4 >= len(s) {
				return dst
			}
			r := rune(hex4(s[i+1 : i+5]))
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					r2 = rune(hex4(s[i+3 : i+7]))
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
	return dst
}

// maxDepth returns the deepest nesting of arrays and objects in b.
func maxDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = strEnd(b, i) - 1
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// strEnd returns the index after the string that starts at b[i] == '"'.
// It looks for quotes and escapes with bytes.IndexByte, so a long string
// costs a fraction of a byte-by-byte walk; each byte is still looked at a
// bounded number of times, however many escapes the string holds.
func strEnd(b []byte, i int) int {
	j := i + 1
	q := -1 // the first '"' at or after j, once known
	for j < len(b) {
		if q < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return len(b)
			}
			q = j + k
		}
		k := bytes.IndexByte(b[j:q], '\\')
		if k < 0 {
			return q + 1
		}
		j += k + 2 // past the escape and the byte it escapes
	}
	return len(b)
}

// valueEnd returns the index after the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			j := strEnd(b, i)
			if depth == 0 {
				return j
			}
			i = j - 1
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case depth == 0 && (c == ',' || isWS(c)):
			return i
		}
	}
	return len(b)
}

// fields calls fn with each member of the object b, keys raw (unquoted but
// not unescaped), values raw. It stops where b stops being an object.
func fields(b []byte, fn func(key, val []byte)) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return
		}
		ks := i
		i = strEnd(b, i)
		key := b[ks+1 : max(ks+1, i-1)]
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return
		}
		vs := skipWS(b, i+1)
		i = valueEnd(b, vs)
		fn(key, b[vs:i])
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i++
	}
}

// elems calls fn with each element of the array b, raw.
func elems(b []byte, fn func(val []byte)) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return
	}
	for i < len(b) {
		vs := i
		i = valueEnd(b, vs)
		if i == vs {
			return
		}
		fn(b[vs:i])
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = skipWS(b, i+1)
	}
}

// strLen returns the decoded UTF-8 length of the JSON string s (quoted).
func strLen(s []byte) int64 {
	if len(s) < 2 || s[0] != '"' {
		return 0
	}
	s = s[1 : len(s)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return int64(len(s)) // the common case, decoded as it stands
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < utf8.RuneSelf {
			if c != '\\' {
				n++
				continue
			}
		} else {
			// encoding/json turns each byte of invalid UTF-8 into U+FFFD,
			// three bytes, so such a byte counts as three.
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				n += 3
			} else {
				n += int64(size)
				i += size - 1
			}
			continue
		}
		if i+1 < len(s) && s[i+1] == 'u' && i+5 < len(s) {
			r := rune(hex4(s[i+2 : i+6]))
			i += 5
			if utf16.IsSurrogate(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if utf16.DecodeRune(r, rune(hex4(s[i+3:i+7]))) != utf8.RuneError {
					n += 4
					i += 6
					continue
				}
			}
			if utf16.IsSurrogate(r) {
				r = utf8.RuneError
			}
			n += int64(utf8.RuneLen(r))
			continue
		}
		n++
		i++
	}
	return n
}

func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= int(c - '0')
		case c >= 'a' && c <= 'f':
			v |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			v |= int(c-'A') + 10
		}
	}
	return v
}

// blobLen returns the decoded length of the base64 JSON string s.
func blobLen(s []byte) int64 {
	n := strLen(s)
	pad := int64(0)
	for i := len(s) - 2; i > 0 && pad < 2 && s[i] == '='; i-- {
		pad++
	}
	return max(n/4*3-pad, 0)
}

// measureRead returns the content items and decoded bytes of a
// resources/read result.
func measureRead(result []byte) (items int, size int64) {
	fields(result, func(key, val []byte) {
		if !keyIs(key, "contents") {
			return
		}
		elems(val, func(item []byte) {
			items++
			fields(item, func(k, v []byte) {
				switch {
				case keyIs(k, "text"):
					size += strLen(v)
				case keyIs(k, "blob"):
					size += blobLen(v)
				}
			})
		})
	})
	return items, size
}

// listKeys are the member of each list result that holds its items.
var listKeys = map[string]string{
	"resources/list":           "resources",
	"resources/templates/list": "resourceTemplates",
	"tools/list":               "tools",
	"prompts/list":             "prompts",
}

// pageItems returns the items of a list result of method, summed over
// every member a decoder may take for the list.
func pageItems(method string, result []byte) int {
	want := listKeys[method]
	n := 0
	fields(result, func(key, val []byte) {
		if keyIs(key, want) {
			elems(val, func([]byte) { n++ })
		}
	})
	return n
}

// checkResult applies the limits on results to the result of method.
func (l Limits) checkResult(faults Faults, method string, result []byte) error {
	if method == "resources/read" && (l.ReadItems > 0 || l.ReadBytes > 0) {
		items, bytes := measureRead(result)
		if l.ReadItems > 0 && items > l.ReadItems {
			return faults.Limit(LimitReadItems, int64(l.ReadItems), int64(items), method)
		}
		if l.ReadBytes > 0 && bytes > l.ReadBytes {
			return faults.Limit(LimitReadBytes, l.ReadBytes, bytes, method)
		}
	}
	if _, ok := listKeys[method]; ok && l.PageItems > 0 {
		if n := pageItems(method, result); n > l.PageItems {
			return faults.Limit(LimitPageItems, int64(l.PageItems), int64(n), method)
		}
	}
	return nil
}
