package mcpsync

import "time"

// SchemaCapabilityReceipt is the schema of capability receipts.
const SchemaCapabilityReceipt = "capabilityReceipt.v1"

// CapabilityReceipt records what a server declared when a session was
// initialized. Subscriptions keep the receipt of the session they were opened
// in, so a decision to poll rather than subscribe can be traced to the server's
// own words.
type CapabilityReceipt struct {
	Schema          string         `json:"schema"`
	ProtocolVersion string         `json:"protocolVersion"`
	Server          Implementation `json:"server"`
	Resources       bool           `json:"resources"`
	Subscribe       bool           `json:"subscribe"`
	ListChanged     bool           `json:"listChanged"`
	// SnapshotList is set when the server declared the snapshot extension
	// (SnapshotCapability).
	SnapshotList      bool      `json:"snapshotList"`
	SessionGeneration uint64    `json:"sessionGeneration"`
	ReceivedAt        time.Time `json:"receivedAt"`
}

// SessionInfo describes a freshly (re)initialized MCP session to the engine.
type SessionInfo struct {
	// SessionID is the transport's session id, if it has one.
	SessionID    string
	Capabilities CapabilityReceipt
}

// Era is a family of MCP protocol revisions that behave alike for sync.
type Era string

// Protocol eras.
const (
	// EraLegacy: 2025-06-18 and 2025-11-25. resources/subscribe and
	// resources/unsubscribe; not found is -32002; a missing or empty
	// nextCursor ends a listing.
	EraLegacy Era = "legacy"
	// EraModern: 2026-07-28 and later. subscriptions/listen; not found is
	// -32602; "" is a valid cursor and only an absent nextCursor ends a
	// listing; results may carry ttlMs and cacheScope hints.
	EraModern Era = "modern"
)

// EraOf returns the era of a negotiated protocol version. Versions are
// dates, so they compare as strings.
func EraOf(protocolVersion string) Era {
	if protocolVersion >= "2026-07-28" {
		return EraModern
	}
	return EraLegacy
}
