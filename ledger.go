package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// The ledger's names on a newcomer's path: what Lookup, Entries and the
// handler serve, and what the outbox yields. Package ledger holds them, with
// the rest of what a ledger stores (tickets, triggers, subscription states
// and modes, receipts of capabilities, deletion evidence, derived artifacts,
// the outbox's state), and documents them.

type (
	// ResourceVersion identifies one accepted state of a resource: its URI,
	// content Digest, ReadOrdinal, Subject and generations. Package ledger
	// documents every field.
	ResourceVersion = ledger.ResourceVersion
	// Content is one decoded item of a resources/read result: Text for a
	// text item, Data (with Binary set) for a blob.
	Content = ledger.Content
	// OutboxEntry is one change for downstream consumers: Seq numbers it
	// for Acknowledge, URI names the resource and Resolve says what it comes
	// to. Package ledger documents every field.
	OutboxEntry = ledger.OutboxEntry
)

// DefaultConsumer is the outbox consumer PullOutbox acts for: acknowledge its
// entries with Acknowledge under this name, and read its position in
// OutboxState.
const DefaultConsumer = ledger.DefaultConsumer
