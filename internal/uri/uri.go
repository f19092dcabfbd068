// Package uri turns resource URIs into map keys, so that two spellings of one
// resource share a key and two different resources never do.
package uri

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is returned for a string that is not a URI that can be normalized.
var ErrInvalid = errors.New("uri: not a normalizable URI")

// Normalize returns the key of a resource URI: the URI rewritten with only the
// syntax-based normalizations of RFC 3986 section 6.2.2 and the scheme-based
// ones of section 6.2.3 that cannot merge two different resources, plus the
// IRI-to-URI mapping of RFC 3987 section 3.1. The rules are:
//
//   - A scheme (ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":") is required and
//     is lower-cased; schemes are case-insensitive (RFC 3986 section 3.1). A
//     string without one, including the empty string, is ErrInvalid, because a
//     relative reference names no resource on its own.
//   - When there is an authority ("scheme://"), its host is lower-cased, both
//     reg-name and IP literal, because hosts are case-insensitive (RFC 3986
//     section 3.2.2). The zone of an IPv6 literal (after "%25") keeps its
//     case, since interface names can be case-sensitive. Userinfo keeps its
//     case: user names and passwords can be case-sensitive.
//   - An empty port ("host:") is removed, and so is the default port of http
//     and ws (80) and of https and wss (443) (RFC 3986 sections 3.2.3 and
//     6.2.3). For these four schemes an empty path becomes "/", which they
//     define as the same resource. A port with leading zeros is left alone.
//   - Hex digits of percent-encodings are upper-cased (section 6.2.2.1), and a
//     percent-encoded unreserved character (ALPHA / DIGIT / "-" / "." / "_" /
//     "~") is decoded (section 6.2.2.2). Every other percent-encoded octet,
//     including reserved characters such as %2F, %3F, %23 and %25 and
//     non-ASCII octets, stays encoded: decoding it could change how the URI
//     splits into components and segments. A "%" not followed by two hex
//     digits is ErrInvalid.
//   - Octets that may not appear raw in a URI (space, control characters,
//     non-ASCII bytes and `"<>\^`{|}`) are percent-encoded with upper-case hex,
//     which for UTF-8 text is the IRI-to-URI mapping of RFC 3987 section 3.1.
//     This is the one mapping beyond RFC 3986 section 6: MCP servers send raw
//     non-ASCII and spaced file names as well as their encoded spellings, and
//     both must meet in one key. Bytes that are not valid UTF-8 are encoded
//     octet by octet rather than rejected, so that any name a server can send
//     still has a key.
//
// A component the generic syntax cannot parse (an authority whose port is not
// digits, or whose host has a stray "[" or "]") is left with its case and
// ports as they are: nothing proves its host is case-insensitive.
//
// Not done, because each can merge two different resources or depends on the
// server: removal of dot segments ("/a/../b" can name a different file than
// "/b" through symbolic links, and servers resolve paths themselves), decoding
// of reserved characters ("/a%2Fb" is one segment, "/a/b" two), reordering of
// query parameters, adding or removing a trailing slash, changing the case of
// path, query or fragment, and lower-casing userinfo. Scheme-specific rules
// (such as case-insensitive URN namespaces) are not applied either.
//
// An input that is already normalized is returned as is, without allocating.
func Normalize(raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("%w: empty string", ErrInvalid)
	}
	n := schemeEnd(raw)
	if n < 0 {
		return "", fmt.Errorf("%w: no scheme in %q", ErrInvalid, raw)
	}
	if alreadyKey(raw, n) {
		return raw, nil
	}
	return normalize(raw, n)
}

// normalize is Normalize of raw, whose scheme ends at index n, without the
// shortcut for a key already normalized.
func normalize(raw string, n int) (string, error) {
	if plainOctets(raw) {
		// Nothing for the octet pass to do (most keys, and every key
		// already normalized that has no percent-encoding).
		return normalizeComponents(raw, n), nil
	}
	// The octet pass never adds or removes a delimiter (it decodes only
	// unreserved characters and encodes only characters that are not
	// delimiters), so components found afterwards are the ones of raw.
	s, err := normalizeOctets(raw)
	if err != nil {
		return "", err
	}
	return normalizeComponents(s, n), nil
}

// alreadyKey reports, in one pass, that Normalize returns s, whose scheme
// ends at index n, as it is, for the common form of a key: a lower-case
// scheme, no octet to encode or decode, and either no authority or one that
// is a lower-case host name (no userinfo, no port) followed by a path.
func alreadyKey(s string, n int) bool {
	for i := 0; i < n; i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return false
		}
	}
	i := n + 1
	if len(s) >= i+2 && s[i] == '/' && s[i+1] == '/' {
		for i += 2; i < len(s) && s[i] != '/'; i++ {
			if !hostOctet[s[i]] {
				return false // "?", "#", a port, userinfo, a literal, upper case
			}
		}
		if i == len(s) {
			return false // no path: a web scheme gets "/"
		}
	}
	return plainOctets(s[i:])
}

// hostOctet holds the octets of a host name already normalized that
// alreadyKey accepts.
var hostOctet = byteSet("abcdefghijklmnopqrstuvwxyz0123456789-._~")

// plainOctets reports whether normalizeOctets leaves s as it is because s
// has no "%" and nothing to encode.
func plainOctets(s string) bool {
	for i := 0; i < len(s); i++ {
		if octetWork[s[i]] {
			return false
		}
	}
	return true
}

// schemeEnd returns the index of the colon that ends the scheme of s, or -1
// if s does not start with a scheme.
func schemeEnd(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return i
		default:
			return -1
		}
	}
	return -1
}

const upperHex = "0123456789ABCDEF"

var (
	unreserved = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
	mustEncode = func() [256]bool {
		t := byteSet(" \"<>\\^`{|}\x7f")
		for c := 0; c < 0x20; c++ {
			t[c] = true
		}
		for c := 0x80; c < 0x100; c++ {
			t[c] = true
		}
		return t
	}()
)

// octetWork holds the octets normalizeOctets may change: "%" and those it
// encodes.
var octetWork = func() [256]bool {
	t := mustEncode
	t['%'] = true
	return t
}()

func byteSet(chars string) (t [256]bool) {
	for i := 0; i < len(chars); i++ {
		t[chars[i]] = true
	}
	return t
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// normalizeOctets applies the percent-encoding rules to all of s. It returns s
// itself when nothing changes.
func normalizeOctets(s string) (string, error) {
	var b strings.Builder
	started := false // b is only filled once something changes
	start := func(i int) {
		if !started {
			started = true
			b.Grow(len(s) + 16)
			b.WriteString(s[:i])
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '%':
			var hi, lo byte
			ok := i+2 < len(s)
			if ok {
				var okHi, okLo bool
				hi, okHi = unhex(s[i+1])
				lo, okLo = unhex(s[i+2])
				ok = okHi && okLo
			}
			if !ok {
				return "", fmt.Errorf("%w: %q at offset %d is not followed by two hex digits", ErrInvalid, '%', i)
			}
			v := hi<<4 | lo
			switch {
			case unreserved[v]:
				start(i)
				b.WriteByte(v)
			case s[i+1] != upperHex[hi] || s[i+2] != upperHex[lo]:
				start(i)
				b.WriteByte('%')
				b.WriteByte(upperHex[hi])
				b.WriteByte(upperHex[lo])
			case started:
				b.WriteString(s[i : i+3])
			}
			i += 3
		case mustEncode[c]:
			start(i)
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0xF])
			i++
		default:
			if started {
				b.WriteByte(c)
			}
			i++
		}
	}
	if !started {
		return s, nil
	}
	return b.String(), nil
}

// normalizeComponents applies the scheme, host and port rules to s, whose
// scheme ends at the colon at index n. It returns s itself when nothing
// changes.
func normalizeComponents(s string, n int) string {
	scheme := s[:n]
	schemeChanged := hasUpper(scheme)
	rest := s[n+1:]
	if !strings.HasPrefix(rest, "//") {
		if !schemeChanged {
			return s
		}
		return strings.ToLower(scheme) + s[n:]
	}
	rest = rest[2:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]

	userinfo, host, port, hasPort, ok := splitAuthority(authority)
	hostChanged, dropPort := false, false
	if ok {
		hostChanged = hostNeedsLower(host)
		dropPort = hasPort && (port == "" || port == defaultPort(scheme))
	}
	addSlash := (tail == "" || tail[0] != '/') && isWebScheme(scheme)
	if !schemeChanged && !hostChanged && !dropPort && !addSlash {
		return s
	}

	var b strings.Builder
	b.Grow(len(s) + 1)
	for i := 0; i < len(scheme); i++ {
		b.WriteByte(lower(scheme[i]))
	}
	b.WriteString("://")
	if !ok {
		b.WriteString(authority)
	} else {
		b.WriteString(userinfo)
		writeLowerHost(&b, host)
		if hasPort && !dropPort {
			b.WriteByte(':')
			b.WriteString(port)
		}
	}
	if addSlash {
		b.WriteByte('/')
	}
	b.WriteString(tail)
	return b.String()
}

// splitAuthority splits an authority into userinfo (with its "@"), host and
// port (without its ":"). ok is false when the authority does not follow the
// generic syntax closely enough to tell the host from the rest.
func splitAuthority(a string) (userinfo, host, port string, hasPort, ok bool) {
	// "@" may not appear raw in userinfo or host, so the last one is the
	// separator whatever else the string holds.
	if at := strings.LastIndexByte(a, '@'); at >= 0 {
		userinfo, a = a[:at+1], a[at+1:]
	}
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", "", "", false, false
		}
		host, a = a[:end+1], a[end+1:]
		if a != "" {
			if a[0] != ':' {
				return "", "", "", false, false
			}
			port, hasPort = a[1:], true
		}
	} else {
		host = a
		if colon := strings.IndexByte(a, ':'); colon >= 0 {
			host, port, hasPort = a[:colon], a[colon+1:], true
		}
		if strings.ContainsAny(host, "[]") {
			return "", "", "", false, false
		}
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", "", "", false, false
		}
	}
	return userinfo, host, port, hasPort, true
}

// defaultPort returns the port that RFC 3986 section 6.2.3 lets us drop for
// scheme, or "" (which never equals a present port worth keeping).
func defaultPort(scheme string) string {
	switch {
	case strings.EqualFold(scheme, "http"), strings.EqualFold(scheme, "ws"):
		return "80"
	case strings.EqualFold(scheme, "https"), strings.EqualFold(scheme, "wss"):
		return "443"
	}
	return ""
}

// isWebScheme reports whether scheme defines an empty path as "/".
func isWebScheme(scheme string) bool {
	return defaultPort(scheme) != ""
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// hostLowerEnd returns the part of host that lower-casing applies to: all of
// it, except the zone of an IPv6 literal.
func hostLowerEnd(host string) int {
	if strings.HasPrefix(host, "[") {
		if z := strings.Index(host, "%25"); z >= 0 {
			return z
		}
	}
	return len(host)
}

// hostNeedsLower reports whether host has an upper-case letter outside its
// percent-encodings, whose hex digits stay upper-case.
func hostNeedsLower(host string) bool {
	end := hostLowerEnd(host)
	for i := 0; i < end; i++ {
		switch c := host[i]; {
		case c == '%':
			i += 2
		case 'A' <= c && c <= 'Z':
			return true
		}
	}
	return false
}

func writeLowerHost(b *strings.Builder, host string) {
	end := hostLowerEnd(host)
	for i := 0; i < end; i++ {
		if host[i] == '%' {
			b.WriteString(host[i : i+3])
			i += 2
			continue
		}
		b.WriteByte(lower(host[i]))
	}
	b.WriteString(host[end:])
}
