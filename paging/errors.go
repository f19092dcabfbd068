package paging

import "errors"

// Errors callers branch on with errors.Is and errors.As. Every cursor failure
// is a *CursorError whose Is matches the sentinel of its code.

// CursorErrorCode is the machine-readable code of a cursor failure, sent to
// MCP clients in tool errors.
type CursorErrorCode string

// Cursor error codes.
const (
	CursorInvalid            CursorErrorCode = "CURSOR_INVALID"
	CursorExpired            CursorErrorCode = "CURSOR_EXPIRED"
	CursorQueryMismatch      CursorErrorCode = "CURSOR_QUERY_MISMATCH"
	CursorVersionUnsupported CursorErrorCode = "CURSOR_VERSION_UNSUPPORTED"
	// CursorTooLong: the position or snapshot id a cursor would carry is
	// beyond MaxCursorPosition or MaxCursorSnapshotID. No recovery helps:
	// the source's keys or ids are longer than its cursors can carry.
	CursorTooLong CursorErrorCode = "CURSOR_TOO_LONG"
)

// Cursor failures, one sentinel per code.
var (
	ErrCursorInvalid            = &CursorError{Code: CursorInvalid}
	ErrCursorExpired            = &CursorError{Code: CursorExpired}
	ErrCursorQueryMismatch      = &CursorError{Code: CursorQueryMismatch}
	ErrCursorVersionUnsupported = &CursorError{Code: CursorVersionUnsupported}
	ErrCursorTooLong            = &CursorError{Code: CursorTooLong}
)

// CursorError is a cursor that cannot be continued. It is returned in place of
// a page, never as an empty one.
type CursorError struct {
	Code   CursorErrorCode
	Detail string
}

func (e *CursorError) Error() string {
	if e.Detail == "" {
		return "mcpsync: " + string(e.Code)
	}
	return "mcpsync: " + string(e.Code) + ": " + e.Detail
}

// Is reports whether target is a cursor error with the same code.
func (e *CursorError) Is(target error) bool {
	t, ok := target.(*CursorError)
	return ok && t.Code == e.Code
}

// Paging errors.
var (
	// ErrInvalidPageRequest: a page request or query that cannot be served
	// (no sort fields, page size out of range, both cursor and boundary).
	ErrInvalidPageRequest = errors.New("mcpsync: invalid page request")
	// ErrIdempotencyConflict: an idempotency key was reused for a different
	// request of the same query inside the idempotency window.
	ErrIdempotencyConflict = errors.New("mcpsync: idempotency key reused for another request")
	// ErrPageInconsistent: a page contradicts its own fingerprint or the walk
	// it belongs to (another snapshot, items not after the last boundary).
	ErrPageInconsistent = errors.New("mcpsync: page inconsistent with its walk")
	// ErrKeysetOrder: a keyset source returned an item not strictly after
	// the boundary or its predecessor, more items than asked for, or a
	// position that does not match the digest it resolved. It is returned in
	// place of the page.
	ErrKeysetOrder = errors.New("mcpsync: keyset source returned items out of order")
)
