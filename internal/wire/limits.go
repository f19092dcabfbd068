package wire

import "fmt"

// Limits bound what one peer can make the client hold. A zero field is no
// bound at this layer; the session layer fills in its defaults.
type Limits struct {
	MessageBytes           int64 // one JSON-RPC message (a stdio line, an HTTP body, an SSE event's data), framing excluded
	Depth                  int   // JSON nesting of one message
	ReadBytes              int64 // decoded text and blob bytes of one resources/read result
	ReadItems              int   // content items of one resources/read result
	PageItems              int   // items of one list page
	NotificationsPerSecond int   // per session, before it is degraded
}

// Limit names one bound of Limits, as receipts and errors report it.
type Limit string

// Limits as named in receipts.
const (
	LimitMessageBytes           Limit = "MaxMessageBytes"
	LimitDepth                  Limit = "MaxDepth"
	LimitReadBytes              Limit = "MaxReadBytes"
	LimitReadItems              Limit = "MaxReadItems"
	LimitPageItems              Limit = "MaxPageItems"
	LimitNotificationsPerSecond Limit = "MaxNotificationsPerSecond"
	LimitScanPages              Limit = "MaxScanPages"
	LimitScanDuration           Limit = "ScanTimeout"
)

// ErrLimitExceeded matches every *LimitError.
var ErrLimitExceeded = NewError("LIMIT_EXCEEDED")

// LimitError is input refused because it passed a limit. Its Is matches
// ErrLimitExceeded and any *LimitError naming the same Limit, so the
// per-limit sentinels work with errors.Is.
type LimitError struct {
	Limit Limit
	// Max is the configured bound; Observed what the peer sent (for a
	// message cut off at the bound, the bytes seen so far).
	Max, Observed int64
	// Method is the request the input answered, when known.
	Method string
}

func (e *LimitError) Error() string { return Prefix + e.text() }

func (e *LimitError) text() string {
	msg := fmt.Sprintf("LIMIT_EXCEEDED: %s: observed %d, limit %d", e.Limit, e.Observed, e.Max)
	if e.Method != "" {
		msg += " (" + e.Method + ")"
	}
	return msg
}

// Is reports whether target is ErrLimitExceeded or a LimitError of the same limit.
func (e *LimitError) Is(target error) bool {
	if target == ErrLimitExceeded {
		return true
	}
	t, ok := target.(*LimitError)
	return ok && t.Limit == e.Limit
}

// MessageFault names what is wrong with a message that cannot be delivered.
type MessageFault string

// Message faults.
const (
	// FaultMalformed: the message is not JSON, or not a JSON-RPC message.
	FaultMalformed MessageFault = "MALFORMED_MESSAGE"
	// FaultUnknownID: a response whose id matches no request in flight
	// (missing, null, or never sent), or over HTTP, is not the id of the
	// request whose response carried it.
	FaultUnknownID MessageFault = "UNKNOWN_RESPONSE_ID"
)

// MessageError is a message the wire layer refused. Its Is matches any
// *MessageError of the same Fault.
type MessageError struct {
	Fault MessageFault
	// ID is the message's id as sent (raw JSON), when it had one.
	ID string
	// Offset is the byte at which a malformed message stops being JSON.
	Offset int64
	// Err is the decoder's error, if any.
	Err error
}

func (e *MessageError) Error() string { return Prefix + e.text() }

func (e *MessageError) text() string {
	msg := string(e.Fault)
	if e.ID != "" {
		msg += " id " + e.ID
	}
	if e.Err != nil {
		msg += ": " + Text(e.Err)
	}
	return msg
}

func (e *MessageError) Unwrap() error { return e.Err }

// Is reports whether target is a MessageError of the same fault.
func (e *MessageError) Is(target error) bool {
	t, ok := target.(*MessageError)
	return ok && t.Fault == e.Fault
}

// ErrFramingViolation matches every *FramingError.
var ErrFramingViolation = NewError("stdio framing violation")

// FramingError ends a stdio session: the stream cannot be resynchronized,
// so every request in flight and every later one fails with it.
type FramingError struct {
	Err error // the *LimitError of the line, or the read error
}

func (e *FramingError) Error() string { return Prefix + e.text() }

func (e *FramingError) text() string { return "stdio framing violation: " + Text(e.Err) }

func (e *FramingError) Unwrap() error { return e.Err }

// Is makes every FramingError match ErrFramingViolation.
func (e *FramingError) Is(target error) bool { return target == ErrFramingViolation }

// ErrSessionDegraded matches every *DegradedError.
var ErrSessionDegraded = NewError("session degraded")

// DegradedError reports a session that passed a rate limit: what it sent
// beyond the limit is dropped, and staleness is bounded by revalidation
// reads until the rate falls.
type DegradedError struct {
	Err error // the *LimitError of the rate
	// Dropped counts the notifications dropped so far in this session.
	Dropped int64
}

func (e *DegradedError) Error() string { return Prefix + e.text() }

func (e *DegradedError) text() string {
	return fmt.Sprintf("session degraded (%d notifications dropped): %s", e.Dropped, Text(e.Err))
}

func (e *DegradedError) Unwrap() error { return e.Err }

// Is makes every DegradedError match ErrSessionDegraded.
func (e *DegradedError) Is(target error) bool { return target == ErrSessionDegraded }
