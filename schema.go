package mcpsync

// Schemas name the JSON documents this package writes, each in its "schema"
// field. A reader that meets a schema it does not know must not guess at its
// fields.
const (
	// Versions and receipts of the fence.
	SchemaResourceVersion   = "resourceVersion.v1"
	SchemaVersionReceipt    = "versionReceipt.v1"
	SchemaStaleReceipt      = "staleReceipt.v1"
	SchemaCloseReceipt      = "closeReceipt.v1"
	SchemaTombstoneReceipt  = "tombstoneReceipt.v1"
	SchemaRevocationReceipt = "revocationReceipt.v1"
	SchemaCapabilityReceipt = "capabilityReceipt.v1"

	// Subscriptions, the outbox and what consumers derive.
	SchemaSubscription    = "resourceSubscription.v1"
	SchemaInvalidation    = "invalidation.v1"
	SchemaDerivedArtifact = "derivedArtifact.v1"

	// Discovery.
	SchemaDiscoveryScan = "resourceDiscoveryScan.v1"
	SchemaCatalog       = "resourceCatalog.v1"

	// Rolling out.
	SchemaRolloutStatus       = "rolloutStatus.v1"
	SchemaShadowReport        = "shadowReport.v1"
	SchemaListingShadowReport = "listingShadowReport.v1"

	// The ledger: stored records and revocations, and exported ledgers.
	// SchemaLedgerSnapshotV1 snapshots were taken before ledgers allocated
	// identities; they are still restored (LedgerSnapshot.Upgrade).
	SchemaLedgerRecord     = "ledgerRecord.v1"
	SchemaRevokedSubject   = "revokedSubject.v1"
	SchemaLedgerSnapshot   = "ledgerSnapshot.v2"
	SchemaLedgerSnapshotV1 = "ledgerSnapshot.v1"
)
