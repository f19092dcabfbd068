package ledger

// Schemas name the JSON documents a ledger stores, each in its "schema"
// field. A reader that meets a schema it does not know must not guess at its
// fields.
const (
	// Versions, the subscription's capability receipt, the outbox's
	// entries and what consumers derive.
	SchemaResourceVersion   = "resourceVersion.v1"
	SchemaCapabilityReceipt = "capabilityReceipt.v1"
	SchemaInvalidation      = "invalidation.v1"
	SchemaDerivedArtifact   = "derivedArtifact.v1"

	// Stored records and revocations, and exported ledgers.
	// SchemaSnapshotV1 snapshots were taken before ledgers allocated
	// identities; they are still restored (Snapshot.Upgrade).
	SchemaRecord         = "ledgerRecord.v1"
	SchemaRevokedSubject = "revokedSubject.v1"
	SchemaSnapshot       = "ledgerSnapshot.v2"
	SchemaSnapshotV1     = "ledgerSnapshot.v1"
)
