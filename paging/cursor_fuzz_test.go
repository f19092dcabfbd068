package paging

import "testing"

// FuzzDecodeCursor feeds arbitrary strings to the decoder: it must never
// panic, must fail only with a *CursorError, and whatever it accepts must be
// a cursor it would write itself (so nothing unsigned slips through).
func FuzzDecodeCursor(f *testing.F) {
	k, err := NewKeyring(testKey, testKey2)
	if err != nil {
		f.Fatal(err)
	}
	p := testPayload(f)
	good, err := k.Encode(p)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, "", "v1", "v2.x", "v1.k1..", "v1.k1.AAAA.AAAA", good[:len(good)-1], good + "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := k.Decode(s, p.Query, testT0)
		if err != nil {
			if _, ok := err.(*CursorError); !ok {
				t.Fatalf("error %T %v is not a *CursorError", err, err)
			}
			return
		}
		if !got.ExpiresAt.After(testT0) || got.Query != p.Query {
			t.Fatalf("accepted an expired or foreign cursor: %+v", got)
		}
		// Only a holder of the key can make an accepted cursor: re-encoding
		// it must give the input back (signed with the key it names).
		signer, err := NewKeyring(CursorKey{ID: keyIDOf(s), Secret: k.keys[keyIDOf(s)]})
		if err != nil {
			t.Fatal(err)
		}
		again, err := signer.Encode(got)
		if err != nil || again != s {
			t.Fatalf("accepted %q, re-encodes to %q (%v)", s, again, err)
		}
	})
}

func keyIDOf(s string) string {
	var dots []int
	for i := range len(s) {
		if s[i] == '.' {
			dots = append(dots, i)
		}
	}
	return s[dots[0]+1 : dots[1]]
}

// FuzzParsePayload feeds arbitrary bytes to the payload parser of both
// versions, which only ever sees authenticated bytes but must still be
// total: no panic, and what it accepts encodes back to a payload that parses
// to the same value.
func FuzzParsePayload(f *testing.F) {
	p := testPayload(f)
	f.Add(byte('1'), appendPayload(nil, p))
	p.After, p.AfterDigest = Position{}, DigestPosition(p.After)
	f.Add(byte('2'), appendDigestPayload(nil, p))
	f.Add(byte('1'), []byte{})
	f.Add(byte('2'), make([]byte, 16))
	p = testPayload(f)
	p.After.ID = string(make([]byte, v1MaxString+1))
	f.Add(byte('2'), appendPayload(nil, p))
	f.Fuzz(func(t *testing.T, version byte, raw []byte) {
		p, err := parsePayload(version, raw)
		if err != nil {
			return
		}
		// Version 2 carries a digest or, beyond the version 1 limits, an
		// inline position laid out as in version 1.
		encode := appendPayload
		if p.AfterDigest != (PositionDigest{}) {
			encode = appendDigestPayload
		}
		again, err := parsePayload(version, encode(nil, p))
		if err != nil {
			t.Fatalf("re-encoded payload refused: %v", err)
		}
		if !again.IssuedAt.Equal(p.IssuedAt) || !again.ExpiresAt.Equal(p.ExpiresAt) ||
			again.Query != p.Query || again.SnapshotID != p.SnapshotID || again.After.ID != p.After.ID ||
			len(again.After.Sort) != len(p.After.Sort) || again.AfterDigest != p.AfterDigest {
			t.Fatalf("round trip changed the payload: %+v != %+v", again, p)
		}
	})
}
