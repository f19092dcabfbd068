package paging

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// The README's limits table promises that an older release answers a newer
// cursor with CURSOR_VERSION_UNSUPPORTED, and cursor.go says a position
// written as version 1 is one "which every release reads". But the version 1
// layout was widened in place (from 1,024 bytes of text to MaxCursorPosition)
// without a new version: a source without PositionResolver now writes version
// 1 cursors with positions of 1 KiB to 64 KiB, and a server still on the older
// release (a rolling deploy sharing the keyring) answers them CURSOR_INVALID,
// the code of a tampered cursor, which no walker recovers from. Every cursor
// the paginator writes must either be read by the older release or be
// refused by it as an unsupported version.
func TestBreak13LongInlineV1CursorIsTamperedToOlderRelease(t *testing.T) {
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
		// be answered CURSOR_VERSION_UNSUPPORTED there; the README's limits
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
// cursor this package writes can also be read back". Encode accepts times
// beyond 2^53 Unix milliseconds, which Decode then refuses as CURSOR_INVALID
// ("malformed payload"): the paginator's own cursor looks tampered. Encode
// should refuse what Decode refuses (or Decode read what Encode writes).
func TestBreak13EncodeWritesCursorThatDecodeRefuses(t *testing.T) {
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
