package paging

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateCursorGolden = flag.Bool("update-cursor-golden", false, "rewrite golden files in testdata/")

// testKey and testKey2 are fixed so that golden files are reproducible.
var (
	testKey  = CursorKey{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	testKey2 = CursorKey{ID: "k2", Secret: []byte("fedcba9876543210fedcba9876543210")}
	testT0   = time.Date(2026, 8, 25, 4, 0, 0, 0, time.UTC)
)

func testKeyring(t testing.TB, current CursorKey, previous ...CursorKey) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, previous...)
	require.NoError(t, err)
	return k
}

func testQuery() Query {
	return Query{
		Tool:     "search_tickets",
		Filter:   map[string]any{"status": "open"},
		Sort:     []SortField{{Name: "updated_at", Desc: true}, {Name: "id", Desc: true}},
		PageSize: 20,
	}
}

func testHash(t testing.TB, q Query) QueryHash {
	t.Helper()
	h, err := q.Hash()
	require.NoError(t, err)
	return h
}

func testPayload(t testing.TB) CursorPayload {
	return CursorPayload{
		Query:      testHash(t, testQuery()),
		After:      Position{Sort: []string{SortTime(testT0)}, ID: "T-1042"},
		SnapshotID: "snap-7f2c",
		IssuedAt:   testT0,
		ExpiresAt:  testT0.Add(10 * time.Minute),
	}
}

func requireCursorCode(t *testing.T, err error, want CursorErrorCode) {
	t.Helper()
	var ce *CursorError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, want, ce.Code, "detail: %s", ce.Detail)
	require.ErrorIs(t, err, &CursorError{Code: want})
}

func cursorGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateCursorGolden {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update-cursor-golden to create it")
	require.Equal(t, string(want), string(got))
}

func TestCursorRoundTrip(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	got, err := k.Decode(c, p.Query, testT0.Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, p, got)
}

func TestCursorGoldenWireForm(t *testing.T) {
	k := testKeyring(t, testKey)
	c, err := k.Encode(testPayload(t))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(c, "v1.k1."))
	cursorGolden(t, "cursor_v1.golden", []byte(c+"\n"))
}

// Every single-bit flip of every byte of a cursor is refused. Base64 is
// decoded strictly, otherwise a flip in the unused low bits of the last
// character would decode to the same bytes and pass the MAC.
func TestCursorEveryBitFlipRejected(t *testing.T) {
	k := testKeyring(t, testKey, testKey2)
	// Many cursors, so that the last characters of payload and MAC take
	// many values, including those with unused low bits.
	for n := range 48 {
		p := testPayload(t)
		p.After.ID = fmt.Sprintf("T-%d", n)
		p.SnapshotID = strings.Repeat("s", n%3)
		if n%2 == 1 { // the digest form (version 2) too
			p.After, p.AfterDigest = Position{}, DigestPosition(p.After)
		}
		c, err := k.Encode(p)
		require.NoError(t, err)
		for i := range len(c) {
			for bit := range 8 {
				b := []byte(c)
				b[i] ^= 1 << bit
				_, err := k.Decode(string(b), p.Query, testT0)
				var ce *CursorError
				require.ErrorAs(t, err, &ce, "flip of bit %d of byte %d of %q accepted", bit, i, c)
				require.Contains(t, []CursorErrorCode{CursorInvalid, CursorVersionUnsupported}, ce.Code)
			}
		}
	}
}

func TestCursorQueryMismatch(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	cases := map[string]func(*Query){
		"another tool":        func(q *Query) { q.Tool = "search_users" },
		"another page size":   func(q *Query) { q.PageSize = 21 },
		"another filter":      func(q *Query) { q.Filter = map[string]any{"status": "closed"} },
		"no filter":           func(q *Query) { q.Filter = nil },
		"another sort field":  func(q *Query) { q.Sort[0].Name = "created_at" },
		"another direction":   func(q *Query) { q.Sort[0].Desc = false },
		"another consistency": func(q *Query) { q.Consistency = ConsistencyIncremental },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			q := testQuery()
			q.Sort = append([]SortField(nil), q.Sort...)
			change(&q)
			_, err := k.Decode(c, testHash(t, q), testT0)
			requireCursorCode(t, err, CursorQueryMismatch)
		})
	}
	t.Run("same query, filter as struct", func(t *testing.T) {
		q := testQuery()
		q.Filter = struct {
			Status string `json:"status"`
		}{"open"}
		_, err := k.Decode(c, testHash(t, q), testT0)
		require.NoError(t, err)
	})
}

func TestCursorUnknownVersion(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	for _, cursor := range []string{
		"v3" + strings.TrimPrefix(c, "v1"),
		"v0" + strings.TrimPrefix(c, "v1"),
		"v10" + strings.TrimPrefix(c, "v1"),
		"v3.anything-at-all",
		"v99.",
	} {
		t.Run(cursor[:3], func(t *testing.T) {
			_, err := k.Decode(cursor, p.Query, testT0)
			requireCursorCode(t, err, CursorVersionUnsupported)
		})
	}
}

func TestCursorExpiryWithInjectedClock(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	_, err = k.Decode(c, p.Query, p.ExpiresAt.Add(-time.Millisecond))
	require.NoError(t, err)
	_, err = k.Decode(c, p.Query, p.ExpiresAt)
	requireCursorCode(t, err, CursorExpired)
	require.ErrorIs(t, err, ErrCursorExpired)
}

// The decoding order: a tampered cursor is INVALID even when it is also
// expired; a cursor of another query is a MISMATCH even when also expired.
func TestCursorDecodeOrder(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	late := p.ExpiresAt.Add(time.Hour)
	other := testQuery()
	other.PageSize = 5

	_, err = k.Decode(tamperLast(c), p.Query, late)
	requireCursorCode(t, err, CursorInvalid)
	_, err = k.Decode(c, testHash(t, other), late)
	requireCursorCode(t, err, CursorQueryMismatch)
}

// tamperLast changes the last character of a cursor to another one.
func tamperLast(c string) string {
	if strings.HasSuffix(c, "A") {
		return c[:len(c)-1] + "B"
	}
	return c[:len(c)-1] + "A"
}

func TestCursorKeyRotation(t *testing.T) {
	old := testKeyring(t, testKey)
	p := testPayload(t)
	oldCursor, err := old.Encode(p)
	require.NoError(t, err)

	rotated := testKeyring(t, testKey2, testKey)
	got, err := rotated.Decode(oldCursor, p.Query, testT0)
	require.NoError(t, err, "a cursor signed by the previous key still verifies")
	assert.Equal(t, p, got)

	newCursor, err := rotated.Encode(p)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(newCursor, "v1.k2."), "the current key signs")

	retired := testKeyring(t, testKey2)
	_, err = retired.Decode(oldCursor, p.Query, testT0)
	requireCursorCode(t, err, CursorInvalid)

	// A cursor whose key id is swapped for another known key fails the MAC.
	swapped := strings.Replace(oldCursor, "v1.k1.", "v1.k2.", 1)
	_, err = rotated.Decode(swapped, p.Query, testT0)
	requireCursorCode(t, err, CursorInvalid)
}

func TestCursorMalformedIsInvalid(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	c, err := k.Encode(p)
	require.NoError(t, err)
	parts := strings.Split(c, ".")
	cases := map[string]string{
		"empty":            "",
		"no version":       "k1.abc.def",
		"letters version":  "vx.k1.a.b",
		"only version":     "v1",
		"three parts":      strings.Join(parts[:3], "."),
		"five parts":       c + ".x",
		"padded mac":       c + "=",
		"empty mac":        strings.Join(append(parts[:3:3], ""), "."),
		"mac of payload 2": strings.Join([]string{parts[0], parts[1], parts[2] + "A", parts[3]}, "."),
		"too long":         c + strings.Repeat("A", maxCursorLen),
		"unknown key":      strings.Join([]string{parts[0], "zz", parts[2], parts[3]}, "."),
	}
	for name, cursor := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := k.Decode(cursor, p.Query, testT0)
			requireCursorCode(t, err, CursorInvalid)
		})
	}
}

// signRaw signs an arbitrary version 1 payload, as only a key holder could.
func signRaw(key CursorKey, payload []byte) string { return signRawVersion(key, "v1", payload) }

func signRawVersion(key CursorKey, version string, payload []byte) string {
	prefix := version + "." + key.ID + "." + cursorBase64.EncodeToString(payload)
	mac := hmac.New(sha256.New, key.Secret)
	mac.Write([]byte(prefix))
	return prefix + "." + cursorBase64.EncodeToString(mac.Sum(nil))
}

func TestCursorSignedGarbageIsInvalid(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	good := appendPayload(nil, p)
	cases := map[string][]byte{
		"empty":          nil,
		"short hash":     good[:10],
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"expiry first":   appendPayload(nil, CursorPayload{IssuedAt: testT0, ExpiresAt: testT0.Add(-time.Second)}),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := k.Decode(signRaw(testKey, raw), p.Query, testT0)
			requireCursorCode(t, err, CursorInvalid)
		})
	}
}

func TestNewKeyringRejects(t *testing.T) {
	cases := map[string][]CursorKey{
		"short secret":   {{ID: "k", Secret: []byte("short")}},
		"empty id":       {{ID: "", Secret: testKey.Secret}},
		"dot in id":      {{ID: "k.1", Secret: testKey.Secret}},
		"long id":        {{ID: strings.Repeat("k", 33), Secret: testKey.Secret}},
		"duplicate id":   {testKey, {ID: testKey.ID, Secret: testKey2.Secret}},
		"bad previous":   {testKey, {ID: "k 2", Secret: testKey2.Secret}},
		"short previous": {testKey, {ID: "k2", Secret: nil}},
	}
	for name, keys := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewKeyring(keys[0], keys[1:]...)
			require.Error(t, err)
		})
	}
}

// Every limit is checked on encode, with a *CursorError naming it where the
// data (not the caller) is too long, and a cursor at every limit reads back.
func TestCursorLimits(t *testing.T) {
	k := testKeyring(t, testKey)
	atLimit := testPayload(t)
	atLimit.SnapshotID = strings.Repeat("s", MaxCursorSnapshotID)
	atLimit.After.Sort = make([]string, maxSortValues)
	for i := range atLimit.After.Sort {
		atLimit.After.Sort[i] = strings.Repeat("v", MaxCursorPosition/(maxSortValues+1))
	}
	atLimit.After.ID = ""
	atLimit.After.ID = strings.Repeat("i", MaxCursorPosition-positionLen(atLimit.After))
	require.Equal(t, MaxCursorPosition, positionLen(atLimit.After))
	c, err := k.Encode(atLimit)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(c), maxCursorLen)
	assert.Less(t, len(c), 90_000, "the longest cursor")
	got, err := k.Decode(c, atLimit.Query, testT0)
	require.NoError(t, err)
	assert.Equal(t, atLimit, got)

	cases := []struct {
		name   string
		change func(p *CursorPayload)
		code   CursorErrorCode // empty: a plain error, the caller's mistake
	}{
		{"position one byte over", func(p *CursorPayload) { p.After.ID += "i" }, CursorTooLong},
		{"snapshot id one byte over", func(p *CursorPayload) { p.SnapshotID += "s" }, CursorTooLong},
		{"too many sort values", func(p *CursorPayload) { p.After.Sort = append(p.After.Sort, "") }, ""},
		{"expiry before issue", func(p *CursorPayload) { p.ExpiresAt = p.IssuedAt.Add(-time.Second) }, ""},
		{"position and digest", func(p *CursorPayload) { p.AfterDigest = DigestPosition(p.After) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := atLimit
			p.After.Sort = slices.Clone(p.After.Sort)
			tc.change(&p)
			_, err := k.Encode(p)
			require.Error(t, err)
			if tc.code == "" {
				var ce *CursorError
				require.False(t, errors.As(err, &ce), "a caller's mistake, not a cursor error: %v", err)
				return
			}
			requireCursorCode(t, err, tc.code)
			assert.Contains(t, err.Error(), "MaxCursor", "the error names the bound")
		})
	}
	t.Run("signed over the limit is refused on decode", func(t *testing.T) {
		p := atLimit
		p.After.ID += "i"
		_, err := k.Decode(signRaw(testKey, appendPayload(nil, p)), p.Query, testT0)
		requireCursorCode(t, err, CursorInvalid)
	})
}

// A version 2 cursor carries the digest of its position and nothing of the
// position itself; it keeps the signature, key rotation and expiry of
// version 1.
func TestCursorDigestForm(t *testing.T) {
	p := testPayload(t)
	p.After.ID = strings.Repeat("long-id/", 8<<10)
	digest := DigestPosition(p.After)
	p.After, p.AfterDigest = Position{}, digest
	k := testKeyring(t, testKey)
	c, err := k.Encode(p)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(c, "v2.k1."))
	assert.Less(t, len(c), 200)
	got, err := k.Decode(c, p.Query, testT0)
	require.NoError(t, err)
	assert.Equal(t, p, got)
	cursorGolden(t, "cursor_v2.golden", []byte(c+"\n"))

	rotated := testKeyring(t, testKey2, testKey)
	_, err = rotated.Decode(c, p.Query, testT0)
	require.NoError(t, err, "a previous key still verifies")
	_, err = testKeyring(t, testKey2).Decode(c, p.Query, testT0)
	requireCursorCode(t, err, CursorInvalid)
	_, err = k.Decode(c, p.Query, p.ExpiresAt)
	requireCursorCode(t, err, CursorExpired)
	_, err = k.Decode(tamperLast(c), p.Query, testT0)
	requireCursorCode(t, err, CursorInvalid)
	_, err = k.Decode("v1"+strings.TrimPrefix(c, "v2"), p.Query, testT0)
	requireCursorCode(t, err, CursorInvalid)
	_, err = k.Decode("v3"+strings.TrimPrefix(c, "v2"), p.Query, testT0)
	requireCursorCode(t, err, CursorVersionUnsupported)

	_, err = k.Decode(signRawVersion(testKey, "v2", appendDigestPayload(nil, p)), p.Query, testT0)
	require.NoError(t, err, "signRawVersion signs as Encode does")
	for _, raw := range [][]byte{
		appendPayloadHead(nil, p),              // no digest
		append(appendDigestPayload(nil, p), 0), // trailing byte
		appendDigestPayload(nil, CursorPayload{Query: p.Query, IssuedAt: testT0, ExpiresAt: p.ExpiresAt}), // zero digest
		appendPayload(nil, testPayload(t)), // a version 1 payload
	} {
		_, err := k.Decode(signRawVersion(testKey, "v2", raw), p.Query, testT0)
		requireCursorCode(t, err, CursorInvalid)
	}
}

// Version 1 is written exactly within the limits the first release reads
// (each string at most 1,024 bytes, the cursor at most 4,096), so that a
// release that reads only version 1 either reads a cursor or answers
// CURSOR_VERSION_UNSUPPORTED; beyond them the position goes inline under
// version 2. Decode accepts each payload only in the form Encode writes.
func TestCursorVersionOneLimits(t *testing.T) {
	k := testKeyring(t, testKey)
	// fill returns p with an id that makes its cursor exactly n bytes.
	fill := func(p CursorPayload, n int) CursorPayload {
		p.After.ID = ""
		c, err := k.Encode(p)
		require.NoError(t, err)
		// Each 3 payload bytes are 4 cursor bytes; the id's length prefix
		// grows from 1 to 2 bytes past 127.
		p.After.ID = strings.Repeat("i", (n-len(c))*3/4-1)
		return p
	}
	cases := []struct {
		name    string
		payload func() CursorPayload
		version string
	}{
		{"id of 1,024 bytes", func() CursorPayload {
			p := testPayload(t)
			p.After.ID = strings.Repeat("i", v1MaxString)
			return p
		}, "v1."},
		{"id of 1,025 bytes", func() CursorPayload {
			p := testPayload(t)
			p.After.ID = strings.Repeat("i", v1MaxString+1)
			return p
		}, "v2."},
		{"sort value of 1,025 bytes", func() CursorPayload {
			p := testPayload(t)
			p.After.Sort = []string{strings.Repeat("s", v1MaxString+1)}
			return p
		}, "v2."},
		{"cursor of 4,096 bytes", func() CursorPayload {
			p := testPayload(t)
			p.SnapshotID = strings.Repeat("s", v1MaxString)
			p.After.Sort = []string{strings.Repeat("v", v1MaxString), strings.Repeat("w", 600)}
			return fill(p, v1MaxCursorLen)
		}, "v1."},
		{"cursor of 4,097 bytes", func() CursorPayload {
			p := testPayload(t)
			p.SnapshotID = strings.Repeat("s", v1MaxString)
			p.After.Sort = []string{strings.Repeat("v", v1MaxString), strings.Repeat("w", 600)}
			q := fill(p, v1MaxCursorLen)
			q.After.ID += "ii" // two bytes more are at least one more base64 byte
			return q
		}, "v2."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.payload()
			c, err := k.Encode(p)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(c, tc.version), "%.3s cursor of %d bytes", c, len(c))
			switch tc.name {
			case "cursor of 4,096 bytes":
				require.Len(t, c, v1MaxCursorLen)
			case "cursor of 4,097 bytes":
				require.Greater(t, len(c), v1MaxCursorLen)
			}
			got, err := k.Decode(c, p.Query, testT0)
			require.NoError(t, err)
			assert.Equal(t, p, got)

			// The same payload under the other version is refused, though
			// signed: one form per payload.
			other := "v1"
			if tc.version == "v1." {
				other = "v2"
			}
			_, err = k.Decode(signRawVersion(testKey, other, appendPayload(nil, p)), p.Query, testT0)
			requireCursorCode(t, err, CursorInvalid)
		})
	}
}

// Encode refuses a time that Decode would refuse, so that every cursor it
// writes reads back; the paginator's own cursor never looks tampered.
func TestCursorTimeBound(t *testing.T) {
	k := testKeyring(t, testKey)
	p := testPayload(t)
	p.ExpiresAt = time.UnixMilli(maxCursorMilli).UTC()
	c, err := k.Encode(p)
	require.NoError(t, err, "the latest time a cursor carries")
	got, err := k.Decode(c, p.Query, testT0)
	require.NoError(t, err)
	assert.Equal(t, p, got)

	p.ExpiresAt = p.ExpiresAt.Add(time.Millisecond)
	_, err = k.Encode(p)
	requireCursorCode(t, err, CursorInvalid)
	assert.Contains(t, err.Error(), "2^53")
}

func TestDigestPosition(t *testing.T) {
	a := Position{Sort: []string{"ab"}, ID: "c"}
	assert.Equal(t, DigestPosition(a), DigestPosition(Position{Sort: []string{"ab"}, ID: "c"}))
	for _, b := range []Position{
		{Sort: []string{"a"}, ID: "bc"},
		{Sort: []string{"ab", ""}, ID: "c"},
		{ID: "abc"},
		{Sort: []string{"ab"}, ID: "d"},
	} {
		assert.NotEqual(t, DigestPosition(a), DigestPosition(b), "%+v", b)
	}
}

func TestCursorErrorsAreNeverWrappedAway(t *testing.T) {
	k := testKeyring(t, testKey)
	_, err := k.Decode("garbage", QueryHash{}, testT0)
	require.True(t, errors.Is(err, ErrCursorInvalid))
	require.False(t, errors.Is(err, ErrCursorExpired))
}

// Benchmarks of the cursor wire form, each beside a baseline without the
// MAC: the same binary payload in base64, and the payload as JSON in base64.

type jsonPayload struct {
	Q []byte   `json:"q"`
	S []string `json:"s"`
	I string   `json:"i"`
	N string   `json:"n"`
	T int64    `json:"t"`
	E int64    `json:"e"`
}

func toJSONPayload(p CursorPayload) jsonPayload {
	return jsonPayload{Q: p.Query[:], S: p.After.Sort, I: p.After.ID, N: p.SnapshotID, T: p.IssuedAt.UnixMilli(), E: p.ExpiresAt.UnixMilli()}
}

func BenchmarkCursorEncode(b *testing.B) {
	k := testKeyring(b, testKey)
	p := testPayload(b)
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := k.Encode(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline=binary-base64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = "v1." + cursorBase64.EncodeToString(appendPayload(make([]byte, 0, 64), p))
		}
	})
	b.Run("baseline=json-base64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := json.Marshal(toJSONPayload(p))
			if err != nil {
				b.Fatal(err)
			}
			_ = cursorBase64.EncodeToString(raw)
		}
	})
}

func BenchmarkCursorDecode(b *testing.B) {
	k := testKeyring(b, testKey)
	p := testPayload(b)
	c, err := k.Encode(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := k.Decode(c, p.Query, testT0); err != nil {
				b.Fatal(err)
			}
		}
	})
	bin := cursorBase64.EncodeToString(appendPayload(nil, p))
	b.Run("baseline=binary-base64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := cursorBase64.DecodeString(bin)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parsePayload('1', raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	raw, err := json.Marshal(toJSONPayload(p))
	if err != nil {
		b.Fatal(err)
	}
	js := cursorBase64.EncodeToString(raw)
	b.Run("baseline=json-base64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := cursorBase64.DecodeString(js)
			if err != nil {
				b.Fatal(err)
			}
			var out jsonPayload
			if err := json.Unmarshal(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// olderReleaseDecodeCode answers a cursor the way the release before cursor
// version 2 (commit d730555^, cursor.go) reads it, for a cursor signed with a
// key it shares (its MAC is computed the same way): "" when that release reads
// the cursor, else the code it answers. Its rules, in its order: a cursor over
// 4,096 bytes is CURSOR_INVALID; any version but 1 is
// CURSOR_VERSION_UNSUPPORTED; a payload string (snapshot id, sort value, id)
// over 1,024 bytes is CURSOR_INVALID ("malformed payload"). Checked against
// that release's own Decode (git show d730555^:cursor.go) on the same
// cursors: same answers.
func olderReleaseDecodeCode(t *testing.T, cursor string) CursorErrorCode {
	t.Helper()
	const oldMaxCursorLen, oldMaxPayloadText = 4096, 1024
	if len(cursor) > oldMaxCursorLen {
		return CursorInvalid
	}
	parts := strings.Split(cursor, ".")
	require.Len(t, parts, 4)
	if parts[0] != "v1" {
		return CursorVersionUnsupported
	}
	raw, err := cursorBase64.DecodeString(parts[2])
	require.NoError(t, err)
	b := raw[len(QueryHash{}):]
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		require.Positive(t, n)
		b = b[n:]
		return v
	}
	str := func() bool {
		n := uvarint()
		if n > oldMaxPayloadText {
			return false
		}
		b = b[n:]
		return true
	}
	uvarint() // issued
	uvarint() // expires
	if !str() {
		return CursorInvalid
	}
	for range uvarint() {
		if !str() {
			return CursorInvalid
		}
	}
	if !str() {
		return CursorInvalid
	}
	return ""
}

// docs/limits.md promises that an older release answers a newer
// cursor with CURSOR_VERSION_UNSUPPORTED, and cursor.go says a position
// written as version 1 is one "which every release reads". A server still on
// the older release (a rolling deploy sharing the keyring) therefore reads
// every cursor the paginator writes, or refuses it as an unsupported
// version: it never answers CURSOR_INVALID, the code of a tampered cursor,
// which no walker recovers from, for a long position written inline.
func TestEveryCursorIsReadOrRefusedAsUnsupportedByTheOlderRelease(t *testing.T) {
	cases := []struct {
		name      string
		idLen     int
		resolving bool
	}{
		{"resolving source, 1,105-byte id (version 2)", 1105, true},
		{"resolving source, 957-byte id (version 1)", 950, true},
		{"source without PositionResolver, 2,000-byte id", 2000, false},
		// An older release refuses any cursor over 4,096 bytes before it
		// reads the version, so no encoding of a 64 KiB inline position can
		// be answered CURSOR_VERSION_UNSUPPORTED there; docs/limits.md
		// table says so. Lowering the inline limit to fit would make such
		// keys unreachable for good, which is worse.
		{"source without PositionResolver, 64 KiB id, over the older release's length", MaxCursorPosition - 64, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := ticketQuery(2, ConsistencySnapshot)
			data := longTickets(5, tc.idLen, false)
			var src KeysetSource[supportTicket]
			if tc.resolving {
				mem := ticketSource(t, 0)
				mem.Put(data...)
				src = mem
			} else {
				slices.SortFunc(data, func(a, b supportTicket) int { return ComparePositions(q.Sort, ticketPosition(a), ticketPosition(b)) })
				src = staticSource{items: data}
			}
			env, err := newTestPaginator(t, src, newPageClock(), nil).Page(context.Background(), PageRequest{Query: q})
			require.NoError(t, err)
			require.True(t, env.Page.HasMore)
			got := olderReleaseDecodeCode(t, env.Page.NextCursor)
			if len(env.Page.NextCursor) > 4096 {
				assert.True(t, strings.HasPrefix(env.Page.NextCursor, "v2."), "a cursor too long for the older release is at least not version 1")
				return
			}
			assert.Contains(t, []CursorErrorCode{"", CursorVersionUnsupported}, got,
				"the release before version 2 answers this %s cursor of %d bytes with %s",
				env.Page.NextCursor[:2], len(env.Page.NextCursor), got)
		})
	}
}

// cursor.go: limits are "checked on encode and decode alike, so that every
// cursor this package writes can also be read back". Times beyond 2^53 Unix
// milliseconds are refused by Encode, or read back by Decode: the
// paginator's own cursor never looks tampered.
func TestEncodeWritesNoCursorDecodeRefuses(t *testing.T) {
	far := time.UnixMilli(1<<53 + 1).UTC()
	cases := []struct {
		name            string
		issued, expires time.Time
	}{
		{"expiry beyond 2^53 ms", testT0, far},
		{"issue and expiry beyond 2^53 ms", far, far.Add(time.Minute)},
	}
	k := testKeyring(t, testKey)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPayload(t)
			p.IssuedAt, p.ExpiresAt = tc.issued, tc.expires
			c, err := k.Encode(p)
			if err != nil {
				return // refused on encode: the promise holds
			}
			_, err = k.Decode(c, p.Query, tc.issued)
			assert.NoError(t, err, fmt.Sprintf("Encode wrote %.20s..., Decode refuses it", c))
		})
	}
}
