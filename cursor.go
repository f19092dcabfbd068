package mcpsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"iter"
)

// List cursors as discovery sees them: opaque, passed from one page to the
// next untouched, and remembered only as digests, for receipts and to find a
// cursor that comes back within a pass.

// cursorDigest returns the digest a receipt keeps of a cursor: "sha256:" and
// the lower-case hex SHA-256 of the cursor's bytes.
func cursorDigest(cursor string) string {
	sum := sha256.Sum256([]byte(cursor))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// walkedPage is one page of a pass.
type walkedPage struct {
	index        int
	cursorDigest string // of the cursor sent for the page; "" for the first
	page         listPage
}

// walkPages fetches the pages of one pass, from the first until the listing
// ends, and yields an error and stops on a cursor cycle, the page cap, a
// failed page or the end of ctx. Cursors go from one page to the next
// untouched; only their digests are remembered.
func (s *scanner) walkPages(ctx context.Context, era Era, pages pageFunc) iter.Seq2[walkedPage, error] {
	return func(yield func(walkedPage, error) bool) {
		var cursor *string
		var digest string
		sent := make(map[string]struct{})
		for index := 0; ; index++ {
			if err := ctx.Err(); err != nil {
				yield(walkedPage{}, err)
				return
			}
			p, err := pages(ctx, cursor)
			if err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
					yield(walkedPage{}, err)
					return
				}
				fault := FaultPageError
				// -32602 answering a cursor the server handed out means
				// the cursor is no longer valid (pagination, every
				// revision since 2024-11-05). On the first page there is
				// no cursor to blame.
				if rpc, ok := errors.AsType[*RPCError](err); ok && rpc.Code == codeInvalidParams && cursor != nil {
					fault = FaultInvalidCursor
				}
				yield(walkedPage{}, &passError{Fault: fault, Page: index, CursorDigest: digest, Err: err})
				return
			}
			if !yield(walkedPage{index: index, cursorDigest: digest, page: p}, nil) {
				return
			}
			if listingEnded(era, p.NextCursor) {
				return
			}
			next := cursorDigest(*p.NextCursor)
			if _, cycled := sent[next]; cycled {
				yield(walkedPage{}, &passError{Fault: FaultCursorCycle, Page: index + 1, CursorDigest: next})
				return
			}
			if index+1 >= s.maxPages {
				yield(walkedPage{}, &passError{Fault: FaultPageCap, Page: index + 1, CursorDigest: next})
				return
			}
			sent[next] = struct{}{}
			cursor, digest = p.NextCursor, next
		}
	}
}

// listingEnded reports whether a page with this nextCursor is the last one. Up to
// protocol 2025-11-25 a missing or empty nextCursor ends a listing; from
// 2026-07-28 on "" is a valid cursor and only an absent one ends it.
func listingEnded(era Era, next *string) bool {
	if next == nil {
		return true
	}
	return era == EraLegacy && *next == ""
}
