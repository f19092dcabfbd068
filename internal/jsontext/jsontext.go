// Package jsontext says what a string becomes in the JSON a durable ledger
// stores.
package jsontext

import (
	"strings"
	"unicode/utf8"
)

// AsStored returns s as encoding/json writes it and reads it back: each
// byte that is not part of valid UTF-8 replaced with U+FFFD. A ledger
// that indexes a record files it under what the record will be read back
// with.
func AsStored(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
