package uri

import (
	"errors"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"already normal", "file:///docs/readme.md", "file:///docs/readme.md"},
		{"scheme lower-cased", "FILE:///docs/readme.md", "file:///docs/readme.md"},
		{"scheme with digits plus dash dot", "X-Git+SSH.1://h/p", "x-git+ssh.1://h/p"},
		{"scheme without authority", "URN:ISBN:0451450523", "urn:ISBN:0451450523"},
		{"reg-name host lower-cased", "test://Example.COM/Path", "test://example.com/Path"},
		{"IPv6 host lower-cased", "test://[FE80::AB]/x", "test://[fe80::ab]/x"},
		{"IPv6 zone keeps its case", "test://[FE80::1%25Eth0]/x", "test://[fe80::1%25Eth0]/x"},
		{"IPvFuture host lower-cased", "test://[V1.AB]/x", "test://[v1.ab]/x"},
		{"userinfo keeps its case", "test://User:PW@Host/x", "test://User:PW@host/x"},
		{"last at sign ends userinfo", "test://a@B@C/x", "test://a@B@c/x"},
		{"empty port removed", "test://host:/x", "test://host/x"},
		{"empty port removed from IPv6", "test://[::1]:/x", "test://[::1]/x"},
		{"http default port removed", "http://h:80/x", "http://h/x"},
		{"https default port removed", "https://h:443/x", "https://h/x"},
		{"ws default port removed", "ws://h:80/x", "ws://h/x"},
		{"wss default port removed", "wss://h:443/x", "wss://h/x"},
		{"IPv6 with default port", "http://[::1]:80/", "http://[::1]/"},
		{"upper-case scheme default port", "HTTP://h:80/x", "http://h/x"},
		{"other port kept", "http://h:8080/x", "http://h:8080/x"},
		{"https port 80 kept", "https://h:80/x", "https://h:80/x"},
		{"port with leading zero kept", "http://h:080/x", "http://h:080/x"},
		{"no default port for other schemes", "test://h:80/x", "test://h:80/x"},
		{"http empty path becomes slash", "http://h", "http://h/"},
		{"http empty path before query", "http://h?q", "http://h/?q"},
		{"https empty path before fragment", "https://h#f", "https://h/#f"},
		{"ws empty path with port", "ws://h:80", "ws://h/"},
		{"other scheme empty path kept", "test://h", "test://h"},
		{"empty authority", "file:///a", "file:///a"},
		{"unparsable port keeps host case", "test://Host:abc/x", "test://Host:abc/x"},
		{"stray bracket keeps host case", "test://A]b/x", "test://A]b/x"},
		{"unclosed IPv6 keeps host case", "test://[A::1/x", "test://[A::1/x"},
		{"text after IPv6 keeps host case", "test://[A::1]B/x", "test://[A::1]B/x"},
		{"lower-case hex upper-cased", "file:///a%2fb", "file:///a%2Fb"},
		{"mixed-case hex upper-cased", "file:///a%c3%A9", "file:///a%C3%A9"},
		{"unreserved letter decoded", "file:///%41%62", "file:///Ab"},
		{"unreserved digit decoded", "file:///%31", "file:///1"},
		{"unreserved marks decoded", "file:///%2D%2e%5F%7e", "file:///-._~"},
		{"slash stays encoded", "file:///a%2Fb", "file:///a%2Fb"},
		{"question mark stays encoded", "file:///a%3Fb", "file:///a%3Fb"},
		{"hash stays encoded", "file:///a%23b", "file:///a%23b"},
		{"percent stays encoded", "file:///a%25b", "file:///a%25b"},
		{"sub-delims stay encoded", "file:///%21%24%26%27%28%29%2A%2B%2C%3B%3D", "file:///%21%24%26%27%28%29%2A%2B%2C%3B%3D"},
		{"encoded space stays encoded", "file:///a%20b", "file:///a%20b"},
		{"encoded non-ASCII stays encoded", "file:///%E6%96%87", "file:///%E6%96%87"},
		{"encoded host letters decoded and lower-cased", "test://%41%42.com/", "test://ab.com/"},
		{"encoded host octets keep upper hex", "test://%c3%a9.COM/", "test://%C3%A9.com/"},
		{"encoded port digits decoded then dropped", "http://h:%38%30/", "http://h/"},
		{"raw space encoded", "file:///docs/a b.md", "file:///docs/a%20b.md"},
		{"raw control encoded", "file:///a\tb\x00c\x7f", "file:///a%09b%00c%7F"},
		{"raw disallowed ASCII encoded", "file:///\"<>\\^`{|}", "file:///%22%3C%3E%5C%5E%60%7B%7C%7D"},
		{"raw non-ASCII encoded as UTF-8", "file:///文档.md", "file:///%E6%96%87%E6%A1%A3.md"},
		{"invalid UTF-8 encoded byte by byte", "file:///a\xffb\xc3", "file:///a%FFb%C3"},
		{"raw in host encoded", "test://exa mple/", "test://exa%20mple/"},
		{"reserved characters kept raw", "test://h/a:b@c!$&'()*+,;=[]?q=/?#f#?", "test://h/a:b@c!$&'()*+,;=[]?q=/?#f#?"},
		{"dot segments kept", "file:///a/../b/./c", "file:///a/../b/./c"},
		{"encoded dots decoded but not removed", "file:///a/%2E%2E/b", "file:///a/../b"},
		{"trailing slash kept", "http://h/a/", "http://h/a/"},
		{"no trailing slash added", "http://h/a", "http://h/a"},
		{"query order kept", "test://x?b=2&a=1", "test://x?b=2&a=1"},
		{"path query fragment case kept", "test://x/A?Q=V#F", "test://x/A?Q=V#F"},
		{"everything at once", "HTTP://User@Example.COM:80?a=%7e%2f b#X", "http://User@example.com/?a=~%2F%20b#X"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if err != nil {
				t.Fatalf("Normalize(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
			again, err := Normalize(got)
			if err != nil || again != got {
				t.Fatalf("Normalize(%q) = %q, %v; not idempotent", got, again, err)
			}
		})
	}
}

// TestSameResourceOneKey lists spellings of one resource that must share a key.
func TestSameResourceOneKey(t *testing.T) {
	tests := []struct{ name, a, b string }{
		{"scheme host port and unreserved", "HTTP://Example.COM:80/a%7eb", "http://example.com/a~b"},
		{"encoded and raw space", "file:///docs/a%20b.md", "file:///docs/a b.md"},
		{"encoded and raw non-ASCII", "file:///文档.md", "file:///%E6%96%87%E6%A1%A3.md"},
		{"lower and upper hex", "file:///a%2fb", "file:///a%2Fb"},
		{"encoded and raw unreserved", "file:///%61%2D%31", "file:///a-1"},
		{"host case", "test://HOST/x", "test://host/x"},
		{"empty port", "test://h:/x", "test://h/x"},
		{"http empty path", "http://h", "http://h/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, errA := Normalize(tt.a)
			kb, errB := Normalize(tt.b)
			if errA != nil || errB != nil {
				t.Fatalf("errors: %v, %v", errA, errB)
			}
			if ka != kb {
				t.Fatalf("%q -> %q and %q -> %q; want one key", tt.a, ka, tt.b, kb)
			}
		})
	}
}

// TestDifferentResourcesDifferentKeys lists pairs that name (or may name)
// different resources and must keep different keys.
func TestDifferentResourcesDifferentKeys(t *testing.T) {
	tests := []struct{ name, a, b string }{
		{"encoded slash is not a slash", "file:///a%2Fb", "file:///a/b"},
		{"encoded question mark is not a query", "file:///a%3Fb", "file:///a?b"},
		{"encoded hash is not a fragment", "file:///a%23b", "file:///a#b"},
		{"encoded percent is not an escape", "file:///a%2541", "file:///a%41"},
		{"path case", "file:///a/b", "file:///A/b"},
		{"query case", "test://x?q=1", "test://x?Q=1"},
		{"fragment case", "test://x#f", "test://x#F"},
		{"dot segments", "file:///a/../b", "file:///b"},
		{"non-default port", "http://h:8080/", "http://h/"},
		{"default port of another scheme", "https://h:80/", "https://h/"},
		{"userinfo case", "test://User@h/", "test://user@h/"},
		{"IPv6 zone case", "test://[fe80::1%25Eth0]/", "test://[fe80::1%25eth0]/"},
		{"trailing slash", "http://h/a/", "http://h/a"},
		{"empty path of other schemes", "test://h", "test://h/"},
		{"query order", "test://x?a=1&b=2", "test://x?b=2&a=1"},
		{"authority and path", "test://a/b", "test:/a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, errA := Normalize(tt.a)
			kb, errB := Normalize(tt.b)
			if errA != nil || errB != nil {
				t.Fatalf("errors: %v, %v", errA, errB)
			}
			if ka == kb {
				t.Fatalf("%q and %q share key %q", tt.a, tt.b, ka)
			}
		})
	}
}

func TestNormalizeErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no colon", "docs/readme.md"},
		{"absolute path", "/docs/readme.md"},
		{"network-path reference", "//host/x"},
		{"empty scheme", ":x"},
		{"scheme starts with digit", "1http://h/"},
		{"scheme with space", "my scheme:x"},
		{"scheme with percent", "%41bc:x"},
		{"colon after slash", "a/b:c"},
		{"percent at end", "file:///a%"},
		{"percent with one digit", "file:///a%2"},
		{"percent with non-hex", "file:///a%2G"},
		{"percent with non-hex first", "file:///a%G2"},
		{"raw percent", "file:///100% done"},
		{"bad percent in host", "test://h%zz/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Normalize(%q) = %q, %v; want ErrInvalid", tt.in, got, err)
			}
			if got != "" {
				t.Fatalf("Normalize(%q) returned %q with its error", tt.in, got)
			}
		})
	}
}

func TestNormalizeNoAllocWhenNormal(t *testing.T) {
	for _, in := range []string{
		"file:///docs/readme.md",
		"http://user@example.com:8080/a/b?q=%2F#f",
		"test://[fe80::1%25Eth0]/x",
		"urn:isbn:0451450523",
	} {
		var out string
		allocs := testing.AllocsPerRun(100, func() { out, _ = Normalize(in) })
		if out != in {
			t.Fatalf("Normalize(%q) = %q; input was already normal", in, out)
		}
		if allocs != 0 {
			t.Errorf("Normalize(%q): %v allocations, want 0", in, allocs)
		}
	}
}

func BenchmarkNormalize(b *testing.B) {
	cases := []struct{ name, in string }{
		{"normal", "https://example.com/docs/guides/getting-started.md?lang=en#install"},
		{"needs-work", "HTTPS://Example.COM:443/docs/%7eguides/getting started%2f文档.md?lang=en#install"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Normalize(c.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
