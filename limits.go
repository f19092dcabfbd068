package mcpsync

import (
	"errors"
	"fmt"
	"time"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// Limits bound everything a server can make a Client spend. A zero field
// means its default; docs/limits.md gives the reasoning for each. A server that
// passes a limit gets its input refused with an error naming the limit (a
// *LimitError, matching ErrLimitExceeded) and, for a read, a stale receipt
// with ReasonLimitExceeded; the session goes on wherever the transport
// allows.
type Limits struct {
	// MaxReadBytes bounds the decoded text and blob bytes of one
	// resources/read result; 0 means 16 MiB.
	MaxReadBytes int64
	// MaxReadItems bounds the content items of one resources/read result;
	// 0 means 10,000.
	MaxReadItems int
	// MaxPageItems bounds the items of one list page; 0 means 100,000.
	MaxPageItems int
	// MaxScanPages bounds the pages of one scan pass; 0 means 1,000.
	MaxScanPages int
	// ScanTimeout bounds a whole scan, every attempt and backoff included;
	// 0 means 5 minutes.
	ScanTimeout time.Duration
	// MaxMessageBytes bounds one JSON-RPC message on every transport the
	// library builds (CommandDialer, StreamDialer, HTTPDialer): a stdio line,
	// an HTTP body, an SSE event. Framing does not count: a stdio line is
	// measured without its "\n" or "\r\n", an HTTP JSON body without the
	// whitespace that ends it, an SSE event by its data as its data lines
	// join. A stdio line over it ends the session with a *MessageError of
	// FaultFramingViolation, since the stream cannot be resynchronized. 0 means 32 MiB.
	MaxMessageBytes int64
	// MaxDepth bounds the JSON nesting of one message; 0 means 128.
	MaxDepth int
	// MaxNotificationsPerSecond is the notification rate of one session
	// beyond which it is degraded: the excess of each second is dropped and
	// revalidation reads bound staleness until the rate falls. 0 means
	// 10,000.
	MaxNotificationsPerSecond int
}

// The limits' defaults, and the one bound no option changes.
const (
	DefaultMaxReadBytes              = 16 << 20
	DefaultMaxReadItems              = 10_000
	DefaultMaxPageItems              = 100_000
	DefaultMaxScanPages              = 1_000
	DefaultScanTimeout               = 5 * time.Minute
	DefaultMaxMessageBytes           = 32 << 20
	DefaultMaxDepth                  = 128
	DefaultMaxNotificationsPerSecond = 10_000

	// MaxSubjectBytes bounds a subject (of a read, a lookup, a revocation,
	// an artifact): every ledger can then store it, index it and revoke it
	// (a PostgreSQL index entry holds about 2.7 kB, a bbolt key 32 KiB).
	MaxSubjectBytes = 1024
)

// withDefaults returns l with defaults for zero fields, or an error for a
// negative one or a message bound too small for a read that fits.
func (l *Limits) withDefaults() (Limits, error) {
	var o Limits
	if l != nil {
		o = *l
	}
	if o.MaxReadBytes < 0 || o.MaxReadItems < 0 || o.MaxPageItems < 0 || o.MaxScanPages < 0 ||
		o.ScanTimeout < 0 || o.MaxMessageBytes < 0 || o.MaxDepth < 0 || o.MaxNotificationsPerSecond < 0 {
		return o, errors.New("mcpsync: negative limit")
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MaxReadBytes, DefaultMaxReadBytes)
	def(&o.MaxMessageBytes, DefaultMaxMessageBytes)
	defInt(&o.MaxReadItems, DefaultMaxReadItems)
	defInt(&o.MaxPageItems, DefaultMaxPageItems)
	defInt(&o.MaxScanPages, DefaultMaxScanPages)
	defInt(&o.MaxDepth, DefaultMaxDepth)
	defInt(&o.MaxNotificationsPerSecond, DefaultMaxNotificationsPerSecond)
	if o.ScanTimeout == 0 {
		o.ScanTimeout = DefaultScanTimeout
	}
	return o, nil
}

func (l Limits) wire() wire.Limits {
	return wire.Limits{
		MessageBytes: l.MaxMessageBytes, Depth: l.MaxDepth,
		ReadBytes: l.MaxReadBytes, ReadItems: l.MaxReadItems, PageItems: l.MaxPageItems,
		NotificationsPerSecond: l.MaxNotificationsPerSecond,
	}
}

// LimitName names one field of Limits, as receipts and errors report it.
type LimitName string

// Limit names.
const (
	LimitMessageBytes           LimitName = "MaxMessageBytes"
	LimitDepth                  LimitName = "MaxDepth"
	LimitReadBytes              LimitName = "MaxReadBytes"
	LimitReadItems              LimitName = "MaxReadItems"
	LimitPageItems              LimitName = "MaxPageItems"
	LimitNotificationsPerSecond LimitName = "MaxNotificationsPerSecond"
	LimitScanDuration           LimitName = "ScanTimeout"
)

// Errors of hostile input. Each is both reported to ClientOptions.OnFault as
// it happens and returned to the request it concerns, never left to a
// timeout.

// LimitError is input over a limit: which one, its bound and what was
// observed. It matches ErrLimitExceeded and the sentinel of its limit (any
// *LimitError naming the same Limit).
//
// One of LimitNotificationsPerSecond is a degraded session, told to
// ClientOptions.OnFault: what the server sent beyond the limit is dropped,
// and staleness is bounded by revalidation reads until the rate falls.
type LimitError struct {
	Limit LimitName
	// Max is the configured bound; Observed what the peer sent (for a
	// message cut off at the bound, the bytes seen so far).
	Max, Observed int64
	// Method is the request the input answered, when known.
	Method string
	// Dropped counts, for LimitNotificationsPerSecond, the notifications
	// dropped so far in the session.
	Dropped int64
}

func (e *LimitError) Error() string { return errPrefix + e.text() }

func (e *LimitError) text() string {
	msg := fmt.Sprintf("LIMIT_EXCEEDED: %s: observed %d, limit %d", e.Limit, e.Observed, e.Max)
	if e.Method != "" {
		msg += " (" + e.Method + ")"
	}
	if e.Limit == LimitNotificationsPerSecond {
		msg = fmt.Sprintf("session degraded (%d notifications dropped): %s", e.Dropped, msg)
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

// MessageFault is the fault of a MessageError.
type MessageFault string

// Message faults.
const (
	// FaultMalformedMessage: the message is not JSON, or not a JSON-RPC
	// message.
	FaultMalformedMessage MessageFault = "MALFORMED_MESSAGE"
	// FaultUnknownResponseID: a response whose id matches no request in
	// flight (missing, null, or never sent), or over HTTP, is not the id
	// of the request whose response carried it.
	FaultUnknownResponseID MessageFault = "UNKNOWN_RESPONSE_ID"
	// FaultFramingViolation: a stdio line over MaxMessageBytes, or a stream
	// that broke mid-line (Err wraps io.ErrUnexpectedEOF), leaves no way to
	// find the next message: the session ends, and every request in flight
	// and every later one fails with it.
	FaultFramingViolation MessageFault = "FRAMING_VIOLATION"
	// FaultNotJSONRPC: a stdio server's output began with a line that is
	// not JSON-RPC (Line): not an MCP server, or one that logs to its
	// stdout. The dial fails with it.
	FaultNotJSONRPC MessageFault = "NOT_JSON_RPC"
)

// MessageError is what a server sent that cannot be taken as JSON-RPC:
// a message that is not (a method and a result at once among the ways),
// a response whose id matches no request in flight (over HTTP: not the
// request whose response it is), a stdio stream that lost its framing, or
// the output of a program that is no MCP server. Fault says which. A
// request it can be traced to fails with it; on stdio one that names no
// request fails every request in flight, since any of them may have been the
// one it answered. Its Is matches any *MessageError of the same Fault.
type MessageError struct {
	Fault MessageFault
	// ID is the message's id as sent (raw JSON), when it had one.
	ID string
	// Offset is the byte at which a malformed message stops being JSON.
	Offset int64
	// Line is, on FaultNotJSONRPC, the beginning of the line that is not
	// JSON-RPC, at most 64 bytes of it.
	Line []byte
	// Err is the cause, if any: the decoder's error; on
	// FaultFramingViolation the *LimitError of the line or the read error;
	// on FaultNotJSONRPC the server's *ExitError, when it exited.
	Err error
}

func (e *MessageError) Error() string { return errPrefix + e.text() }

func (e *MessageError) text() string {
	switch {
	case e.Fault == FaultFramingViolation && e.Err != nil:
		return "stdio framing violation: " + causeText(e.Err)
	case e.Fault == FaultFramingViolation:
		return "stdio framing violation"
	case e.Fault == FaultNotJSONRPC && e.Line != nil:
		return fmt.Sprintf("the server's output is not JSON-RPC: %q", e.Line)
	case e.Fault == FaultNotJSONRPC:
		return "the server's output is not JSON-RPC"
	}
	msg := string(e.Fault)
	if e.ID != "" {
		msg += " id " + e.ID
	}
	if e.Err != nil {
		msg += ": " + causeText(e.Err)
	}
	return msg
}

func (e *MessageError) Unwrap() error { return e.Err }

// Is reports whether target is a MessageError of the same fault.
func (e *MessageError) Is(target error) bool {
	t, ok := target.(*MessageError)
	return ok && t.Fault == e.Fault
}

// wireFaults builds this package's errors for the wire layer, which
// declares none of its own (wire.Faults).
type wireFaults struct{}

func (wireFaults) Limit(lim wire.Limit, max, observed int64, method string) error {
	return &LimitError{Limit: LimitName(lim), Max: max, Observed: observed, Method: method}
}

func (wireFaults) Message(fault wire.MessageFault, id string, offset int64, err error) error {
	return &MessageError{Fault: MessageFault(fault), ID: id, Offset: offset, Err: err}
}

func (wireFaults) Framing(cause error) error {
	return &MessageError{Fault: FaultFramingViolation, Err: cause}
}

// Degraded is the rate's *LimitError (cause, of Limit) with the count of
// what it dropped.
func (wireFaults) Degraded(dropped int64, cause error) error {
	if lim, ok := cause.(*LimitError); ok {
		lim.Dropped = dropped
	}
	return cause
}

func (wireFaults) Exit(wait error, stderr string, beforeInitialize bool) error {
	return &ExitError{Err: wait, Stderr: stderr, BeforeInitialize: beforeInitialize}
}

func (wireFaults) Output(first []byte, exit error) error {
	return &MessageError{Fault: FaultNotJSONRPC, Line: first, Err: exit}
}

func (wireFaults) OutputClosed() error { return ErrOutputClosed }

// limitResult is the read result of a read refused for a limit.
func limitResult(err *LimitError) ReadResult {
	return ReadResult{err: &RefusalError{Reason: ReasonLimitExceeded, Detail: fmt.Sprintf("%s: observed %d, limit %d", err.Limit, err.Observed, err.Max), Err: err}}
}
