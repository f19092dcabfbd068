package ledger

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// Errors of ledgers and of the outbox.
var (
	// ErrLedgerNotEmpty: a snapshot can only be restored into an empty
	// ledger, or two histories would mix.
	ErrLedgerNotEmpty = wire.NewError("ledger not empty")
	// ErrLedgerSchema: stored data, or a snapshot, has a schema this
	// version does not know; nothing is guessed from it.
	ErrLedgerSchema = wire.NewError("unknown ledger schema")
	// ErrLedgerClosed: the ledger was closed.
	ErrLedgerClosed = wire.NewError("ledger closed")
	// ErrLedgerCorrupt: stored data of a known schema cannot be decoded, or
	// the ledger contradicts itself (an outbox entry it counts is not
	// there); nothing is guessed from it.
	ErrLedgerCorrupt = wire.NewError("ledger data corrupt")
	// ErrSnapshotInvalid: a snapshot contradicts itself (an outbox that
	// stops short of its last number, a record naming an identity its
	// counters never handed out); Restore stores nothing of it.
	ErrSnapshotInvalid = wire.NewError("ledger snapshot invalid")
	// ErrCounterExhausted: a reservation would run past the top of a
	// counter; a counter never wraps round, since that would hand out its
	// values again.
	ErrCounterExhausted = wire.NewError("ledger counter exhausted")
	// ErrNotLeaseholder: the ledger refused a write because another worker
	// holds the URI's lease (or took it since this worker did): the URI is
	// that worker's now, and this one writes nothing more of it. Ledgers
	// shared by many workers return errors that match it.
	ErrNotLeaseholder = wire.NewError("another worker holds the URI's lease")
	// ErrOutboxGap: the outbox dropped entries a consumer had not passed
	// (its retention bound); *OutboxGapError says which.
	ErrOutboxGap = wire.NewError("outbox entries dropped before the consumer passed them")
	// ErrUnknownURI: no subscription or discovery record exists for the
	// URI.
	ErrUnknownURI = wire.NewError("unknown resource URI")
	// ErrInvalidSubject: a subject a ledger cannot store (empty, not
	// UTF-8, too long for its keys).
	ErrInvalidSubject = wire.NewError("invalid subject")
)

// OutboxGapError names the entries a consumer lost to the outbox's
// retention bound: it must rebuild what they would have told it (a full
// rescan) and then acknowledge Through.
type OutboxGapError struct {
	Consumer string
	From     uint64 // first entry lost
	Through  uint64 // last entry lost
}

func (e *OutboxGapError) Error() string { return wire.Prefix + e.text() }

func (e *OutboxGapError) text() string {
	return fmt.Sprintf("outbox consumer %q lost entries %d to %d to the retention bound", e.Consumer, e.From, e.Through)
}

// Is makes every OutboxGapError match ErrOutboxGap.
func (e *OutboxGapError) Is(target error) bool { return target == ErrOutboxGap }

// errorf is fmt.Errorf for this package's messages: the message begins
// "mcpsync: " once, each error among args reads as wire.Text says, and %w
// wraps as fmt.Errorf's does.
func errorf(format string, args ...any) error {
	texts := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok {
			a = wire.Text(err)
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

func (e *wrapped) Error() string { return wire.Prefix + e.msg }

func (e *wrapped) Unwrap() error { return errors.Unwrap(e.err) }
