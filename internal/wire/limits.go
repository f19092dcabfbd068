package wire

// Limits bound what one peer can make the client hold. A zero field is no
// bound at this layer; the session layer fills in its defaults.
type Limits struct {
	MessageBytes           int64 // one JSON-RPC message (a stdio line, an HTTP body, an SSE event's data), framing excluded
	Depth                  int   // JSON nesting of one message
	ReadBytes              int64 // decoded text and blob bytes of one resources/read result
	ReadItems              int   // content items of one resources/read result
	PageItems              int   // items of one list page
	NotificationsPerSecond int   // per session, before it is degraded
}

// Limit names one bound of Limits, as receipts and errors report it.
type Limit string

// Limits as named in receipts.
const (
	LimitMessageBytes           Limit = "MaxMessageBytes"
	LimitDepth                  Limit = "MaxDepth"
	LimitReadBytes              Limit = "MaxReadBytes"
	LimitReadItems              Limit = "MaxReadItems"
	LimitPageItems              Limit = "MaxPageItems"
	LimitNotificationsPerSecond Limit = "MaxNotificationsPerSecond"
	LimitScanPages              Limit = "MaxScanPages"
	LimitScanDuration           Limit = "ScanTimeout"
)

// MessageFault names what is wrong with a message that cannot be delivered.
type MessageFault string

// Message faults.
const (
	// FaultMalformed: the message is not JSON, or not a JSON-RPC message.
	FaultMalformed MessageFault = "MALFORMED_MESSAGE"
	// FaultUnknownID: a response whose id matches no request in flight
	// (missing, null, or never sent), or over HTTP, is not the id of the
	// request whose response carried it.
	FaultUnknownID MessageFault = "UNKNOWN_RESPONSE_ID"
)
