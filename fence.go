package mcpsync

// StaleReason says why the fence refused a read result.
type StaleReason string

// Reasons of stale receipts.
const (
	StaleOrdinal         StaleReason = "STALE_ORDINAL"
	StaleAfterClose      StaleReason = "STALE_AFTER_CLOSE"
	GenerationMismatch   StaleReason = "GENERATION_MISMATCH"
	UnknownRequest       StaleReason = "UNKNOWN_REQUEST"
	URIMismatch          StaleReason = "URI_MISMATCH"
	NotActive            StaleReason = "NOT_ACTIVE"
	SubjectRevoked       StaleReason = "SUBJECT_REVOKED"
	EmptyContents        StaleReason = "EMPTY_CONTENTS"
	InvalidContent       StaleReason = "INVALID_CONTENT"
	ReconciliationNeeded StaleReason = "RECONCILIATION_REQUIRED"
)
