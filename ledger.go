package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// The ledger's names a user of Client and Engine reads: the types of what
// they return. Package ledger holds them, with the rest of what a ledger
// stores, and documents them.

type (
	// ResourceVersion identifies one accepted state of a resource.
	ResourceVersion = ledger.ResourceVersion
	// Content is one decoded item of a resources/read result.
	Content = ledger.Content
	// Implementation names an MCP peer as it introduced itself.
	Implementation = ledger.Implementation
	// CapabilityReceipt records what a server declared when a session was
	// initialized.
	CapabilityReceipt = ledger.CapabilityReceipt
	// SubscriptionState is a state of one subscription generation of a URI.
	SubscriptionState = ledger.SubscriptionState
	// SubscriptionMode says how a subscription learns of changes.
	SubscriptionMode = ledger.SubscriptionMode
	// Ticket is the fence's permission to send one resources/read.
	Ticket = ledger.Ticket
	// Trigger is why a read was issued.
	Trigger = ledger.Trigger
	// OutboxEntry is one change for downstream consumers.
	OutboxEntry = ledger.OutboxEntry
	// OutboxState is the outbox's extent and its consumers' positions.
	OutboxState = ledger.OutboxState
	// InvalidationReason says what a consumer must do about an outbox entry.
	InvalidationReason = ledger.InvalidationReason
	// DerivedArtifact records that a consumer built something from a
	// version.
	DerivedArtifact = ledger.DerivedArtifact
	// DeletionEvidence is what confirmed a tombstone.
	DeletionEvidence = ledger.DeletionEvidence
	// EvidenceKind names the evidence that confirmed a tombstone.
	EvidenceKind = ledger.EvidenceKind
)

// The values of the ledger's enumerations a user of Client and Engine
// compares with, and the outbox's default consumer. Package ledger documents
// each.
const (
	// Subscription states (SubscriptionState).
	StateDiscovered             = ledger.StateDiscovered
	StateSubscribing            = ledger.StateSubscribing
	StateActive                 = ledger.StateActive
	StateUpdateSeen             = ledger.StateUpdateSeen
	StateReadPending            = ledger.StateReadPending
	StateVersionAccepted        = ledger.StateVersionAccepted
	StateUnsubscribing          = ledger.StateUnsubscribing
	StateClosed                 = ledger.StateClosed
	StateUnsubscribeUnknown     = ledger.StateUnsubscribeUnknown
	StateTombstonePending       = ledger.StateTombstonePending
	StateTombstoned             = ledger.StateTombstoned
	StateReconciliationRequired = ledger.StateReconciliationRequired

	// Subscription modes (SubscriptionMode).
	ModePush = ledger.ModePush
	ModePoll = ledger.ModePoll

	// Read triggers (Trigger).
	TriggerInitial      = ledger.TriggerInitial
	TriggerNotification = ledger.TriggerNotification
	TriggerRevalidate   = ledger.TriggerRevalidate
	TriggerPoll         = ledger.TriggerPoll
	TriggerReconnect    = ledger.TriggerReconnect
	TriggerReconcile    = ledger.TriggerReconcile

	// Invalidation reasons (InvalidationReason).
	InvalidateUpdated     = ledger.InvalidateUpdated
	InvalidateTombstoned  = ledger.InvalidateTombstoned
	InvalidateRevoked     = ledger.InvalidateRevoked
	InvalidateQuarantined = ledger.InvalidateQuarantined
	InvalidateForgotten   = ledger.InvalidateForgotten

	// Evidence kinds (EvidenceKind).
	EvidenceProven       = ledger.EvidenceProven
	EvidenceCorroborated = ledger.EvidenceCorroborated
	EvidenceUnlisted     = ledger.EvidenceUnlisted

	// DefaultConsumer is the outbox consumer PullOutbox acts for: acknowledge
	// its entries with Acknowledge under this name, and read its position in
	// OutboxState.
	DefaultConsumer = ledger.DefaultConsumer
)
