package wire

// Faults builds the errors the wire layer refuses input and ends sessions
// with. They are the library's own exported types, declared in the root
// package where its users read them; this package declares no error type a
// user could meet, so none reaches one unconverted.
type Faults interface {
	// Limit: input over the bound lim; max is the bound, observed what the
	// peer sent, method the request the input answered when known.
	Limit(lim Limit, max, observed int64, method string) error
	// Message: a message refused for fault; id is its id as sent (raw
	// JSON), offset the byte at which a malformed message stops being
	// JSON, err the decoder's error, if any.
	Message(fault MessageFault, id string, offset int64, err error) error
	// Framing: a stdio stream that cannot be resynchronized; cause is the
	// Limit error of the line or the read error.
	Framing(cause error) error
	// Degraded: a session over its notification rate; cause is the Limit
	// error of the rate, dropped the notifications dropped so far.
	Degraded(dropped int64, cause error) error
	// Exit: a stdio server that exited; wait is what waiting for it
	// returned (nil for exit status 0), stderr the end of its stderr, if
	// kept.
	Exit(wait error, stderr string, beforeInitialize bool) error
	// Output: a server whose output began with first, which is not
	// JSON-RPC; exit is its Exit error when it exited, else nil.
	Output(first []byte, exit error) error
	// OutputClosed: a stdio server whose output ended before it answered
	// initialize, with nothing said, and which lives on.
	OutputClosed() error
}
