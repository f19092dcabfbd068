package mcpsync

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Errors callers branch on with errors.Is and errors.As. Every refusal of the
// fence is a *RefusalError whose Is matches both ErrRefused and the sentinel of
// its reason.

// ErrRefused matches every refusal of the fence, whatever its reason.
var ErrRefused = errors.New("mcpsync: read result refused by the fence")

// Fence refusals, one per StaleReason.
var (
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
)

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

func (e *RefusalError) Error() string {
	msg := "mcpsync: refused: " + string(e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
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

// Lookup and state errors.
var (
	// ErrNoVersion: no version of the URI has been accepted (or it was evicted).
	ErrNoVersion = errors.New("mcpsync: no accepted version")
	// ErrRevoked: the version was read by a subject whose access was revoked.
	ErrRevoked = errors.New("mcpsync: version revoked")
	// ErrQuarantined: the newest content was refused by the content guard, so
	// no version of the URI is current.
	ErrQuarantined = errors.New("mcpsync: newest content quarantined")
	// ErrTombstoned: the resource was confirmed deleted.
	ErrTombstoned = errors.New("mcpsync: resource tombstoned")
	// ErrTombstonePending: a read said not found and list reconciliation has
	// not yet decided; the last version is no longer served.
	ErrTombstonePending = errors.New("mcpsync: resource tombstone pending")
	// ErrForbidden: the version was read by another subject.
	ErrForbidden = errors.New("mcpsync: version bound to another subject")
	// ErrUnknownURI: no subscription or discovery record exists for the URI.
	ErrUnknownURI = errors.New("mcpsync: unknown resource URI")
	// ErrEngineInUse: Connect was given an Engine that another Client,
	// not yet closed, drives. An engine has one Client at a time.
	ErrEngineInUse = errors.New("mcpsync: engine driven by another client")
	// ErrInvalidURI: the URI cannot be normalized into a key.
	ErrInvalidURI = errors.New("mcpsync: invalid resource URI")
	// ErrUnknownVersion: a derived artifact names a version the ledger never accepted.
	ErrUnknownVersion = errors.New("mcpsync: unknown resource version")
	// ErrIllegalTransition matches every *TransitionError.
	ErrIllegalTransition = errors.New("mcpsync: illegal subscription transition")
	// ErrSnapshotUnproven: a completeness task was handed a catalog whose
	// completeness is not proven by a snapshot.
	ErrSnapshotUnproven = errors.New("mcpsync: catalog snapshot unproven")
	// ErrInvalidSubject: the subject is empty, not UTF-8, longer than
	// MaxSubjectBytes or holds NUL.
	ErrInvalidSubject = errors.New("mcpsync: invalid subject")
	// ErrNoSession: the engine has not been told of a session (BeginSession).
	ErrNoSession = errors.New("mcpsync: no session")
	// ErrTooManyReads: the URI already has the most reads in flight allowed.
	ErrTooManyReads = errors.New("mcpsync: too many reads in flight")
	// ErrEvidenceTooOld: list evidence began before the not-found it would
	// confirm, so it cannot tell a deletion from a re-creation since.
	ErrEvidenceTooOld = errors.New("mcpsync: evidence predates the not-found")
	// ErrStale: the version is older than its staleness bound, or no open
	// subscription keeps it fresh (Lookup with RequireFresh).
	ErrStale = errors.New("mcpsync: version past its staleness bound")
	// ErrReconnectGaveUp: a lost session could not be replaced within the
	// ReconnectPolicy; the Client is ConnectionFailed until Reconnect.
	ErrReconnectGaveUp = errors.New("mcpsync: reconnecting gave up")
	// ErrNotFound: the server has no resource of the URI: its read said
	// not found (Client.Subscribe).
	ErrNotFound = errors.New("mcpsync: the server has no such resource")
	// ErrNoResources: the server declares no resources capability, so it
	// lists no resources (or templates) and has none to read.
	ErrNoResources = errors.New("mcpsync: this server lists no resources")
	// ErrClientClosed: the Client was closed.
	ErrClientClosed = errors.New("mcpsync: client closed")
	// ErrCloseTimeout: Close or Shutdown returned before every goroutine of
	// the client did (a request stuck in a server that ignores
	// cancellation).
	ErrCloseTimeout = errors.New("mcpsync: close timed out")
	// ErrLedgerConflict: a compare-and-swap lost to a concurrent writer more
	// often than the retry budget allows.
	ErrLedgerConflict = errors.New("mcpsync: ledger compare-and-swap conflict")
)

// TransitionError is a state change the subscription state machine does not
// allow. The state is left as it was.
type TransitionError struct {
	URI   string
	From  SubscriptionState
	Event string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("mcpsync: %s: %s not allowed in state %s", e.URI, e.Event, e.From)
}

// Is makes every TransitionError match ErrIllegalTransition.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// JSON-RPC error codes the library branches on.
const (
	// CodeInvalidParams is JSON-RPC's invalid params: an invalid cursor on
	// list methods, and resource-not-found on resources/read from protocol
	// 2026-07-28 on.
	CodeInvalidParams = -32602
	// CodeResourceNotFound is MCP's resource-not-found before 2026-07-28;
	// later clients still accept it.
	CodeResourceNotFound = -32002
)

// RPCError is a JSON-RPC error answered by the server, with its code and data
// kept (mcp-go turns unknown codes into plain errors; the session layer's
// transport wrapper keeps them).
type RPCError struct {
	Method  string
	Code    int
	Message string
	Data    json.RawMessage
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("mcpsync: %s: JSON-RPC error %d: %s", e.Method, e.Code, e.Message)
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
	return e.Method == "resources/read" && (e.Code == CodeResourceNotFound || e.Code == CodeInvalidParams)
}

// Errors of ledgers and of the outbox.
var (
	// ErrLedgerNotEmpty: a snapshot can only be restored into an empty
	// ledger, or two histories would mix.
	ErrLedgerNotEmpty = errors.New("mcpsync: ledger not empty")
	// ErrLedgerSchema: stored data, or a snapshot, has a schema this
	// version does not know; nothing is guessed from it.
	ErrLedgerSchema = errors.New("mcpsync: unknown ledger schema")
	// ErrLedgerClosed: the ledger was closed.
	ErrLedgerClosed = errors.New("mcpsync: ledger closed")
	// ErrLedgerCorrupt: stored data of a known schema cannot be decoded, or
	// the ledger contradicts itself (an outbox entry it counts is not
	// there); nothing is guessed from it.
	ErrLedgerCorrupt = errors.New("mcpsync: ledger data corrupt")
	// ErrSnapshotInvalid: a snapshot contradicts itself (an outbox that
	// stops short of its last number, a record naming an identity its
	// counters never handed out); Restore stores nothing of it.
	ErrSnapshotInvalid = errors.New("mcpsync: ledger snapshot invalid")
	// ErrCounterExhausted: a reservation would run past the top of a
	// counter; a counter never wraps round, since that would hand out its
	// values again.
	ErrCounterExhausted = errors.New("mcpsync: ledger counter exhausted")
	// ErrNotLeaseholder: the ledger refused a write because another worker
	// holds the URI's lease (or took it since this worker did): the URI is
	// that worker's now, and this one writes nothing more of it. Ledgers
	// shared by many workers return errors that match it.
	ErrNotLeaseholder = errors.New("mcpsync: another worker holds the URI's lease")
	// ErrOutboxGap: the outbox dropped entries a consumer had not passed
	// (its retention bound); *OutboxGapError says which.
	ErrOutboxGap = errors.New("mcpsync: outbox entries dropped before the consumer passed them")
	// ErrInvalidConsumer: an outbox consumer name is empty, not UTF-8,
	// holds NUL or is longer than MaxSubjectBytes (the rules of subjects).
	ErrInvalidConsumer = errors.New("mcpsync: invalid outbox consumer name")
)

// OutboxGapError names the entries a consumer lost to the outbox's
// retention bound: it must rebuild what they would have told it (a full
// rescan) and then acknowledge Through.
type OutboxGapError struct {
	Consumer string
	From     uint64 // first entry lost
	Through  uint64 // last entry lost
}

func (e *OutboxGapError) Error() string {
	return fmt.Sprintf("mcpsync: outbox consumer %q lost entries %d to %d to the retention bound", e.Consumer, e.From, e.Through)
}

// Is makes every OutboxGapError match ErrOutboxGap.
func (e *OutboxGapError) Is(target error) bool { return target == ErrOutboxGap }
