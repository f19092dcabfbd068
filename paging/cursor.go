package paging

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A cursor is the signed position of a paged walk. Its wire form is
//
//	v<version>.<key id>.<base64url payload>.<base64url HMAC-SHA256>
//
// The MAC is computed over everything before the last dot, so the version and
// the key id are authenticated together with the payload. The payload is a
// compact binary encoding (see appendPayload); callers never parse it.
//
// Version 1 carries the position inline, within the limits of the first
// release: each string (snapshot id, sort value, id) at most 1,024 bytes and
// the whole cursor at most 4,096 bytes. Those limits are part of the version:
// a release that reads only version 1 refuses anything beyond them as
// CURSOR_INVALID, the answer to a tampered cursor, so a cursor beyond them
// must not say version 1.
//
// Version 2 carries, after the same head, either the digest of the position
// (PositionDigest, exactly 32 bytes), which the source resolves in the
// cursor's snapshot (PositionResolver) so that a long key never makes a
// cursor long, or the position inline as in version 1 but beyond the version
// 1 limits (up to MaxCursorPosition), for a source that cannot resolve. An
// inline position beyond those limits is always longer than 32 bytes, so the
// two forms never collide. A cursor within the version 1 limits is always
// written as version 1, which every release reads; a release that reads only
// version 1 answers a version 2 cursor of at most 4,096 bytes with
// CURSOR_VERSION_UNSUPPORTED. It answers a longer cursor, whatever its
// version, with CURSOR_INVALID, because it checks the length first: while
// such a release still serves, a source without PositionResolver should keep
// its positions under about 2,900 bytes less the snapshot id.

// CursorVersion is the newest cursor format this package writes; it reads
// every version from 1 to CursorVersion.
const CursorVersion = 2

// Limits of what a cursor carries, checked on encode and decode alike, so
// that every cursor this package writes can also be read back. Exceeding one
// is a *CursorError with code CURSOR_TOO_LONG. A cursor carries times from
// 1970 to 2^53 Unix milliseconds (beyond year 285,000); Encode refuses a
// later one as CURSOR_INVALID, the answer Decode would give.
const (
	// MaxCursorPosition bounds a position carried inline: its sort values
	// and id together, in bytes. It applies only to sources that do not
	// implement PositionResolver; a cursor at this bound is about 89 KB.
	MaxCursorPosition = 64 << 10
	// MaxCursorSnapshotID bounds the snapshot id a source names its states
	// with, in bytes.
	MaxCursorSnapshotID = 1024
)

// The limits of version 1, fixed by the first release that read it (see the
// version comment above).
const (
	v1MaxCursorLen = 4096
	v1MaxString    = 1024
)

// maxCursorMilli is the latest time a cursor carries, in Unix milliseconds:
// far beyond any expiry, and it keeps time arithmetic exact.
const maxCursorMilli = 1 << 53

// minKeySecret is the shortest secret accepted: HMAC-SHA256 keys shorter than
// the hash output weaken the MAC.
const minKeySecret = 32

// maxSortValues bounds the sort values of a position (the fields of an
// order but its last, the id).
const maxSortValues = 16

// maxPayloadLen is the longest payload within the limits: query hash, two
// times, the snapshot id, the count of sort values, and a length of at most
// three bytes (MaxCursorPosition < 1<<21) for each sort value and the id.
const maxPayloadLen = len(QueryHash{}) + 2*binary.MaxVarintLen64 + binary.MaxVarintLen64 + MaxCursorSnapshotID +
	1 + (maxSortValues+1)*3 + MaxCursorPosition

// maxCursorLen bounds the work done on input that may come from anyone: the
// wire form of the longest payload with the longest key id.
const maxCursorLen = len("v2.") + 32 + 1 + (4*maxPayloadLen+2)/3 + 1 + (4*sha256.Size+2)/3

var cursorBase64 = base64.RawURLEncoding.Strict()

// QueryHash binds a cursor to the query that produced it: tool name, filter
// digest, sort fields, page size and consistency. See Query.Hash.
type QueryHash [16]byte

// CursorPayload is what a cursor carries.
type CursorPayload struct {
	// Query is the hash of the query the cursor continues.
	Query QueryHash
	// After is the position of the last item of the page that issued the
	// cursor; the next page starts strictly after it. It is empty when
	// AfterDigest names it instead.
	After Position
	// AfterDigest, when not zero, stands for After: the cursor carries only
	// the digest (version 2), and the source resolves it in SnapshotID.
	AfterDigest PositionDigest
	// SnapshotID names the view the walk reads (snapshot consistency) or the
	// view the issuing page was read at (incremental consistency).
	SnapshotID string
	IssuedAt   time.Time
	ExpiresAt  time.Time
}

// CursorKey is one HMAC key. ID is sent in clear in every cursor so that a
// verifier can pick the key; it must not contain secrets.
type CursorKey struct {
	ID     string
	Secret []byte
}

// Keyring signs cursors with its current key and verifies them with any of
// its keys, so keys can be rotated without invalidating cursors in flight:
// add the new key as current and keep the old one as previous until every
// cursor it signed has expired. A Keyring is immutable and safe for
// concurrent use.
type Keyring struct {
	current string
	keys    map[string][]byte // key id -> secret; write-once
}

// NewKeyring returns a keyring that signs with current and also accepts
// cursors signed by any of previous. Key ids are 1 to 32 characters of
// [A-Za-z0-9_-] and must be distinct; secrets are at least 32 bytes.
func NewKeyring(current CursorKey, previous ...CursorKey) (*Keyring, error) {
	k := &Keyring{current: current.ID, keys: make(map[string][]byte, 1+len(previous))}
	for _, key := range append([]CursorKey{current}, previous...) {
		if !validKeyID(key.ID) {
			return nil, fmt.Errorf("mcpsync: cursor key id %q: want 1 to 32 characters of [A-Za-z0-9_-]", key.ID)
		}
		if len(key.Secret) < minKeySecret {
			return nil, fmt.Errorf("mcpsync: cursor key %q: secret of %d bytes, want at least %d", key.ID, len(key.Secret), minKeySecret)
		}
		if _, dup := k.keys[key.ID]; dup {
			return nil, fmt.Errorf("mcpsync: cursor key id %q given twice", key.ID)
		}
		k.keys[key.ID] = bytes.Clone(key.Secret)
	}
	return k, nil
}

// CurrentKeyID is the id of the key that signs new cursors.
func (k *Keyring) CurrentKeyID() string { return k.current }

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Encode signs p with the current key and returns the cursor's wire form:
// version 1 when p carries a position within the version 1 limits, else
// version 2 (a digest, or a longer position inline). A payload beyond
// MaxCursorPosition or MaxCursorSnapshotID is a *CursorError with code
// CURSOR_TOO_LONG; a time beyond 2^53 Unix milliseconds is a *CursorError
// with code CURSOR_INVALID.
func (k *Keyring) Encode(p CursorPayload) (string, error) {
	if err := checkPayloadLimits(p); err != nil {
		return "", err
	}
	payload := make([]byte, 0, 64)
	if p.AfterDigest != (PositionDigest{}) {
		payload = appendDigestPayload(payload, p)
	} else {
		payload = appendPayload(payload, p)
	}
	// "v1." and "v2." are of one length, so n is the length of either.
	n := len("v1.") + len(k.current) + 1 + cursorBase64.EncodedLen(len(payload)) + 1 + cursorBase64.EncodedLen(sha256.Size)
	version := "v2."
	if p.AfterDigest == (PositionDigest{}) && withinV1(p, n) {
		version = "v1."
	}
	secret := k.keys[k.current]
	buf := make([]byte, 0, n)
	buf = append(buf, version...)
	buf = append(buf, k.current...)
	buf = append(buf, '.')
	buf = cursorBase64.AppendEncode(buf, payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write(buf)
	buf = append(buf, '.')
	buf = cursorBase64.AppendEncode(buf, mac.Sum(nil))
	return string(buf), nil
}

// Decode verifies cursor and returns its payload. It checks, in this order:
//
//  1. shape: a version prefix "v<digits>." (else CURSOR_INVALID);
//  2. version: anything but 1 to CursorVersion is CURSOR_VERSION_UNSUPPORTED. This
//     is the only unauthenticated field acted on, because a newer format may
//     have another shape, key scheme or MAC, so nothing after the version can
//     be interpreted;
//  3. key id: unknown keys are CURSOR_INVALID (a rotated-out key and a forged
//     id look the same, and neither proves anything);
//  4. MAC over version, key id and payload (constant-time; else CURSOR_INVALID);
//  5. payload decoding, and the version 1 limits: within them for version 1,
//     beyond them for a version 2 inline position (else CURSOR_INVALID);
//  6. query hash against want (else CURSOR_QUERY_MISMATCH);
//  7. expiry against now (else CURSOR_EXPIRED).
//
// Steps 5 to 7 read only authenticated bytes, so a tampered cursor can never
// be reported as expired or mismatched: every alteration is CURSOR_INVALID
// (or, for the version digits, CURSOR_VERSION_UNSUPPORTED). The query check
// comes before expiry because a cursor used with the wrong query is a caller
// bug that recovery from the start would hide.
func (k *Keyring) Decode(cursor string, want QueryHash, now time.Time) (CursorPayload, error) {
	if len(cursor) > maxCursorLen {
		return CursorPayload{}, invalidCursor("longer than %d bytes", maxCursorLen)
	}
	dot := strings.IndexByte(cursor, '.')
	if dot < 2 || cursor[0] != 'v' {
		return CursorPayload{}, invalidCursor("no version prefix")
	}
	digits := cursor[1:dot]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return CursorPayload{}, invalidCursor("no version prefix")
		}
	}
	if digits != "1" && digits != "2" {
		return CursorPayload{}, &CursorError{Code: CursorVersionUnsupported, Detail: "version " + strconv.Quote(digits)}
	}
	rest := cursor[dot+1:]
	kid, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return CursorPayload{}, invalidCursor("missing key id")
	}
	payloadB64, macB64, ok := strings.Cut(rest, ".")
	if !ok || strings.IndexByte(macB64, '.') >= 0 {
		return CursorPayload{}, invalidCursor("want four dot-separated parts")
	}
	secret, ok := k.keys[kid]
	if !ok {
		return CursorPayload{}, invalidCursor("unknown key id")
	}
	var got [sha256.Size]byte
	if cursorBase64.DecodedLen(len(macB64)) != sha256.Size {
		return CursorPayload{}, invalidCursor("bad signature")
	}
	if n, err := cursorBase64.Decode(got[:], []byte(macB64)); err != nil || n != sha256.Size {
		return CursorPayload{}, invalidCursor("bad signature")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(cursor[:len(cursor)-len(macB64)-1]))
	var sum [sha256.Size]byte
	if !hmac.Equal(mac.Sum(sum[:0]), got[:]) {
		return CursorPayload{}, invalidCursor("bad signature")
	}
	raw, err := cursorBase64.DecodeString(payloadB64)
	if err != nil {
		return CursorPayload{}, invalidCursor("bad payload encoding")
	}
	p, err := parsePayload(digits[0], raw)
	if err != nil {
		// Only a holder of the key can produce this: a signer bug or a
		// leaked key, never a transport accident.
		return CursorPayload{}, invalidCursor("%v", err)
	}
	// One form per payload, the one Encode writes, so that a version 1
	// cursor means the same to every release that reads it. Versions 1 and
	// 2 have prefixes of one length, so len(cursor) measures either.
	if p.AfterDigest == (PositionDigest{}) && withinV1(p, len(cursor)) != (digits == "1") {
		return CursorPayload{}, invalidCursor("version %s for a position of %d bytes in a cursor of %d bytes", digits, positionLen(p.After), len(cursor))
	}
	if p.Query != want {
		return CursorPayload{}, &CursorError{Code: CursorQueryMismatch, Detail: "cursor belongs to another query"}
	}
	if !now.Before(p.ExpiresAt) {
		return CursorPayload{}, &CursorError{Code: CursorExpired, Detail: "expired at " + p.ExpiresAt.UTC().Format(time.RFC3339Nano)}
	}
	return p, nil
}

func invalidCursor(format string, args ...any) error {
	return &CursorError{Code: CursorInvalid, Detail: fmt.Sprintf(format, args...)}
}

func checkPayloadLimits(p CursorPayload) error {
	if p.AfterDigest != (PositionDigest{}) && (p.After.ID != "" || len(p.After.Sort) > 0) {
		return errors.New("mcpsync: cursor: a position and a digest of one")
	}
	if len(p.After.Sort) > maxSortValues {
		return fmt.Errorf("mcpsync: cursor: %d sort values, at most %d", len(p.After.Sort), maxSortValues)
	}
	if err := checkCursorLimits(p.SnapshotID, positionLen(p.After)); err != nil {
		return err
	}
	if p.IssuedAt.UnixMilli() < 0 || p.ExpiresAt.Before(p.IssuedAt) {
		return errors.New("mcpsync: cursor: times must be after 1970 and expiry not before issue")
	}
	// Decode refuses these as CURSOR_INVALID; refusing them here keeps every
	// cursor written readable, and says what is wrong before a walk relies
	// on it.
	if p.ExpiresAt.UnixMilli() > maxCursorMilli {
		return &CursorError{Code: CursorInvalid, Detail: fmt.Sprintf("expiry %s beyond the latest time a cursor carries (2^53 Unix milliseconds)", p.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// withinV1 reports whether an inline position fits the limits of version 1
// in a cursor of cursorLen bytes: a release that reads only version 1 reads
// such a cursor and refuses any longer one as tampered.
func withinV1(p CursorPayload, cursorLen int) bool {
	if cursorLen > v1MaxCursorLen || len(p.SnapshotID) > v1MaxString || len(p.After.ID) > v1MaxString {
		return false
	}
	for _, v := range p.After.Sort {
		if len(v) > v1MaxString {
			return false
		}
	}
	return true
}

// checkCursorLimits refuses a snapshot id or an inline position of more
// bytes than a cursor carries.
func checkCursorLimits(snapshot string, position int) error {
	if len(snapshot) > MaxCursorSnapshotID {
		return &CursorError{Code: CursorTooLong, Detail: fmt.Sprintf("snapshot id of %d bytes, more than MaxCursorSnapshotID (%d)", len(snapshot), MaxCursorSnapshotID)}
	}
	if position > MaxCursorPosition {
		return &CursorError{Code: CursorTooLong, Detail: fmt.Sprintf("position of %d bytes, more than MaxCursorPosition (%d) for a source without PositionResolver", position, MaxCursorPosition)}
	}
	return nil
}

// positionLen is the text a position carries: its sort values and id.
func positionLen(p Position) int {
	n := len(p.ID)
	for _, v := range p.Sort {
		n += len(v)
	}
	return n
}

// appendPayload writes the binary payload of an inline position: the 16-byte
// query hash, issued_at and expires_at as uvarint Unix milliseconds, the
// snapshot id, the number of sort values, each sort value, and the id;
// strings are uvarint length plus bytes. The layout is fixed for version 1,
// and version 2 uses it for positions beyond the version 1 limits.
func appendPayload(b []byte, p CursorPayload) []byte {
	b = appendPayloadHead(b, p)
	b = binary.AppendUvarint(b, uint64(len(p.After.Sort)))
	for _, v := range p.After.Sort {
		b = appendCursorString(b, v)
	}
	return appendCursorString(b, p.After.ID)
}

// appendDigestPayload writes the version 2 payload: the same query hash,
// times and snapshot id, then the 32 bytes of the position digest.
func appendDigestPayload(b []byte, p CursorPayload) []byte {
	b = appendPayloadHead(b, p)
	return append(b, p.AfterDigest[:]...)
}

func appendPayloadHead(b []byte, p CursorPayload) []byte {
	b = append(b, p.Query[:]...)
	b = binary.AppendUvarint(b, uint64(p.IssuedAt.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(p.ExpiresAt.UnixMilli()))
	return appendCursorString(b, p.SnapshotID)
}

func appendCursorString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errCursorPayload = errors.New("malformed payload")

// parsePayload reads the payload of version '1' or '2'.
func parsePayload(version byte, b []byte) (CursorPayload, error) {
	var p CursorPayload
	if len(b) < len(p.Query) {
		return p, errCursorPayload
	}
	copy(p.Query[:], b)
	r := cursorPayloadReader{b: b[len(p.Query):]}
	issued := r.uvarint()
	expires := r.uvarint()
	if issued > maxCursorMilli || expires > maxCursorMilli || expires < issued {
		return p, errCursorPayload
	}
	p.IssuedAt = time.UnixMilli(int64(issued)).UTC()
	p.ExpiresAt = time.UnixMilli(int64(expires)).UTC()
	p.SnapshotID = r.str()
	switch {
	case version == '2' && len(r.b) == len(p.AfterDigest):
		r.b = r.b[copy(p.AfterDigest[:], r.b):]
		if p.AfterDigest == (PositionDigest{}) {
			return CursorPayload{}, errCursorPayload
		}
	case version == '1' || version == '2':
		// Inline; a version 2 inline position is beyond the version 1
		// limits, hence never 32 bytes (Decode checks the limits).
		n := r.uvarint()
		if n > maxSortValues {
			return p, errCursorPayload
		}
		if n > 0 {
			p.After.Sort = make([]string, n)
			for i := range p.After.Sort {
				p.After.Sort[i] = r.str()
			}
		}
		p.After.ID = r.str()
	default:
		return CursorPayload{}, errCursorPayload
	}
	if r.err || len(r.b) != 0 || checkCursorLimits(p.SnapshotID, positionLen(p.After)) != nil {
		return CursorPayload{}, errCursorPayload
	}
	return p, nil
}

// cursorPayloadReader reads the payload and latches the first error.
type cursorPayloadReader struct {
	b   []byte
	err bool
}

func (r *cursorPayloadReader) uvarint() uint64 {
	if r.err {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *cursorPayloadReader) str() string {
	n := r.uvarint()
	if r.err || n > uint64(len(r.b)) {
		r.err = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
