package mcpsync

import (
	"fmt"
	"time"
)

// SchemaInvalidation is the schema of outbox entries.
const SchemaInvalidation = "invalidation.v1"

// InvalidationReason says what a consumer must do about an outbox entry.
type InvalidationReason string

// Invalidation reasons.
const (
	// InvalidateUpdated: Version replaced Previous; re-derive from Version.
	InvalidateUpdated InvalidationReason = "updated"
	// InvalidateTombstoned: the resource is gone; delete what Previous fed.
	InvalidateTombstoned InvalidationReason = "tombstoned"
	// InvalidateRevoked: Previous (or Artifact) was read by a revoked subject;
	// evict it and delete the artifact.
	InvalidateRevoked InvalidationReason = "revoked"
	// InvalidateQuarantined: the newest content was refused by the content
	// guard; Previous is no longer current and must not be served.
	InvalidateQuarantined InvalidationReason = "quarantined"
)

// OutboxEntry is one change for downstream consumers. It is written in the
// same atomic step as the fence decision that caused it, so a consumer that
// processes every entry sees every change, in order per URI.
type OutboxEntry struct {
	Schema string             `json:"schema"`
	Seq    uint64             `json:"seq"`
	URI    string             `json:"uri"`
	Reason InvalidationReason `json:"reason"`
	// Version is the new version (updated) or the refused one (quarantined).
	Version ResourceVersion `json:"version,omitzero"`
	// Previous is the version this entry replaces, tombstones or revokes.
	Previous ResourceVersion `json:"previous,omitzero"`
	// Subject is the subject whose version the entry is about.
	Subject string `json:"subject"`
	// Artifact is set on revocations of a derived artifact, nil otherwise.
	Artifact *DerivedArtifact `json:"artifact,omitempty"`
	At       time.Time        `json:"at"`
}

// PullOutbox returns up to max outbox entries numbered above after, in order
// (max <= 0: all). Entries stay in the outbox until acknowledged, so a
// consumer that fails before AckOutbox sees them again: delivery is at least
// once, and consumers must treat an entry they already applied as done.
//
// A consumer resumes from OutboxCursor after a restart.
func (e *Engine) PullOutbox(after uint64, max int) ([]OutboxEntry, error) {
	return e.ledger.Outbox(after, max)
}

// AckOutbox acknowledges every entry numbered up to and including seq.
func (e *Engine) AckOutbox(seq uint64) error {
	if err := e.ledger.Ack(seq); err != nil {
		return fmt.Errorf("mcpsync: ack outbox: %w", err)
	}
	return nil
}

// OutboxCursor returns the highest acknowledged entry number: the position a
// consumer resumes from.
func (e *Engine) OutboxCursor() (uint64, error) {
	return e.ledger.Acked()
}
