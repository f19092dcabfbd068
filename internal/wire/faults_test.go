package wire

import (
	"errors"
	"fmt"
)

// PlainFaults is the Faults of this package's tests: errors of the types
// below, which errors.Is matches by limit and by fault as the library's
// own do.
type PlainFaults struct{}

func (PlainFaults) Limit(lim Limit, max, observed int64, method string) error {
	return &LimitError{Limit: lim, Max: max, Observed: observed, Method: method}
}

func (PlainFaults) Message(fault MessageFault, id string, offset int64, err error) error {
	return &MessageError{Fault: fault, ID: id, Offset: offset, Err: err}
}

func (PlainFaults) Framing(cause error) error { return &FramingError{Err: cause} }

func (PlainFaults) Degraded(dropped int64, cause error) error {
	return fmt.Errorf("degraded (%d dropped): %w", dropped, cause)
}

func (PlainFaults) Exit(wait error, stderr string, beforeInitialize bool) error {
	return fmt.Errorf("exited (before initialize %t, stderr %q): %w", beforeInitialize, stderr, wait)
}

func (PlainFaults) Output(first []byte, exit error) error {
	return fmt.Errorf("not JSON-RPC: %q: %w", first, exit)
}

func (PlainFaults) OutputClosed() error { return errors.New("output closed") }

type LimitError struct {
	Limit         Limit
	Max, Observed int64
	Method        string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: observed %d, limit %d (%s)", e.Limit, e.Observed, e.Max, e.Method)
}

func (e *LimitError) Is(target error) bool {
	t, ok := target.(*LimitError)
	return ok && t.Limit == e.Limit
}

type MessageError struct {
	Fault  MessageFault
	ID     string
	Offset int64
	Err    error
}

func (e *MessageError) Error() string { return fmt.Sprintf("%s id %s: %v", e.Fault, e.ID, e.Err) }

func (e *MessageError) Unwrap() error { return e.Err }

func (e *MessageError) Is(target error) bool {
	t, ok := target.(*MessageError)
	return ok && t.Fault == e.Fault
}

type FramingError struct{ Err error }

func (e *FramingError) Error() string { return "framing: " + e.Err.Error() }

func (e *FramingError) Unwrap() error { return e.Err }
