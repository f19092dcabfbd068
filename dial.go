package mcpsync

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"slices"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// Command is a stdio MCP server program: what CommandDialer starts, once for
// every session.
type Command struct {
	// Name is the program, looked up in PATH when it has no slash.
	Name string
	// Args are its arguments, the program's name not among them.
	Args []string
	// Env is its environment; nil means this process's.
	Env []string
	// Dir is its working directory; "" means this process's.
	Dir string
	// Prepare, if set, is called with each command CommandDialer builds,
	// before it starts: to set what the fields above cannot say
	// (credentials, a Stderr of the caller's), or to keep the *exec.Cmd,
	// whose Process is the server once the dial returns. An error fails
	// the dial. SysProcAttr already puts the server in a process group of
	// its own (on Unix): change its fields rather than replace it, or what
	// the server starts is no longer signalled with it. Leave Stdin and
	// Stdout unset; a nil Stderr keeps the last kilobyte for the exit error
	// and discards the rest.
	Prepare func(cmd *exec.Cmd) error
}

// CommandDialer returns a Dialer of a stdio MCP server: every dial starts
// the program anew and speaks newline-delimited JSON-RPC over its stdin and
// stdout, every line bounded by the client's Limits.
//
// The Client owns the process. It starts one at every (re)connect, so a
// server that died is replaced when the session heals; the dial context
// bounds the handshake only, never the process. When the session ends
// (Close, a reconnect, a lost server) the Client closes the server's stdin,
// then sends SIGTERM, then SIGKILL, each after 2 s, and reaps it. The
// server runs in a process group of its own (on Unix): the signals reach
// what it started too, and what it left running when it exited is killed. The last
// kilobyte the server wrote to stderr is kept for the error that says why
// it exited.
func CommandDialer(cmd Command) Dialer {
	cmd.Args = slices.Clone(cmd.Args)
	cmd.Env = slices.Clone(cmd.Env)
	return func(ctx context.Context) (transport.Interface, error) {
		c := exec.Command(cmd.Name, cmd.Args...)
		c.Env, c.Dir = cmd.Env, cmd.Dir
		wire.OwnGroup(c)
		if cmd.Prepare != nil {
			if err := cmd.Prepare(c); err != nil {
				return nil, err
			}
		}
		return wire.NewProcess(c, monitorFrom(ctx))
	}
}

// StreamDialer returns a Dialer of newline-delimited JSON-RPC over the
// streams open returns: out carries the server's messages, in the client's.
// Every message is bounded by the client's Limits; closing the transport
// closes both.
func StreamDialer(open func(ctx context.Context) (out io.ReadCloser, in io.WriteCloser, err error)) Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		out, in, err := open(ctx)
		if err != nil {
			return nil, err
		}
		return wire.NewStream(out, in, monitorFrom(ctx)), nil
	}
}

// HTTPDialer returns a Dialer of streamable HTTP at url whose response
// bodies and SSE events are bounded by the client's MaxMessageBytes. base,
// if not nil, is the client whose transport and settings are used; opts are
// mcp-go's (a WithHTTPBasicClient among them is overridden).
//
// Every session has connections of its own, closed when it ends: base's
// transport, when it is an *http.Transport (the default one when base has
// none), is cloned for each session the Client dials, so that the close of
// one session, which ends its requests in flight, can never end a request
// of another on a connection they shared (net/http hands a connection to
// the next request before the answer on it reaches its caller). Another
// RoundTripper is shared by the sessions as it is.
//
// Notifications reach the client in every era: a server that answers a
// legacy revision is dialed again with mcp-go's continuous listening, the
// only stream that carries its notifications (it pins a legacy revision, so
// it is not asked for first).
func HTTPDialer(url string, base *http.Client, opts ...transport.StreamableHTTPCOption) Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		var hc *http.Client
		if mon := wire.MonitorFrom(ctx); mon != nil {
			hc = wire.SessionHTTPClient(base, mon)
		} else {
			hc = wire.HTTPClient(base, monitorFrom(ctx)) // no session to close its connections
		}
		opts := append(slices.Clone(opts), transport.WithHTTPBasicClient(hc))
		if wire.ListeningWanted(ctx) {
			opts = append(opts, transport.WithContinuousListening())
		}
		return transport.NewStreamableHTTP(url, opts...)
	}
}

// monitorFrom returns the monitor of the session ctx dials, or, for a
// dialer called on its own, a monitor of no limits.
func monitorFrom(ctx context.Context) *wire.Monitor {
	if m := wire.MonitorFrom(ctx); m != nil {
		return m
	}
	return wire.NewMonitor(wire.Limits{}, wireFaults{}, nil)
}
