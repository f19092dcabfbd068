package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
)

// Snapshot is a ledger's whole state: every record (watermarks,
// issued tickets, close ordinals and epochs, current versions, derived
// artifacts), the retained outbox and its consumers, the identity counters
// and the revoked subjects. It marshals to JSON and restores into any kind
// of ledger (Ledger.Restore), so a rollback, a restart or a move between
// stores carries the fence with it.
type Snapshot struct {
	Schema   string             `json:"schema"`
	Records  map[string]*Record `json:"records"`
	Counters map[Counter]uint64 `json:"counters"`
	Revoked  []RevokedSubject   `json:"revoked"`
	// Outbox holds the retained entries, numbered consecutively.
	Outbox []OutboxEntry `json:"outbox"`
	State  OutboxState   `json:"outboxState"`
	// Acked is the single consumer position of a v1 snapshot.
	Acked uint64 `json:"acked,omitempty"`
}

// Upgrade returns snap in the current schema. A v1 snapshot has no
// counters: they are recovered from the records (the highest close epoch,
// request id and session generation any of them names), its one consumer
// becomes DefaultConsumer, and its outbox numbering continues.
func (snap Snapshot) Upgrade() (Snapshot, error) {
	switch snap.Schema {
	case SchemaSnapshot:
		return snap, nil
	case SchemaSnapshotV1:
	default:
		return Snapshot{}, fmt.Errorf("%w: ledger snapshot schema %q, want %q", ErrLedgerSchema, snap.Schema, SchemaSnapshot)
	}
	up := snap
	up.Schema = SchemaSnapshot
	up.Counters = make(map[Counter]uint64)
	raise := func(c Counter, v uint64) { up.Counters[c] = max64(up.Counters[c], v) }
	for _, r := range snap.Records {
		if r == nil {
			continue
		}
		raise(CounterCloseEpoch, r.CloseEpoch)
		for _, t := range r.Tickets {
			raise(CounterRequest, t.RequestID)
			raise(CounterSession, t.SessionGeneration)
		}
		if r.Sub != nil {
			raise(CounterSession, r.Sub.SessionGeneration)
		}
	}
	last := snap.Acked
	if n := len(snap.Outbox); n > 0 {
		last = snap.Outbox[n-1].Seq
	}
	up.State = OutboxState{Last: last, First: snap.Acked + 1, Consumers: map[string]uint64{DefaultConsumer: snap.Acked}}
	up.Acked = 0
	return up, nil
}

// ForRestore validates snap and returns it as a ledger restores it: every
// counter of Counters and of snap resumes RestoreCounterGap beyond the
// snapshot's value. Every Restore uses it, so a ledger restored from a
// snapshot older than its source never hands out a value the source handed
// out after the export (see Ledger.Next).
//
// A snapshot is refused with ErrSnapshotInvalid, before anything of it is
// stored, when it contradicts itself: a record without a revision, an
// outbox that is not numbered consecutively up to its last number, a
// consumer or a dropped range beyond that number, a record naming a session
// generation, close epoch or request id its counters never handed out, a
// revocation of no subject, entries missing before the first retained one
// that a consumer had not passed and the retention bound did not drop. A
// counter or an outbox numbering within RestoreCounterGap of its top is
// refused with ErrCounterExhausted.
func (snap Snapshot) ForRestore() (Snapshot, error) {
	if snap.Schema != SchemaSnapshot {
		return Snapshot{}, fmt.Errorf("%w: ledger snapshot schema %q, want %q (Upgrade it first)", ErrLedgerSchema, snap.Schema, SchemaSnapshot)
	}
	invalid := func(format string, args ...any) (Snapshot, error) {
		return Snapshot{}, fmt.Errorf("%w: "+format, append([]any{ErrSnapshotInvalid}, args...)...)
	}
	last := snap.State.Last
	for i, e := range snap.Outbox {
		if i > 0 && e.Seq != snap.Outbox[i-1].Seq+1 || e.Seq == 0 || e.Seq > last {
			return invalid("outbox entry %d numbered %d out of order (last %d)", i, e.Seq, last)
		}
	}
	// Entries before the first retained one may be gone (acknowledged or
	// dropped); those after it up to Last must all be there, or a reader
	// waits for entries that never come.
	if n := len(snap.Outbox); n > 0 && snap.Outbox[n-1].Seq != last {
		return invalid("outbox ends at %d, short of its last entry %d", snap.Outbox[n-1].Seq, last)
	}
	for name, pos := range snap.State.Consumers {
		if pos > last {
			return invalid("consumer %q at %d, beyond the last entry %d", name, pos, last)
		}
	}
	if snap.State.DroppedThrough > last || snap.State.Dropped > snap.State.DroppedThrough {
		return invalid("dropped %d through %d, last entry %d", snap.State.Dropped, snap.State.DroppedThrough, last)
	}
	// An entry before the first retained one is gone because every
	// consumer passed it or the retention bound dropped it (and said so);
	// any other gap is a loss nobody would be told of.
	gone := last
	if len(snap.Outbox) > 0 {
		gone = snap.Outbox[0].Seq - 1
	}
	for name, pos := range snap.State.Consumers {
		if pos < gone && snap.State.DroppedThrough < gone {
			return invalid("entries %d through %d are missing: consumer %q had not passed them, and none were dropped past %d",
				pos+1, gone, name, snap.State.DroppedThrough)
		}
	}
	if _, err := Reserve(CounterOutbox, last, RestoreCounterGap); err != nil {
		return Snapshot{}, err
	}
	named := func(c Counter, v uint64, what, key string) error {
		if v > snap.Counters[c] {
			return fmt.Errorf("%w: record %q names %s %d, beyond its counter %d", ErrSnapshotInvalid, key, what, v, snap.Counters[c])
		}
		return nil
	}
	for key, r := range snap.Records {
		if r == nil || r.Revision == 0 {
			return invalid("record %q has no revision", key)
		}
		errs := []error{named(CounterCloseEpoch, r.CloseEpoch, "close epoch", key)}
		if r.Sub != nil {
			errs = append(errs, named(CounterSession, r.Sub.SessionGeneration, "session generation", key))
		}
		for _, t := range r.Tickets {
			errs = append(errs, named(CounterSession, t.SessionGeneration, "session generation", key),
				named(CounterRequest, t.RequestID, "request id", key))
		}
		if err := errors.Join(errs...); err != nil {
			return Snapshot{}, err
		}
	}
	for _, r := range snap.Revoked {
		if r.Subject == "" {
			return invalid("a revocation of no subject")
		}
	}
	out := snap
	out.Counters = make(map[Counter]uint64, len(Counters))
	for _, c := range Counters {
		out.Counters[c] = 0
	}
	maps.Copy(out.Counters, snap.Counters)
	for c, v := range out.Counters {
		resumed, err := Reserve(c, v, RestoreCounterGap)
		if err != nil {
			return Snapshot{}, err
		}
		out.Counters[c] = resumed
	}
	return out, nil
}

// Export reads l into a snapshot, consistent across keys (see
// Ledger.Export).
func Export(ctx context.Context, l Ledger) (Snapshot, error) {
	return l.Export(ctx)
}

// Restore loads snap, of this schema or an older one, into the empty
// ledger l, of any kind. An mcpsync.Engine opened on it continues outbox numbers
// from where they were and generations, close epochs and request ids
// RestoreCounterGap beyond them (the ledger exported may have gone on), and
// starts with no live session: every ticket issued before the export is
// refused, whatever it answers.
func Restore(ctx context.Context, l Ledger, snap Snapshot) error {
	up, err := snap.Upgrade()
	if err != nil {
		return err
	}
	return l.Restore(ctx, up)
}
