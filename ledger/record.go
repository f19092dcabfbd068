package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Record is the ledger's row for one normalized URI: its subscription
// generation, the fence of that generation, and the version consumers see.
// Its stored form is EncodeRecord's.
type Record struct {
	// Revision rises by one at every write; CompareAndSwap compares it.
	Revision uint64 `json:"revision"`

	// Sub describes the current subscription generation; nil while the URI
	// has only been discovered.
	Sub   *SubscriptionInfo `json:"sub,omitempty"`
	State SubscriptionState `json:"state"`
	// LastNotificationSeq counts resources/updated pulses seen for this
	// generation (a local counter: the protocol has none).
	LastNotificationSeq uint64 `json:"lastNotificationSeq,omitempty"`
	// LastAcceptedDigest is the digest of the newest read this generation
	// accepted (changed or not).
	LastAcceptedDigest string `json:"lastAcceptedDigest,omitempty"`

	// The fence of the current subscription generation.
	LastIssued   uint64 `json:"lastIssued"`             // highest read ordinal handed out
	Watermark    uint64 `json:"watermark"`              // highest read ordinal that passed the fence
	CloseOrdinal uint64 `json:"closeOrdinal,omitempty"` // LastIssued when the close began
	CloseEpoch   uint64 `json:"closeEpoch,omitempty"`   // non-zero once the close began
	// ClosedGeneration is the newest subscription generation whose close
	// began; results of it and of older generations are STALE_AFTER_CLOSE.
	ClosedGeneration uint64 `json:"closedGeneration,omitempty"`
	// ValidatedAt is when the newest read that confirmed Current (changed
	// or unchanged) was issued.
	ValidatedAt time.Time `json:"validatedAt,omitzero"`
	// NotFoundAt is when the newest fenced not-found was accepted; only
	// evidence gathered since then may confirm its tombstone.
	NotFoundAt time.Time `json:"notFoundAt,omitzero"`
	// TombstonedAt is when the URI's deletion was last confirmed; zero once
	// a read found it again. A not-found while it is set is the tombstone
	// standing, whatever version (if any) it deleted.
	TombstonedAt time.Time `json:"tombstonedAt,omitzero"`
	// NotFoundOrdinal is the read ordinal of that not-found.
	NotFoundOrdinal uint64 `json:"notFoundOrdinal,omitempty"`
	// Corroboration is the deletion evidence gathered since that not-found
	// short of proof, waiting for a second not-found (the root package's deletion.go); nil
	// when none is under way.
	Corroboration *Corroboration `json:"corroboration,omitempty"`
	// Unlisted is the URI's absence from clean scans, as DeletionUnlisted
	// counts it (the root package's deletion.go); nil while the newest scan listed it. It
	// outlives subscription generations.
	Unlisted *Unlisting `json:"unlisted,omitempty"`
	// Tickets are issued and unsettled, each above Watermark, ascending.
	Tickets []Ticket `json:"tickets,omitempty"`

	// Current is the newest version that passed the fence, of any generation;
	// nil if none did. Its Status says whether it may be served.
	Current *StoredVersion `json:"current,omitempty"`
	// Artifacts are what consumers recorded as derived from versions of this
	// URI (mcpsync.Engine.RecordDerived); revocation invalidates them.
	Artifacts []DerivedArtifact `json:"artifacts,omitempty"`

	// slot is set only on the memory ledger's private copies of a key's
	// record (memSlot), which it writes in place and never hands out; every
	// record a caller can hold has it nil.
	slot *memSlot
}

func (r *Record) revision() uint64 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// storedRecord is a record as stored: the schema first, so that a reader of a
// later format refuses it instead of misreading it.
type storedRecord struct {
	Schema string `json:"schema"`
	*Record
}

// EncodeRecord returns the stored form of r: JSON with a "schema" of
// SchemaRecord beside the fields of Record. Durable ledgers store it
// as is.
func EncodeRecord(r *Record) ([]byte, error) {
	return json.Marshal(storedRecord{Schema: SchemaRecord, Record: r})
}

// DecodeRecord reads EncodeRecord's form, refusing any other schema with
// ErrLedgerSchema and bytes that are not its JSON with ErrLedgerCorrupt.
func DecodeRecord(b []byte) (*Record, error) {
	s := storedRecord{Record: new(Record)}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: decode record: %w", ErrLedgerCorrupt, err)
	}
	if s.Schema != SchemaRecord {
		return nil, fmt.Errorf("%w: record schema %q, want %q", ErrLedgerSchema, s.Schema, SchemaRecord)
	}
	return s.Record, nil
}

// EncodeOutboxEntry and DecodeOutboxEntry are the stored form of an outbox
// entry: its JSON, which carries its schema (SchemaInvalidation).
func EncodeOutboxEntry(e OutboxEntry) ([]byte, error) { return json.Marshal(e) }

// DecodeOutboxEntry reads EncodeOutboxEntry's form, refusing any other
// schema with ErrLedgerSchema and bytes that are not its JSON with
// ErrLedgerCorrupt.
func DecodeOutboxEntry(b []byte) (OutboxEntry, error) {
	var e OutboxEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return OutboxEntry{}, fmt.Errorf("%w: decode outbox entry: %w", ErrLedgerCorrupt, err)
	}
	if e.Schema != SchemaInvalidation {
		return OutboxEntry{}, fmt.Errorf("%w: outbox entry schema %q, want %q", ErrLedgerSchema, e.Schema, SchemaInvalidation)
	}
	return e, nil
}

// StoredVersion is a version with its contents and whether it may be served.
type StoredVersion struct {
	Version  ResourceVersion `json:"version"`
	Contents []Content       `json:"contents,omitempty"`
	Status   VersionStatus   `json:"status"`
}

// VersionStatus says whether the current version of a URI may be served.
type VersionStatus string

// Version statuses. Only VersionServed is ever returned by mcpsync.Engine.Lookup.
const (
	VersionServed           VersionStatus = "SERVED"
	VersionTombstonePending VersionStatus = "TOMBSTONE_PENDING"
	VersionTombstoned       VersionStatus = "TOMBSTONED"
	VersionQuarantined      VersionStatus = "QUARANTINED"
	VersionRevoked          VersionStatus = "REVOKED"
)

// subjectsOf returns the subjects a revocation of which changes r (see
// the engine's revocation): the subject of its current version, unless that version is
// revoked already, and those of its derived artifacts.
func subjectsOf(r *Record) []string {
	if r == nil {
		return nil
	}
	var out []string
	if c := r.Current; c != nil && c.Status != VersionRevoked {
		out = append(out, c.Version.Subject)
	}
	for _, a := range r.Artifacts {
		if !slices.Contains(out, a.Version.Subject) {
			out = append(out, a.Version.Subject)
		}
	}
	return out
}

// sameSubjects reports, cheaply, that a and b certainly have the same
// subjectsOf: most writes (an issue, an accept) keep the artifacts of the
// record they replace, and so its list.
func sameSubjects(a, b *Record) bool {
	if a == nil || b == nil {
		return a == b
	}
	ca, cb := a.Current, b.Current
	switch {
	case (ca == nil) != (cb == nil):
		return false
	case ca != nil && (ca.Version.Subject != cb.Version.Subject || (ca.Status == VersionRevoked) != (cb.Status == VersionRevoked)):
		return false
	}
	return len(a.Artifacts) == len(b.Artifacts) && (len(a.Artifacts) == 0 || &a.Artifacts[0] == &b.Artifacts[0])
}

// Subjects returns the subjects a revocation of which changes r
// (mcpsync.Engine.RevokeSubject), each once: the subject of its current version, unless that
// version is revoked already, then those of its derived artifacts. A
// Index keeps its records by them; a nil r has none.
func (r *Record) Subjects() []string { return subjectsOf(r) }
