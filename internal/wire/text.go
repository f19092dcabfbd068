package wire

import (
	"errors"
	"net/url"

	"github.com/mark3labs/mcp-go/client/transport"
)

// Prefix begins the message of every error of the library, once: an error
// that wraps another prints the other's message without it (Text).
const Prefix = "mcpsync: "

// prefixed is an error whose message is Prefix followed by its text.
type prefixed interface{ text() string }

// NewError returns a sentinel error that prints as Prefix + text and reads
// as text inside another error's message.
func NewError(text string) error { return &sentinel{text} }

type sentinel struct{ msg string }

func (e *sentinel) Error() string { return Prefix + e.msg }
func (e *sentinel) text() string  { return e.msg }

// Text returns how err reads inside the message of an error that wraps it:
// without the library's prefix, without mcp-go's "transport error: " (a
// *transport.Error only says that the transport returned it), and, for a
// failed HTTP exchange, as the *url.Error that says which request failed
// how, rather than the "failed to send request: " mcp-go (v1.2.1) puts
// before it once or twice. The root package reads its own error types
// first.
func Text(err error) string {
	switch e := err.(type) {
	case nil:
		return ""
	case prefixed:
		return e.text()
	case *transport.Error:
		return Text(e.Err)
	}
	if u, ok := errors.AsType[*url.Error](err); ok {
		return u.Error()
	}
	return err.Error()
}
