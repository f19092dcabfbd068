package ledger

import (
	"time"
)

// Implementation names an MCP peer as it introduced itself at initialize.
type Implementation struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Content is one decoded item of a resources/read result. Text items carry
// Text; blob items carry the decoded bytes in Data and have Binary set.
type Content struct {
	URI      string `json:"uri"`
	MIMEType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Data     []byte `json:"data,omitempty"` // base64 in JSON
	Binary   bool   `json:"binary,omitempty"`
}

// ResourceVersion identifies one accepted state of a resource: what was read
// (digest), when in the fence's order (generations and read ordinal), by whom
// (subject) and from which server.
//
// LastModified is the server's hint and is never compared: two reads with the
// same digest are the same version whatever their hints say.
type ResourceVersion struct {
	Schema                 string         `json:"schema"`
	URI                    string         `json:"uri"`
	MIMEType               string         `json:"mimeType,omitempty"`
	Digest                 string         `json:"digest"`
	Bytes                  int64          `json:"bytes"`
	ReadOrdinal            uint64         `json:"readOrdinal"`
	Subject                string         `json:"subject"`
	Server                 Implementation `json:"server"`
	SessionGeneration      uint64         `json:"sessionGeneration"`
	SubscriptionGeneration uint64         `json:"subscriptionGeneration"`
	LastModified           string         `json:"lastModified,omitempty"`
}

// After reports whether v is later than w in the fence's order. Versions of
// one URI are ordered by subscription generation, then read ordinal; the
// session generation is implied, since subscription generations keep rising
// across sessions.
func (v ResourceVersion) After(w ResourceVersion) bool {
	if v.SubscriptionGeneration != w.SubscriptionGeneration {
		return v.SubscriptionGeneration > w.SubscriptionGeneration
	}
	return v.ReadOrdinal > w.ReadOrdinal
}

// CapabilityReceipt records what a server declared when a session was
// initialized. Subscriptions keep the receipt of the session they were opened
// in, so a decision to poll rather than subscribe can be traced to the server's
// own words.
type CapabilityReceipt struct {
	Schema          string         `json:"schema"`
	ProtocolVersion string         `json:"protocolVersion"`
	Server          Implementation `json:"server"`
	// ServerID names the deployment of the server (ClientOptions.ServerID);
	// a restart resumes only the subscriptions opened with the same one.
	ServerID    string `json:"serverId,omitempty"`
	Resources   bool   `json:"resources"`
	Subscribe   bool   `json:"subscribe"`
	ListChanged bool   `json:"listChanged"`
	// SnapshotList is set when the server declared the snapshot extension
	// (SnapshotCapability).
	SnapshotList      bool      `json:"snapshotList"`
	SessionGeneration uint64    `json:"sessionGeneration"`
	ReceivedAt        time.Time `json:"receivedAt"`
	Engine            string    `json:"engine,omitempty"` // mcpsync.Engine.ID of the engine whose session this is
}

// SubscriptionMode says how a subscription learns of changes.
type SubscriptionMode string

// Subscription modes.
const (
	// ModePush: the server accepted the subscription; notifications trigger
	// reads, and revalidation reads bound the staleness of lost ones.
	ModePush SubscriptionMode = "push"
	// ModePoll: the server cannot subscribe (or the subscribe failed), so
	// jittered periodic reads are the only source of freshness. Notifications
	// that arrive anyway still trigger fenced reads.
	ModePoll SubscriptionMode = "poll"
)

// SubscriptionInfo is the part of a subscription generation fixed when it
// starts (and when it ends).
type SubscriptionInfo struct {
	URI string `json:"uri"`
	// RawURI is the URI as the caller gave it, which reads send to the
	// server; empty when it is URI itself. A subscription resumed after a
	// restart reads what the caller asked for, not its normalized key.
	RawURI string `json:"rawUri,omitempty"`
	// Subject is stored as "principal", the name resourceSubscription.v1
	// gives it.
	Subject           string         `json:"principal"`
	Server            Implementation `json:"server"`
	SessionGeneration uint64         `json:"sessionGeneration"`
	SessionID         string         `json:"sessionId,omitempty"`
	// Capabilities is the receipt of the session the generation opened in.
	// Every subscription of a session shares it: like everything a Record
	// points to, it is never written once stored.
	Capabilities *CapabilityReceipt `json:"capabilities"`
	Generation   uint64             `json:"generation"`
	Mode         SubscriptionMode   `json:"mode,omitempty"`
	// ModeReason says why a subscription polls: the server cannot
	// subscribe, the subscribe failed, or the transport cannot carry
	// notifications.
	ModeReason string `json:"modeReason,omitempty"`
	// StalenessBound is how old the local copy may be while the
	// subscription is open: the revalidation or poll interval plus its
	// jitter. Zero when none was published.
	StalenessBound time.Duration `json:"stalenessBoundNanos,omitempty"`
	StartedAt      time.Time     `json:"startedAt"`
	EndedAt        time.Time     `json:"endedAt,omitzero"`
}

// SubscriptionState is a state of one subscription generation of a URI:
//
//	DISCOVERED -> SUBSCRIBING -> ACTIVE
//	ACTIVE -> UPDATE_SEEN -> READ_PENDING -> VERSION_ACCEPTED -> ACTIVE
//	ACTIVE -> UNSUBSCRIBING -> CLOSED | UNSUBSCRIBE_UNKNOWN
//	ACTIVE (read says not found, fence passed) -> TOMBSTONE_PENDING -> TOMBSTONED | ACTIVE
//	any read or write whose identity is unknown -> RECONCILIATION_REQUIRED
//
// A proven catalog confirms a TOMBSTONE_PENDING subscription directly; a
// corroborated deletion goes TOMBSTONE_PENDING -> READ_PENDING (the second
// read) -> TOMBSTONED (the root package's deletion.go).
//
// ACTIVE and its read sub-states (UPDATE_SEEN, READ_PENDING,
// VERSION_ACCEPTED) are "open": only an open subscription is issued reads and
// only its results can pass the fence.
type SubscriptionState string

// Subscription states.
const (
	StateDiscovered             SubscriptionState = "DISCOVERED"
	StateSubscribing            SubscriptionState = "SUBSCRIBING"
	StateActive                 SubscriptionState = "ACTIVE"
	StateUpdateSeen             SubscriptionState = "UPDATE_SEEN"
	StateReadPending            SubscriptionState = "READ_PENDING"
	StateVersionAccepted        SubscriptionState = "VERSION_ACCEPTED"
	StateUnsubscribing          SubscriptionState = "UNSUBSCRIBING"
	StateClosed                 SubscriptionState = "CLOSED"
	StateUnsubscribeUnknown     SubscriptionState = "UNSUBSCRIBE_UNKNOWN"
	StateTombstonePending       SubscriptionState = "TOMBSTONE_PENDING"
	StateTombstoned             SubscriptionState = "TOMBSTONED"
	StateReconciliationRequired SubscriptionState = "RECONCILIATION_REQUIRED"
)

// Open reports whether s is ACTIVE or one of its read sub-states
// (UPDATE_SEEN, READ_PENDING, VERSION_ACCEPTED): only an open subscription
// is issued reads, and only its results can pass the fence.
func (s SubscriptionState) Open() bool {
	switch s {
	case StateActive, StateUpdateSeen, StateReadPending, StateVersionAccepted:
		return true
	}
	return false
}

// Trigger is why a read was issued.
type Trigger string

// Read triggers.
const (
	TriggerInitial      Trigger = "initial"
	TriggerNotification Trigger = "notification"
	TriggerRevalidate   Trigger = "revalidate"
	TriggerPoll         Trigger = "poll"
	TriggerReconnect    Trigger = "reconnect"
	TriggerReconcile    Trigger = "reconcile"
)

// Ticket is the fence's permission to send one resources/read. It is issued
// before the request goes out and must come back with the result.
type Ticket struct {
	// Engine is the ID of the engine that issued the ticket: only that
	// engine may accept its result, so a read sent before a restart or
	// an export never passes the fence of a later engine, whatever
	// numbers the two happen to share.
	Engine                 string    `json:"engine"`
	URI                    string    `json:"uri"`
	SessionGeneration      uint64    `json:"sessionGeneration"`
	SubscriptionGeneration uint64    `json:"subscriptionGeneration"`
	ReadOrdinal            uint64    `json:"readOrdinal"`
	RequestID              uint64    `json:"requestId"`
	Trigger                Trigger   `json:"trigger"`
	Subject                string    `json:"subject"`
	IssuedAt               time.Time `json:"issuedAt"`
}

// DerivedArtifact records that a consumer built something (an embedding, an
// index entry, a summary) from a version: artifact ArtifactID in index Index
// was derived from Version. Revoking Version's subject invalidates it.
type DerivedArtifact struct {
	Schema     string          `json:"schema"`
	Index      string          `json:"index"`
	ArtifactID string          `json:"artifactId"`
	Version    ResourceVersion `json:"version"`
	RecordedAt time.Time       `json:"recordedAt"`
}

// EvidenceKind names the evidence that confirmed a tombstone.
type EvidenceKind string

// Evidence kinds.
const (
	EvidenceProven       EvidenceKind = "proven"
	EvidenceCorroborated EvidenceKind = "corroborated"
	EvidenceUnlisted     EvidenceKind = "unlisted"
)

// DeletionEvidence is what confirmed a tombstone, so that an index can treat
// a proven deletion and a corroborated one differently.
type DeletionEvidence struct {
	Kind EvidenceKind `json:"kind"`
	// SnapshotID is the proven catalog's snapshot id.
	SnapshotID string `json:"snapshotId,omitempty"`
	// Scans are the ids of the scan receipts the evidence rests on: the
	// proven pass, passes A and B of a corroborating scan, or the passes
	// of the first and of the newest scan that did not list the URI.
	Scans []string `json:"scans,omitempty"`
	// Reads are the read ordinals of the first and the second not-found
	// of a corroborated deletion.
	Reads []uint64 `json:"reads,omitempty"`
}

// Corroboration is a corroboration under way: a clean two-pass scan that
// began after the URI's not-found and did not list it, waiting for the
// second not-found.
type Corroboration struct {
	// SubscriptionGeneration is the generation whose not-found it
	// corroborates; a read of any other generation cannot finish it.
	SubscriptionGeneration uint64 `json:"subscriptionGeneration"`
	// FirstRead is the read ordinal of that not-found.
	FirstRead uint64 `json:"firstRead"`
	// Scans are the ids of passes A and B.
	Scans         []string  `json:"scans"`
	ScanStartedAt time.Time `json:"scanStartedAt"`
	ScanEndedAt   time.Time `json:"scanEndedAt"`
	// After is the last read ordinal issued when the scan was recorded, which
	// was after it ended: only a read above it was issued after the scan.
	After uint64 `json:"after"`
}

// Unlisting is a URI's absence from clean scans, as DeletionUnlisted counts
// it: the first and the newest clean scan that did not list it.
type Unlisting struct {
	First UnlistedScan `json:"first"`
	Last  UnlistedScan `json:"last"`
	// Tombstoned is set once the absence confirmed the URI's deletion.
	Tombstoned bool `json:"tombstoned,omitempty"`
}

// UnlistedScan is a clean scan that did not list a URI.
type UnlistedScan struct {
	// Scans are the ids of its passes (ScanReceipt.ID).
	Scans []string `json:"scans"`
	// StartedAt is when its first pass began; EndedAt when its last ended.
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
}

// Span is how long the URI has been missing for certain: from the end of
// the first scan without it to the start of the newest.
func (u *Unlisting) Span() time.Duration { return u.Last.StartedAt.Sub(u.First.EndedAt) }

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
	// InvalidateForgotten: the URI was unsubscribed and its version
	// forgotten (mcpsync.Engine.Forget); delete what Previous fed.
	InvalidateForgotten InvalidationReason = "forgotten"
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
	// Evidence is set on tombstones: what confirmed the deletion, proven or
	// corroborated (the root package's deletion.go), so an index may treat them differently.
	Evidence *DeletionEvidence `json:"evidence,omitempty"`
	At       time.Time         `json:"at"`
	// Engine is the ID of the engine that wrote the entry.
	Engine string `json:"engine,omitempty"`
}

// DefaultConsumer is the outbox consumer mcpsync.Engine's PullOutbox acts
// for (acknowledge its entries with Acknowledge under this name, and read
// its position in OutboxState), and the one a v1 snapshot's single
// position becomes (Snapshot.Upgrade).
const DefaultConsumer = "default"
