package wire

import (
	"encoding/binary"
	"math/bits"
)

// valid reports whether b is one JSON value, as json.Valid does (nesting
// bounded at encoding/json's 10000 levels, bytes of strings not required to
// be UTF-8), at the speed a message that is mostly string contents allows:
// json.Valid walks each byte through its state machine, a few hundred MB/s,
// where valid skips the plain bytes of a string eight at a time. Every
// message a server sends passes here before mcp-go sees it.
func valid(b []byte) bool {
	var small [64]byte
	stack := small[:0] // open containers, '{' or '['
	i := skipWS(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		ok := true
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxNesting {
				return false
			}
			stack = append(stack, c)
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i, ok = member(b, i); !ok {
					return false
				}
			}
			continue
		case c == '"':
			i, ok = stringEnd(b, i)
		case c == '-' || c >= '0' && c <= '9':
			i, ok = numberEnd(b, i)
		case c == 't':
			i, ok = literalEnd(b, i, "true")
		case c == 'f':
			i, ok = literalEnd(b, i, "false")
		case c == 'n':
			i, ok = literalEnd(b, i, "null")
		default:
			return false
		}
		if !ok {
			return false
		}
		// A value ended at i: close containers, or find the next value.
		for {
			i = skipWS(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipWS(b, i+1)
			if top == '{' {
				if i, ok = member(b, i); !ok {
					return false
				}
			}
			break
		}
	}
}

// maxNesting is encoding/json's bound on nested arrays and objects.
const maxNesting = 10000

// member reads an object member's name and colon at i, and returns where its
// value starts.
func member(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := stringEnd(b, i)
	if !ok {
		return i, false
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipWS(b, i+1), true
}

// Eight bytes, each the byte named, for the word-at-a-time string scan.
const (
	ones   = 0x0101010101010101
	highs  = 0x8080808080808080
	quotes = '"' * ones
	slashs = '\\' * ones
	spaces = 0x20 * ones
)

// stringEnd returns the index after the string starting at b[i] == '"', and
// whether it is a valid JSON string: no control bytes, and only the escapes
// JSON has.
func stringEnd(b []byte, i int) (int, bool) {
	i++
	for {
		// Eight bytes at a time up to the first that is a quote, a
		// backslash or a control byte: the lowest flagged byte of each
		// mask is the first such byte (a borrow only runs upward).
		for i+8 <= len(b) {
			v := binary.LittleEndian.Uint64(b[i:])
			q, s := v^quotes, v^slashs
			m := ((v-spaces)&^v | (q-ones)&^q | (s-ones)&^s) & highs
			if m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return i, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		default:
			i++
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// numberEnd returns the index after the number starting at b[i], and
// whether it is one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

// literalEnd returns the index after lit at b[i], and whether it is there.
func literalEnd(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}
