package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// Schemas name the JSON documents this package writes, each in its "schema"
// field. A reader that meets a schema it does not know must not guess at its
// fields. Those of what a ledger stores are package ledger's.
const (
	// Versions and receipts of the fence.
	SchemaResourceVersion   = ledger.SchemaResourceVersion
	SchemaVersionReceipt    = "versionReceipt.v1"
	SchemaStaleReceipt      = "staleReceipt.v1"
	SchemaCloseReceipt      = "closeReceipt.v1"
	SchemaTombstoneReceipt  = "tombstoneReceipt.v1"
	SchemaRevocationReceipt = "revocationReceipt.v1"

	// Subscriptions and the outbox.
	SchemaSubscription = "resourceSubscription.v1"
	SchemaInvalidation = ledger.SchemaInvalidation

	// Discovery.
	SchemaDiscoveryScan = "resourceDiscoveryScan.v1"
	SchemaCatalog       = "resourceCatalog.v1"

	// Rolling out.
	SchemaRolloutStatus = "rolloutStatus.v1"
)
