package mcpsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"unicode"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync/internal/wire"
	"github.com/mcpsync/mcpsync/ledger"
)

// Every message begins "mcpsync: " once: an error of this package that wraps
// another prints the other without its prefix, and without mcp-go's
// "transport error: " (see causeText).

// Errors callers branch on with errors.Is: every sentinel of the package, by
// area. The typed errors (*RefusalError, *ScanError, *LimitError, …) carry
// the details for errors.As, and each matches the sentinel its doc names.
var (
	// Refusals of the fence. Every refusal is a *RefusalError whose Is
	// matches both ErrRefused and the sentinel of its StaleReason.

	// ErrRefused matches every refusal of the fence, whatever its reason.
	ErrRefused                = newError("read result refused by the fence")
	ErrStaleOrdinal           = &RefusalError{Reason: ReasonStaleOrdinal}
	ErrStaleAfterClose        = &RefusalError{Reason: ReasonStaleAfterClose}
	ErrGenerationMismatch     = &RefusalError{Reason: ReasonGenerationMismatch}
	ErrUnknownRequest         = &RefusalError{Reason: ReasonUnknownRequest}
	ErrURIMismatch            = &RefusalError{Reason: ReasonURIMismatch}
	ErrNotActive              = &RefusalError{Reason: ReasonNotActive}
	ErrSubjectRevoked         = &RefusalError{Reason: ReasonSubjectRevoked}
	ErrEmptyContents          = &RefusalError{Reason: ReasonEmptyContents}
	ErrInvalidContent         = &RefusalError{Reason: ReasonInvalidContent}
	ErrReconciliationRequired = &RefusalError{Reason: ReasonReconciliationRequired}

	// Lookups: why a version is not served (RefusalOf names each).

	// ErrNoVersion: no version of the URI has been accepted (or it was evicted).
	ErrNoVersion = newError("no accepted version")
	// ErrRevoked: the version was read by a subject whose access was revoked.
	ErrRevoked = newError("version revoked")
	// ErrQuarantined: the newest content was refused by the content guard, so
	// no version of the URI is current.
	ErrQuarantined = newError("newest content quarantined")
	// ErrTombstoned: the resource was confirmed deleted.
	ErrTombstoned = newError("resource tombstoned")
	// ErrTombstonePending: a read said not found and list reconciliation has
	// not yet decided; the last version is no longer served.
	ErrTombstonePending = newError("resource tombstone pending")
	// ErrForbidden: the version was read by another subject.
	ErrForbidden = newError("version bound to another subject")
	// ErrStale: the version is older than its staleness bound, or no open
	// subscription keeps it fresh (Lookup with RequireFresh).
	ErrStale = newError("version past its staleness bound")
	// ErrUnknownURI: no subscription or discovery record exists for the URI.
	ErrUnknownURI = ledger.ErrUnknownURI
	// ErrInvalidURI: the URI cannot be normalized into a key.
	ErrInvalidURI = newError("invalid resource URI")
	// ErrInvalidSubject: the subject is empty, not UTF-8, longer than
	// MaxSubjectBytes or holds NUL.
	ErrInvalidSubject = ledger.ErrInvalidSubject

	// The engine's state machine and its evidence.

	// ErrIllegalTransition matches every *TransitionError.
	ErrIllegalTransition = newError("illegal subscription transition")
	// ErrNoSession: the engine has not been told of a session (BeginSession).
	ErrNoSession = newError("no session")
	// ErrTooManyReads: the URI already has the most reads in flight allowed.
	ErrTooManyReads = newError("too many reads in flight")
	// ErrEvidenceTooOld: list evidence began before the not-found it would
	// confirm, so it cannot tell a deletion from a re-creation since.
	ErrEvidenceTooOld = newError("evidence predates the not-found")
	// ErrUnknownVersion: a derived artifact names a version the ledger never accepted.
	ErrUnknownVersion = newError("unknown resource version")

	// Discovery.

	// ErrScanUnreconciled matches every error of Scan: the catalog it
	// returned is UNRECONCILED and lists nothing.
	ErrScanUnreconciled = errors.New("mcpsync: list scan not reconciled")
	// ErrCursorCycle: a cursor came back twice within one pass.
	ErrCursorCycle = errors.New("mcpsync: list cursor cycle")
	// ErrPageCap: a pass needed more pages than Limits.MaxScanPages.
	ErrPageCap = errors.New("mcpsync: list page cap exceeded")
	// ErrListUnstable: the last attempt saw the listing change
	// (list_changed or differing passes).
	ErrListUnstable = errors.New("mcpsync: listing changed during every scan attempt")
	// ErrSnapshotUnproven: a completeness task was handed a catalog whose
	// completeness is not proven by a snapshot.
	ErrSnapshotUnproven = newError("catalog snapshot unproven")
	// ErrNoResources: the server declares no resources capability, so it
	// lists no resources (or templates) and has none to read.
	ErrNoResources = newError("this server lists no resources")

	// The Client and its connection.

	// ErrNotFound: the server has no resource of the URI: its read said
	// not found (Client.Subscribe).
	ErrNotFound = newError("the server has no such resource")
	// ErrEngineInUse: Connect was given an Engine that another Client,
	// not yet closed, drives. An engine has one Client at a time.
	ErrEngineInUse = newError("engine driven by another client")
	// ErrReconnectGaveUp: a lost session could not be replaced within the
	// ReconnectPolicy; the Client is ConnectionFailed until Reconnect.
	ErrReconnectGaveUp = newError("reconnecting gave up")
	// ErrClientClosed: the Client was closed.
	ErrClientClosed = newError("client closed")
	// ErrCloseTimeout: Close or Shutdown returned before every goroutine of
	// the client did (a request stuck in a server that ignores
	// cancellation).
	ErrCloseTimeout = newError("close timed out")

	// A stdio server's process.

	// ErrServerExited matches every *ExitError.
	ErrServerExited = newError("the server exited")
	// ErrNotJSONRPC matches the *MessageError of a server whose output is
	// not JSON-RPC (FaultNotJSONRPC).
	ErrNotJSONRPC = &MessageError{Fault: FaultNotJSONRPC}
	// ErrOutputClosed is a stdio server whose output ended before it
	// answered initialize, with nothing said; one whose process exited
	// meanwhile is an *ExitError instead.
	ErrOutputClosed = newError("the server closed its output before initialize")

	// Hostile input (Limits): each is reported to ClientOptions.OnFault
	// and returned to the request it concerns.

	// ErrFramingViolation matches the *MessageError of a stdio stream that
	// lost its framing (FaultFramingViolation), which ends the session.
	ErrFramingViolation = &MessageError{Fault: FaultFramingViolation}
	// ErrLimitExceeded matches every *LimitError. Each of the sentinels
	// after it matches the *LimitError of one limit (ErrNotificationRate:
	// a degraded session), or the *MessageError of one fault.
	ErrLimitExceeded     = newError("LIMIT_EXCEEDED")
	ErrMessageTooLarge   = &LimitError{Limit: LimitMessageBytes}
	ErrMessageTooDeep    = &LimitError{Limit: LimitDepth}
	ErrReadTooLarge      = &LimitError{Limit: LimitReadBytes}
	ErrTooManyReadItems  = &LimitError{Limit: LimitReadItems}
	ErrTooManyPageItems  = &LimitError{Limit: LimitPageItems}
	ErrNotificationRate  = &LimitError{Limit: LimitNotificationsPerSecond}
	ErrScanTimeout       = &LimitError{Limit: LimitScanDuration}
	ErrMalformedMessage  = &MessageError{Fault: FaultMalformedMessage}
	ErrUnknownResponseID = &MessageError{Fault: FaultUnknownResponseID}

	// The outbox and the ledger (package ledger holds the rest of the
	// ledger's errors).

	// ErrOutboxGap: the outbox dropped entries a consumer had not passed
	// (its retention bound); *ledger.OutboxGapError says which.
	ErrOutboxGap = ledger.ErrOutboxGap
	// ErrInvalidConsumer: an outbox consumer name is empty, not UTF-8,
	// holds NUL or is longer than MaxSubjectBytes (the rules of subjects).
	ErrInvalidConsumer = newError("invalid outbox consumer name")
	// ErrNotLeaseholder: another worker holds the URI's lease (see
	// ledger.ErrNotLeaseholder).
	ErrNotLeaseholder = ledger.ErrNotLeaseholder
	// ErrLedgerConflict: a compare-and-swap lost to a concurrent writer more
	// often than the retry budget allows.
	ErrLedgerConflict = newError("ledger compare-and-swap conflict")
)

// LookupRefusal says why Lookup would serve nothing.
type LookupRefusal string

// Lookup refusals, one per error of Engine.Lookup.
const (
	LookupNoVersion        LookupRefusal = "NO_VERSION"
	LookupRevoked          LookupRefusal = "REVOKED"
	LookupForbidden        LookupRefusal = "FORBIDDEN"
	LookupQuarantined      LookupRefusal = "QUARANTINED"
	LookupTombstonePending LookupRefusal = "TOMBSTONE_PENDING"
	LookupTombstoned       LookupRefusal = "TOMBSTONED"
	LookupStale            LookupRefusal = "STALE"
	LookupUnknownURI       LookupRefusal = "UNKNOWN_URI"
	LookupInvalidURI       LookupRefusal = "INVALID_URI"
	LookupInvalidSubject   LookupRefusal = "INVALID_SUBJECT"
)

var lookupRefusals = []struct {
	err    error
	reason LookupRefusal
}{
	{ErrNoVersion, LookupNoVersion}, {ErrRevoked, LookupRevoked}, {ErrForbidden, LookupForbidden},
	{ErrQuarantined, LookupQuarantined}, {ErrTombstonePending, LookupTombstonePending},
	{ErrTombstoned, LookupTombstoned}, {ErrStale, LookupStale}, {ErrUnknownURI, LookupUnknownURI},
	{ErrInvalidURI, LookupInvalidURI}, {ErrInvalidSubject, LookupInvalidSubject},
}

// RefusalOf names the refusal an error of Lookup stands for, so a caller
// can switch on one value (and log it) instead of on a chain of errors.Is.
// It reports false for any other error: a ledger that failed, a closed
// client.
func RefusalOf(err error) (LookupRefusal, bool) {
	for _, l := range lookupRefusals {
		if errors.Is(err, l.err) {
			return l.reason, true
		}
	}
	return "", false
}

// refusals holds the sentinel of each reason that has one, by reasonIndex,
// so that the stale path of the fence returns an error without allocating.
var refusals [len(staleReasons)]error

func init() {
	for _, e := range []*RefusalError{
		ErrStaleOrdinal, ErrStaleAfterClose, ErrGenerationMismatch, ErrUnknownRequest,
		ErrURIMismatch, ErrNotActive, ErrSubjectRevoked, ErrEmptyContents,
		ErrInvalidContent, ErrReconciliationRequired,
	} {
		refusals[reasonIndex(e.Reason)] = e
	}
}

// staleReasons lists the reasons this package gives, in the order of
// reasonIndex.
var staleReasons = [...]StaleReason{
	ReasonStaleOrdinal, ReasonStaleAfterClose, ReasonGenerationMismatch, ReasonUnknownRequest,
	ReasonURIMismatch, ReasonNotActive, ReasonSubjectRevoked, ReasonEmptyContents,
	ReasonInvalidContent, ReasonNotSubscribed, ReasonReconciliationRequired, ReasonLimitExceeded,
}

// reasonIndex returns the index of reason in staleReasons, or -1. The fence
// counts and names refusals by it without hashing.
func reasonIndex(reason StaleReason) int {
	switch reason {
	case ReasonStaleOrdinal:
		return 0
	case ReasonStaleAfterClose:
		return 1
	case ReasonGenerationMismatch:
		return 2
	case ReasonUnknownRequest:
		return 3
	case ReasonURIMismatch:
		return 4
	case ReasonNotActive:
		return 5
	case ReasonSubjectRevoked:
		return 6
	case ReasonEmptyContents:
		return 7
	case ReasonInvalidContent:
		return 8
	case ReasonNotSubscribed:
		return 9
	case ReasonReconciliationRequired:
		return 10
	case ReasonLimitExceeded:
		return 11
	}
	return -1
}

// RefusalError is a read result the fence did not accept. The stale receipt
// recorded for it carries the same reason and the full context.
type RefusalError struct {
	Reason StaleReason
	// Detail says what was wrong with the input, when the reason alone does not
	// (which content item, which URI). It is empty on the sentinels.
	Detail string
	// Err is the underlying cause, such as a base64 decoding error.
	Err error
}

func (e *RefusalError) Error() string { return errPrefix + e.text() }

func (e *RefusalError) text() string {
	msg := "refused: " + string(e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + causeText(e.Err)
	}
	return msg
}

func (e *RefusalError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRefused or a refusal with the same reason.
func (e *RefusalError) Is(target error) bool {
	if target == ErrRefused {
		return true
	}
	t, ok := target.(*RefusalError)
	return ok && t.Reason == e.Reason
}

func refusal(reason StaleReason) error {
	if i := reasonIndex(reason); i >= 0 && refusals[i] != nil {
		return refusals[i]
	}
	return &RefusalError{Reason: reason}
}

// TransitionError is a state change the subscription state machine does not
// allow. The state is left as it was.
type TransitionError struct {
	URI   string
	From  ledger.SubscriptionState
	Event string
}

func (e *TransitionError) Error() string { return errPrefix + e.text() }

func (e *TransitionError) text() string {
	return fmt.Sprintf("%s: %s not allowed in state %s", e.URI, e.Event, e.From)
}

// Is makes every TransitionError match ErrIllegalTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// JSON-RPC error codes the library branches on (mcp-go's mcp.INVALID_PARAMS
// and mcp.RESOURCE_NOT_FOUND).
const (
	// codeInvalidParams is JSON-RPC's invalid params: an invalid cursor on
	// list methods, and resource-not-found on resources/read from protocol
	// 2026-07-28 on.
	codeInvalidParams = -32602
	// codeResourceNotFound is MCP's resource-not-found before 2026-07-28;
	// later clients still accept it.
	codeResourceNotFound = -32002
)

// RPCError is a JSON-RPC error the server answered a request with, its code,
// message and data kept (mcp-go turns unknown codes into plain errors; the
// session layer's transport wrapper keeps them). It prints as the server's
// answer: "mcpsync: server answered -32601 method not found to tools/list:
// Method not found".
type RPCError struct {
	Method  string // the request's method
	Code    int
	Message string
	Data    json.RawMessage
}

func (e *RPCError) Error() string { return errPrefix + e.text() }

func (e *RPCError) text() string {
	msg := "server answered " + strconv.Itoa(e.Code)
	if name := codeNames[e.Code]; name != "" {
		msg += " " + name
	}
	if e.Method != "" {
		msg += " to " + e.Method
	}
	if e.Message != "" {
		msg += ": " + serverText(e.Message)
	}
	return msg
}

// serverTextBytes is how much of a server's message an error prints.
const serverTextBytes = 512

// serverText is a server's message as this package's errors print it:
// quoted when it holds a control character or this package's prefix, so
// that it cannot forge a line of a log or an error of the library, and cut
// at serverTextBytes, saying how long it was.
func serverText(s string) string {
	n := len(s)
	if n > serverTextBytes {
		s = strings.ToValidUTF8(s[:serverTextBytes], "")
	}
	if strings.Contains(s, strings.TrimSpace(errPrefix)) || strings.ContainsFunc(s, unicode.IsControl) {
		s = strconv.Quote(s)
	}
	if n > serverTextBytes {
		s += fmt.Sprintf("… (%d bytes)", n)
	}
	return s
}

// codeNames names the codes of JSON-RPC 2.0 and MCP in RPCError's message.
var codeNames = map[int]string{
	-32700:               "parse error",
	-32600:               "invalid request",
	-32601:               "method not found",
	codeInvalidParams:    "invalid params",
	-32603:               "internal error",
	codeResourceNotFound: "resource not found",
}

// ResourceNotFound reports whether the error answers resources/read with
// resource-not-found: -32002 (MCP before 2026-07-28) or -32602 (from
// 2026-07-28 on, where -32002 stays accepted).
//
// -32602 is taken as not-found in every era: the official Go SDK sends it
// from v1.7.0 on for sessions of any revision (SEP-2164), and a not-found
// only makes a subscription TOMBSTONE_PENDING; list reconciliation must
// confirm the deletion, so a server that meant "invalid params" loses
// nothing. The decision is by code alone, never by message text.
func (e *RPCError) ResourceNotFound() bool {
	return e.Method == "resources/read" && (e.Code == codeResourceNotFound || e.Code == codeInvalidParams)
}

// Errors of a stdio server's process.

// ExitError is a stdio server that exited: before it answered initialize
// ("the server exited before initialize (exit status 1)"), after that but
// before the handshake was done ("the server exited (exit status 0)"), or
// while its session was open (the loss OnError is told, wrapped in a
// *ConnectionError). It carries the end of the server's stderr when the
// dialer kept it (CommandDialer, unless Command.Prepare set a Stderr). It
// matches ErrServerExited; errors.As to *exec.ExitError gives the status.
// A server that wrote a line that is not JSON-RPC first fails with a
// *MessageError of FaultNotJSONRPC, which wraps its ExitError when it
// exited.
type ExitError struct {
	// Err is what waiting for the process returned: an *exec.ExitError
	// for a status other than 0 or a signal, nil for exit status 0.
	Err error
	// Stderr is the end of what the server wrote to its stderr (its last
	// kilobyte at most), when the library kept it; "" otherwise.
	Stderr string
	// BeforeInitialize: the server exited before it answered initialize.
	BeforeInitialize bool
}

func (e *ExitError) Error() string { return errPrefix + e.text() }

func (e *ExitError) text() string {
	msg := "the server exited"
	if e.BeforeInitialize {
		msg += " before initialize"
	}
	var exit *exec.ExitError
	switch {
	case e.Err == nil:
		msg += " (exit status 0)"
	case errors.As(e.Err, &exit):
		msg += " (" + exit.String() + ")"
	default:
		msg += " (" + causeText(e.Err) + ")"
	}
	if e.Stderr != "" {
		msg += fmt.Sprintf(": stderr: %q", e.Stderr)
	}
	return msg
}

func (e *ExitError) Unwrap() error { return e.Err }

// Is makes every ExitError match ErrServerExited.
func (e *ExitError) Is(target error) bool { return target == ErrServerExited }

// newError returns a sentinel error that prints as errPrefix + text and
// reads as text inside another error's message.
func newError(text string) error { return &sentinel{text} }

type sentinel struct{ msg string }

func (e *sentinel) Error() string { return errPrefix + e.msg }

func (e *sentinel) text() string { return e.msg }

// errPrefix begins every message of this package's errors, once.
const errPrefix = wire.Prefix

// causeText is how err reads inside the message of an error of this
// package: without the "mcpsync: " its own message begins with, and without
// the "transport error: " mcp-go puts before whatever a transport returned.
func causeText(err error) string {
	if te, ok := err.(*transport.Error); ok {
		return causeText(te.Err)
	}
	if t, ok := err.(interface{ text() string }); ok {
		return t.text()
	}
	return wire.Text(err)
}

// errorf is fmt.Errorf for this package's messages: the message begins
// "mcpsync: " once, each error among args reads as causeText says, and %w
// wraps as fmt.Errorf's does.
func errorf(format string, args ...any) error {
	texts := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok {
			a = causeText(err)
		}
		texts[i] = a
	}
	return &wrapped{msg: fmt.Sprintf(strings.ReplaceAll(format, "%w", "%s"), texts...), err: fmt.Errorf(format, args...)}
}

// wrapped is an error of errorf.
type wrapped struct {
	msg string
	err error // fmt.Errorf's, for what it wraps
}

func (e *wrapped) Error() string { return errPrefix + e.msg }

func (e *wrapped) text() string { return e.msg }

func (e *wrapped) Unwrap() []error {
	switch u := e.err.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}
