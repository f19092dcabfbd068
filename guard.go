package mcpsync

import (
	"fmt"
	"mime"
	"strings"
)

// ContentGuard checks the contents of a read before they can become visible.
// A non-nil error quarantines the read: the fence records it (it is the
// newest state known, so older reads stay refused), the outbox tells
// consumers the previous version is no longer current, and nothing of it is
// ever served. The error text goes into the receipt.
//
// A guard runs outside every lock of the engine and may be called
// concurrently; it must not call back into the engine.
type ContentGuard func(uri string, contents []Content) error

// MaxBytes refuses contents whose text and decoded blobs add up to more than n
// bytes.
func MaxBytes(n int64) ContentGuard {
	return func(uri string, contents []Content) error {
		var total int64
		for _, c := range contents {
			if c.Binary {
				total += int64(len(c.Data))
			} else {
				total += int64(len(c.Text))
			}
		}
		if total > n {
			return fmt.Errorf("contents of %s are %d bytes, limit %d", uri, total, n)
		}
		return nil
	}
}

// AllowMIME refuses contents with a MIME type outside types. Types are
// compared without parameters and case-insensitively ("text/plain;
// charset=utf-8" is "text/plain"); a type ending in "/*" allows its whole
// family. An item without a MIME type is refused: nothing vouches for it.
func AllowMIME(types ...string) ContentGuard {
	allowed := make(map[string]bool, len(types))
	for _, t := range types {
		allowed[strings.ToLower(t)] = true
	}
	return func(uri string, contents []Content) error {
		for i, c := range contents {
			mt, _, err := mime.ParseMediaType(c.MIMEType)
			if err != nil {
				return fmt.Errorf("content %d of %s: MIME type %q: %w", i, uri, c.MIMEType, err)
			}
			family, _, _ := strings.Cut(mt, "/")
			if !allowed[mt] && !allowed[family+"/*"] {
				return fmt.Errorf("content %d of %s: MIME type %q not allowed", i, uri, mt)
			}
		}
		return nil
	}
}

// Guards combines guards: the first refusal wins.
func Guards(guards ...ContentGuard) ContentGuard {
	return func(uri string, contents []Content) error {
		for _, g := range guards {
			if err := g(uri, contents); err != nil {
				return err
			}
		}
		return nil
	}
}
