package mcpsync

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"unicode/utf8"

	"github.com/mcpsync/mcpsync/ledger"
)

// PullOutbox returns up to max outbox entries numbered above after, in order
// (max <= 0: all), leaving out those the default consumer acknowledged.
// Entries stay in the outbox until acknowledged, so a consumer that fails
// before Acknowledge sees them again: delivery is at least once, and
// consumers must treat an entry they already applied as done.
//
// When the retention bound dropped entries above that position (above
// after and the default consumer's acknowledged one) it returns an
// *ledger.OutboxGapError (ErrOutboxGap) naming them and no entries, as Consume
// does: the consumer rebuilds what they would have told it and acknowledges
// the gap's Through.
//
// A consumer resumes after a restart from the default consumer's position
// (OutboxState). PullOutbox returns at once; Consume waits for entries, under
// any name.
func (e *Engine) PullOutbox(after uint64, max int) ([]OutboxEntry, error) {
	ctx := context.Background()
	st, err := e.ledger.OutboxState(ctx)
	if err != nil {
		return nil, errorf("pull outbox: %w", err)
	}
	pos := after
	if p := st.Consumers[DefaultConsumer]; p > pos {
		pos = p
	}
	if gap := st.Lost(DefaultConsumer, pos); gap != nil {
		return nil, gap
	}
	entries, err := e.ledger.Outbox(ctx, pos, max)
	if err != nil {
		return nil, errorf("pull outbox: %w", err)
	}
	return entries, nil
}

// Acknowledge records that consumer processed every entry numbered up to and
// including seq. Positions only rise; acknowledging the past does nothing.
// The ledger keeps an entry until every registered consumer acknowledged it
// (or its retention bound drops it). A name that is empty, not UTF-8,
// holds NUL or is longer than MaxSubjectBytes is refused with
// ErrInvalidConsumer.
//
// A name has one position, whoever acknowledges under it: several workers
// consuming under one name share it (see Consume).
func (e *Engine) Acknowledge(ctx context.Context, consumer string, seq uint64) error {
	if err := checkConsumer(consumer); err != nil {
		return err
	}
	if err := e.ledger.Ack(ctx, consumer, seq); err != nil {
		return errorf("ack outbox for %q: %w", consumer, err)
	}
	return nil
}

// OutboxState reports the outbox's extent, what its retention bound
// dropped, and each consumer's position.
func (e *Engine) OutboxState(ctx context.Context) (ledger.OutboxState, error) {
	return e.ledger.OutboxState(ctx)
}

// checkConsumer holds a consumer name to the rules of subjects
// (checkSubject): a name is stored by every ledger as given, and compared
// byte for byte.
func checkConsumer(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidConsumer)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidConsumer, name)
	case len(name) > MaxSubjectBytes:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidConsumer, len(name), MaxSubjectBytes)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: %q holds NUL", ErrInvalidConsumer, name)
	}
	return nil
}

// consumeBatch is how many entries Consume reads from the ledger at once.
const consumeBatch = 256

// Consume registers consumer if it is new (from the oldest retained entry)
// and yields, in order, every entry after its acknowledged position: first
// those already appended, then each new one as it is appended, waking on the
// append itself. It yields each entry once per call; the caller
// acknowledges what it applied (Acknowledge), and a later Consume starts
// again after the acknowledged position, so delivery is at least once.
//
// Several workers may consume under one name (each with its own Consume,
// in one process or many): the name has one position, shared. What any of
// them acknowledged the name has passed: the others skip it from their
// next read of the ledger on (each read of up to 256 entries), and it is
// never reported lost.
//
// Cancelling ctx ends the sequence with ctx's error. When the retention
// bound dropped entries the name had not passed, the sequence yields an
// *ledger.OutboxGapError (ErrOutboxGap) naming them, and ends; an invalid name
// yields ErrInvalidConsumer.
func (e *Engine) Consume(ctx context.Context, consumer string) iter.Seq2[OutboxEntry, error] {
	return func(yield func(OutboxEntry, error) bool) {
		fail := func(err error) { yield(OutboxEntry{}, err) }
		if err := checkConsumer(consumer); err != nil {
			fail(err)
			return
		}
		// Checked here too, not only by the ledger: a cancelled Consume
		// must not register its consumer, which would pin the outbox.
		if err := ctx.Err(); err != nil {
			fail(err)
			return
		}
		if err := e.ledger.Ack(ctx, consumer, 0); err != nil {
			fail(errorf("register outbox consumer %q: %w", consumer, err))
			return
		}
		var pos uint64 // the newest entry this call yielded or the name passed
		// short is the last read that did not go on from pos: its pos and
		// where it began (0: it was empty). Each such read has a cause the
		// next one shows; the same read twice has none.
		var short struct {
			pos, first uint64
			seen       bool
		}
		for {
			st, err := e.ledger.OutboxState(ctx)
			if err != nil {
				fail(err)
				return
			}
			pos = max(pos, st.Consumers[consumer])
			if gap := st.Lost(consumer, pos); gap != nil {
				fail(gap)
				return
			}
			batch, err := e.ledger.Outbox(ctx, pos, consumeBatch)
			if err != nil {
				fail(err)
				return
			}
			switch {
			case len(batch) > 0 && batch[0].Seq == pos+1:
				for _, en := range batch {
					if !yield(en, nil) {
						return
					}
					pos = en.Seq
				}
				short.seen = false
				continue
			case len(batch) == 0 && st.Last <= pos:
				short.seen = false
				if err := e.ledger.WaitOutbox(ctx, pos); err != nil {
					fail(err)
					return
				}
				continue
			}
			// Entries above pos were counted when st was read and are
			// gone now: discarded since, because the name passed them (a
			// peer acknowledged them) or the bound dropped them. The next
			// state says which. A ledger that reads the same again counts
			// entries it has not got, and would be read for ever.
			first := uint64(0)
			if len(batch) > 0 {
				first = batch[0].Seq
			}
			if short.seen && short.pos == pos && short.first == first {
				fail(fmt.Errorf("%w: outbox entry %d counted (first %d, last %d) but not returned", ledger.ErrLedgerCorrupt, pos+1, st.First, st.Last))
				return
			}
			short.pos, short.first, short.seen = pos, first, true
		}
	}
}

// ResolutionKind says what an outbox entry comes to when a consumer acts
// on it (Resolve).
type ResolutionKind string

// Resolution kinds. Only ResolvedContents carries text; on the others a
// consumer deletes what Resolution.Version fed (or, on superseded, does
// nothing: the entry of the newer version follows).
const (
	// ResolvedContents: the entry's version is the URI's current one;
	// Contents are exactly its contents.
	ResolvedContents ResolutionKind = "contents"
	// ResolvedSuperseded: a later version replaced the entry's (By); the
	// entry of that version follows in the outbox.
	ResolvedSuperseded ResolutionKind = "superseded"
	// ResolvedDeleted: the URI's deletion was confirmed. Evidence is set
	// when the entry is the tombstone itself; an entry of the version it
	// deleted is followed by the tombstone's.
	ResolvedDeleted ResolutionKind = "deleted"
	// ResolvedRevoked: the subject that read the version was revoked.
	ResolvedRevoked ResolutionKind = "revoked"
	// ResolvedForgotten: the version was forgotten (Engine.Forget).
	ResolvedForgotten ResolutionKind = "forgotten"
	// ResolvedQuarantined: the content guard refused the URI's newest
	// content; the version before it must no longer be served.
	ResolvedQuarantined ResolutionKind = "quarantined"
)

// Resolution is what Resolve makes of an outbox entry.
type Resolution struct {
	Kind ResolutionKind
	// Version is the version the entry is about: the new one of an
	// updated entry, the one an entry of any other reason tells to
	// delete (its Previous; zero when there was none).
	Version ResourceVersion
	// Contents are Version's contents, on ResolvedContents only. They are
	// shared with the engine: do not modify them.
	Contents []Content
	// Status is Version's status when Contents are set:
	// ledger.VersionServed, or ledger.VersionTombstonePending while a
	// not-found waits for confirmation (Lookup serves it no more; its
	// tombstone or its return has an entry of its own).
	Status ledger.VersionStatus
	// By is the version that superseded Version, on ResolvedSuperseded.
	By ResourceVersion
	// Evidence is the tombstone's evidence, on a tombstone's entry.
	Evidence *ledger.DeletionEvidence
	// Artifact is the revoked artifact, on a revocation of one.
	Artifact *ledger.DerivedArtifact
}

// Resolve says what an outbox entry comes to now: for an updated entry, the
// exact contents of the version it names while that version is current, or
// why there are none (superseded by a later version, deleted, revoked,
// forgotten); for an entry of any other reason, that reason with what it
// names. It never hands out text of another version than the entry names,
// even of the same digest: a version the URI returned to is a later
// version, with an entry of its own.
//
// The ledger keeps the text of the current version only (docs/design.md,
// "The outbox"), so an entry resolves to contents until its version is
// replaced; a consumer that skips superseded entries still sees every
// change, since each later version has its entry further on. Resolve is a
// read: calling it again, as a redelivery does, answers the same until the
// URI moves on.
//
// It returns ledger.ErrLedgerSchema for an entry that is not an outbox entry,
// ErrUnknownURI for a URI the ledger has no record of, ErrUnknownVersion
// for a version the ledger never accepted, and ctx's error once it ended.
func (e *Engine) Resolve(ctx context.Context, entry OutboxEntry) (Resolution, error) {
	if entry.Schema != SchemaInvalidation {
		return Resolution{}, fmt.Errorf("%w: outbox entry schema %q, want %q", ledger.ErrLedgerSchema, entry.Schema, SchemaInvalidation)
	}
	if err := ctx.Err(); err != nil {
		return Resolution{}, err
	}
	key, err := normalizeKey(entry.URI)
	if err != nil {
		return Resolution{}, err
	}
	r := Resolution{Version: entry.Previous, Evidence: entry.Evidence, Artifact: entry.Artifact}
	switch entry.Reason {
	case ledger.InvalidateTombstoned:
		r.Kind = ResolvedDeleted
		return r, nil
	case ledger.InvalidateRevoked:
		r.Kind = ResolvedRevoked
		return r, nil
	case ledger.InvalidateForgotten:
		r.Kind = ResolvedForgotten
		return r, nil
	case ledger.InvalidateQuarantined:
		r.Kind = ResolvedQuarantined
		return r, nil
	case ledger.InvalidateUpdated:
	default:
		return Resolution{}, fmt.Errorf("%w: outbox entry %d has reason %q", ledger.ErrLedgerSchema, entry.Seq, entry.Reason)
	}
	v := entry.Version
	r = Resolution{Version: v}
	if err := e.syncRevoked(ctx); err != nil {
		return Resolution{}, err
	}
	if e.isRevoked(v.Subject) {
		r.Kind = ResolvedRevoked
		return r, nil
	}
	var refused error
	e.viewContext(ctx, key, &refused, func(rec *ledger.Record) {
		switch c := rec.Current; {
		case c == nil:
			r.Kind = ResolvedForgotten
		case c.Version.SubscriptionGeneration != v.SubscriptionGeneration || c.Version.ReadOrdinal != v.ReadOrdinal:
			if !c.Version.After(v) {
				refused = fmt.Errorf("%w: %s has no version of generation %d, ordinal %d yet", ErrUnknownVersion, key, v.SubscriptionGeneration, v.ReadOrdinal)
				return
			}
			r.Kind, r.By = ResolvedSuperseded, c.Version
		case c.Version.Digest != v.Digest || c.Version.Subject != v.Subject:
			refused = fmt.Errorf("%w: %s ordinal %d was accepted with other contents", ErrUnknownVersion, key, v.ReadOrdinal)
		case c.Status == ledger.VersionServed || c.Status == ledger.VersionTombstonePending:
			r.Kind, r.Contents, r.Status = ResolvedContents, c.Contents, c.Status
		case c.Status == ledger.VersionTombstoned:
			r.Kind = ResolvedDeleted
		case c.Status == ledger.VersionRevoked:
			r.Kind = ResolvedRevoked
		default:
			// Quarantine replaces the current version: a version of its
			// own ordinal can only be the refused one.
			refused = fmt.Errorf("%w: %s ordinal %d was accepted with status %s", ErrUnknownVersion, key, v.ReadOrdinal, c.Status)
		}
	})
	if refused != nil {
		return Resolution{}, refused
	}
	return r, nil
}

// viewContext is view under ctx: fn runs on key's record unless there is
// none (ErrUnknownURI) or reading it failed, either of which goes to *err.
func (e *Engine) viewContext(ctx context.Context, key string, err *error, fn func(rec *ledger.Record)) {
	run := func(rec *ledger.Record) {
		if rec == nil {
			*err = fmt.Errorf("%w: %s", ErrUnknownURI, key)
			return
		}
		fn(rec)
	}
	if e.mem != nil {
		inspect(e.mem, key, run)
		return
	}
	rec, lerr := e.ledger.Load(ctx, key)
	if lerr != nil {
		*err = errorf("load %s: %w", key, lerr)
		return
	}
	run(rec)
}
