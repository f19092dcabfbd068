package uri

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The reference below is written independently of Normalize: it splits with
// the regular expression of RFC 3986 Appendix B and compares decoded
// components, where Normalize rewrites the string in place. Its equivalence
// is the one Normalize must implement exactly.
var (
	refURI      = regexp.MustCompile(`(?s)^(([^:/?#]+):)?(//([^/?#]*))?([^?#]*)(\?([^#]*))?(#(.*))?$`)
	refScheme   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	refUserinfo = regexp.MustCompile(`(?s)^(?:(.*)@)?([^@]*)$`)
	refHostPort = regexp.MustCompile(`(?s)^(\[[^\]]*\]|[^:\[\]]*)(:([0-9]*))?$`)
)

// refDecode percent-decodes every octet of a component except the reserved
// characters and "%" itself, which become upper-case "%XX" marks; so in the
// result a "%" always starts a mark, and "/" and "%2F" stay distinct.
func refDecode(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		v := byte(n)
		if strings.IndexByte(":/?#[]@!$&'()*+,;=%", v) >= 0 {
			fmt.Fprintf(&b, "%%%02X", v)
		} else {
			b.WriteByte(v)
		}
		i += 2
	}
	return b.String(), true
}

func isHexDigit(c byte) bool {
	return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0
}

// refLowerHost lower-cases the letters of a decoded host outside its marks,
// and outside the zone of an IPv6 literal.
func refLowerHost(h string) string {
	zone := ""
	if strings.HasPrefix(h, "[") {
		if before, after, found := strings.Cut(h, "%25"); found {
			h, zone = before, "%25"+after
		}
	}
	var b strings.Builder
	for i := 0; i < len(h); i++ {
		if h[i] == '%' {
			b.WriteString(h[i : i+3])
			i += 2
			continue
		}
		// Only ASCII letters: a lone byte of a multi-byte character is not a
		// letter, and strings.ToLower would turn it into U+FFFD.
		if h[i] < utf8.RuneSelf {
			b.WriteRune(unicode.ToLower(rune(h[i])))
		} else {
			b.WriteByte(h[i])
		}
	}
	return b.String() + zone
}

// decodeForCompare returns a comparison form of s that is equal for two
// strings exactly when they name the same resource under the rules Normalize
// documents; ok is false when s is not a URI Normalize should accept.
func decodeForCompare(s string) (form string, ok bool) {
	m := refURI.FindStringSubmatchIndex(s)
	group := func(i int) (string, bool) {
		if m[2*i] < 0 {
			return "", false
		}
		return s[m[2*i]:m[2*i+1]], true
	}
	scheme, has := group(2)
	if !has || !refScheme.MatchString(scheme) {
		return "", false
	}
	scheme = strings.ToLower(scheme)
	parts := []string{scheme}

	rawAuthority, hasAuthority := group(4)
	path, ok := refDecode(s[m[10]:m[11]])
	if !ok {
		return "", false
	}
	if hasAuthority {
		authority, ok := refDecode(rawAuthority)
		if !ok {
			return "", false
		}
		um := refUserinfo.FindStringSubmatchIndex(authority)
		userinfo, hostport := "-", authority[um[4]:um[5]]
		if um[2] >= 0 {
			userinfo = "+" + authority[um[2]:um[3]]
		}
		if hm := refHostPort.FindStringSubmatchIndex(hostport); hm == nil {
			parts = append(parts, "unparsed", authority)
		} else {
			host := refLowerHost(hostport[hm[2]:hm[3]])
			port := ""
			if hm[4] >= 0 {
				port = hostport[hm[6]:hm[7]]
			}
			if d, _ := defaultOf(scheme); port == d {
				port = ""
			}
			parts = append(parts, "authority", userinfo, host, port)
		}
		if _, web := defaultOf(scheme); web && path == "" {
			path = "/"
		}
	}
	parts = append(parts, path)
	for _, i := range []int{7, 9} {
		c, has := group(i)
		if !has {
			parts = append(parts, "absent")
			continue
		}
		d, ok := refDecode(c)
		if !ok {
			return "", false
		}
		parts = append(parts, "present", d)
	}
	return fmt.Sprintf("%q", parts), true
}

// defaultOf returns the default port of the schemes whose empty path is "/".
func defaultOf(scheme string) (string, bool) {
	p, ok := map[string]string{"http": "80", "ws": "80", "https": "443", "wss": "443"}[scheme]
	return p, ok
}

// spellings returns other spellings of s that are likely to share its key or
// to differ from it only in a way that must keep keys apart.
func spellings(s string) []string {
	var enc, dec strings.Builder
	scheme := schemeEnd(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i > scheme && unreserved[c] {
			fmt.Fprintf(&enc, "%%%02x", c)
		} else {
			enc.WriteByte(c)
		}
		if c == '%' && i+2 < len(s) && isHexDigit(s[i+1]) && isHexDigit(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			dec.WriteByte(byte(v))
			i += 2
		} else {
			dec.WriteByte(c)
		}
	}
	return []string{strings.ToUpper(s), strings.ToLower(s), enc.String(), dec.String()}
}

func FuzzNormalize(f *testing.F) {
	seeds := [][2]string{
		{"HTTP://Example.COM:80/a%7eb", "http://example.com/a~b"},
		{"file:///docs/a%20b.md", "file:///docs/a b.md"},
		{"file:///文档.md", "file:///%E6%96%87%E6%A1%A3.md"},
		{"file:///a%2fb", "file:///a%2Fb"},
		{"file:///a%2Fb", "file:///a/b"},
		{"file:///a/b", "file:///A/b"},
		{"test://x?q=1", "test://x?Q=1"},
		{"file:///a/../b", "file:///b"},
		{"http://h:8080/", "http://h/"},
		{"test://User@h/", "test://user@h/"},
		{"test://HOST/x", "test://host/x"},
		{"http://[::1]:80/", "http://[::1]/"},
		{"test://[FE80::1%25Eth0]/x", "test://[fe80::1%25eth0]/x"},
		{"http://h:%38%30", "http://h/"},
		{"test://Host:abc/x", "test://host:abc/x"},
		{"urn:ISBN:1", "URN:isbn:1"},
		{"file:///a\xffb", "file:///a%FFb"},
		{"", "no-scheme"},
		{"file:///a%", "file:///a%zz"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		checkOne(t, a)
		checkOne(t, b)
		checkPair(t, a, b)
		for _, v := range spellings(a) {
			checkOne(t, v)
			checkPair(t, a, v)
		}
	})
}

// checkOne checks Normalize against the reference on a single input.
func checkOne(t *testing.T, s string) {
	t.Helper()
	key, err := Normalize(s)
	form, ok := decodeForCompare(s)
	if (err == nil) != ok {
		t.Fatalf("Normalize(%q) error %v, but the reference accepts it: %v", s, err, ok)
	}
	if err != nil {
		return
	}
	again, err := Normalize(key)
	if err != nil || again != key {
		t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q, %v", s, key, key, again, err)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			t.Fatalf("Normalize(%q) = %q has raw byte %#x at %d", s, key, c, i)
		}
	}
	if keyForm, _ := decodeForCompare(key); keyForm != form {
		t.Fatalf("Normalize(%q) = %q names another resource:\n%s\n%s", s, key, form, keyForm)
	}
}

// checkPair checks that a and b share a key exactly when the reference says
// they name the same resource.
func checkPair(t *testing.T, a, b string) {
	t.Helper()
	ka, errA := Normalize(a)
	kb, errB := Normalize(b)
	if errA != nil || errB != nil {
		return
	}
	fa, _ := decodeForCompare(a)
	fb, _ := decodeForCompare(b)
	if (ka == kb) != (fa == fb) {
		t.Fatalf("keys %q and %q of %q and %q disagree with the reference:\n%s\n%s", ka, kb, a, b, fa, fb)
	}
}
