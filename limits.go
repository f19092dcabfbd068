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
	// MaxScanPages bounds the pages of one scan pass (ScannerOptions.MaxPages
	// wins when set); 0 means 1,000.
	MaxScanPages int
	// ScanTimeout bounds a whole scan, every attempt and backoff included;
	// 0 means 5 minutes.
	ScanTimeout time.Duration
	// MaxMessageBytes bounds one JSON-RPC message on every transport the
	// library builds (CommandDialer, StdioDialer, StreamDialer, HTTPDialer): a stdio line,
	// an HTTP body, an SSE event. Framing does not count: a stdio line is
	// measured without its "\n" or "\r\n", an HTTP JSON body without the
	// whitespace that ends it, an SSE event by its data as its data lines
	// join. A stdio line over it ends the session with a *FramingError,
	// since the stream cannot be resynchronized. 0 means 32 MiB.
	MaxMessageBytes int64
	// MaxDepth bounds the JSON nesting of one message; 0 means 128.
	MaxDepth int
	// MaxNotificationsPerSecond is the notification rate of one session
	// beyond which it is degraded: the excess of each second is dropped and
	// revalidation reads bound staleness until the rate falls. 0 means
	// 10,000.
	MaxNotificationsPerSecond int
}

// Default limits.
const (
	DefaultMaxReadBytes              = 16 << 20
	DefaultMaxReadItems              = 10_000
	DefaultMaxPageItems              = 100_000
	DefaultMaxScanPages              = 1_000
	DefaultScanTimeout               = 5 * time.Minute
	DefaultMaxMessageBytes           = 32 << 20
	DefaultMaxDepth                  = 128
	DefaultMaxNotificationsPerSecond = 10_000
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
type LimitName = wire.Limit

// Limit names.
const (
	LimitMessageBytes           = wire.LimitMessageBytes
	LimitDepth                  = wire.LimitDepth
	LimitReadBytes              = wire.LimitReadBytes
	LimitReadItems              = wire.LimitReadItems
	LimitPageItems              = wire.LimitPageItems
	LimitNotificationsPerSecond = wire.LimitNotificationsPerSecond
	LimitScanDuration           = wire.LimitScanDuration
)

// Errors of hostile input. Each is both reported to ClientOptions.OnFault as
// it happens and returned to the request it concerns, never left to a
// timeout.
type (
	// LimitError is input over a limit: which one, its bound and what was
	// observed. It matches ErrLimitExceeded and the sentinel of its limit.
	LimitError = wire.LimitError
	// MessageError is a message that is not JSON-RPC (a method and a
	// result at once among the ways), or a response whose id matches no
	// request in flight (over HTTP: not the request whose response it is).
	// A request it can be traced to fails with it; on stdio one that names
	// no request fails every request in flight, since any of them may have
	// been the one it answered.
	MessageError = wire.MessageError
	// FramingError ends a stdio session: a line over MaxMessageBytes, or a
	// stream that broke mid-line (wrapping io.ErrUnexpectedEOF), leaves no
	// way to find the next message.
	FramingError = wire.FramingError
	// DegradedError reports a session over MaxNotificationsPerSecond.
	DegradedError = wire.DegradedError
	// MessageFault is the fault of a MessageError.
	MessageFault = wire.MessageFault
)

// Message faults.
const (
	FaultMalformedMessage  = wire.FaultMalformed
	FaultUnknownResponseID = wire.FaultUnknownID
)

// Sentinels of hostile input, for errors.Is.
var (
	// ErrLimitExceeded matches every *LimitError.
	ErrLimitExceeded = wire.ErrLimitExceeded
	// ErrFramingViolation matches every *FramingError.
	ErrFramingViolation = wire.ErrFramingViolation
	// ErrSessionDegraded matches every *DegradedError.
	ErrSessionDegraded = wire.ErrSessionDegraded

	ErrMessageTooLarge   = &LimitError{Limit: LimitMessageBytes}
	ErrMessageTooDeep    = &LimitError{Limit: LimitDepth}
	ErrReadTooLarge      = &LimitError{Limit: LimitReadBytes}
	ErrTooManyReadItems  = &LimitError{Limit: LimitReadItems}
	ErrTooManyPageItems  = &LimitError{Limit: LimitPageItems}
	ErrNotificationRate  = &LimitError{Limit: LimitNotificationsPerSecond}
	ErrScanTimeout       = &LimitError{Limit: LimitScanDuration}
	ErrMalformedMessage  = &MessageError{Fault: FaultMalformedMessage}
	ErrUnknownResponseID = &MessageError{Fault: FaultUnknownResponseID}
)

// ReasonLimitExceeded: the read result passed a limit (Limits); the stale
// receipt's detail names the limit, its bound and the observed size.
const ReasonLimitExceeded StaleReason = "LIMIT_EXCEEDED"

// limitResult is the read result of a read refused for a limit.
func limitResult(err *LimitError) ReadResult {
	return ReadResult{err: &RefusalError{Reason: ReasonLimitExceeded, Detail: fmt.Sprintf("%s: observed %d, limit %d", err.Limit, err.Observed, err.Max), Err: err}}
}
