package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mcpsync/mcpsync/ledger/pgledger"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
)

// protocols are the values --protocol accepts; "auto" lets mcp-go negotiate.
var protocols = []string{"auto", "2025-06-18", "2025-11-25", "2026-07-28"}

// common holds the flags every command shares.
type common struct {
	url      string
	protocol string
	timeout  time.Duration
	subject  string
	json     bool
	limits   mcpsync.Limits
	// ledger is --ledger, of the commands that sync; "" keeps the fence in
	// memory, forgotten at exit.
	ledger nonEmpty
	// shared is the --ledger opened, when it is a PostgreSQL ledger that
	// many workers share: watch splits URIs through it, read leases its URI.
	shared *pgledger.Ledger
	// command is the server to run over stdio: everything after "--".
	command []string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "streamable HTTP endpoint of the server")
	fs.StringVar(&c.protocol, "protocol", "auto", "protocol revision: "+strings.Join(protocols, "|"))
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on connecting, on every request and on closing the server (a whole scan: --scan-timeout)")
	fs.StringVar(&c.subject, "subject", "cli", "authorization subject every read is bound to")
	fs.BoolVar(&c.json, "json", false, "JSON lines on stdout instead of text")
	fs.Int64Var(&c.limits.MaxReadBytes, "max-read-bytes", 0, "bound on the decoded bytes of one read (0: 16 MiB)")
	fs.IntVar(&c.limits.MaxReadItems, "max-read-items", 0, "bound on the content items of one read (0: 10000)")
	fs.IntVar(&c.limits.MaxPageItems, "max-page-items", 0, "bound on the items of one list page (0: 100000)")
	fs.IntVar(&c.limits.MaxScanPages, "max-scan-pages", 0, "bound on the pages of one scan pass (0: 1000)")
	fs.DurationVar(&c.limits.ScanTimeout, "scan-timeout", 0, "bound on a whole scan (0: 5m)")
	fs.Int64Var(&c.limits.MaxMessageBytes, "max-message-bytes", 0, "bound on one JSON-RPC message (0: 32 MiB)")
	fs.IntVar(&c.limits.MaxDepth, "max-depth", 0, "bound on the JSON nesting of one message (0: 128)")
	fs.IntVar(&c.limits.MaxNotificationsPerSecond, "max-notifications-per-second", 0, "notification rate beyond which a session is degraded (0: 10000)")
}

// registerLedger adds --ledger, for the commands whose engine may live in
// a file (not the demo, which shows the library on its embedded default).
func (c *common) registerLedger(fs *flag.FlagSet) {
	fs.Var(&c.ledger, "ledger", "ledger keeping the fence, versions, revocations and outbox across runs: a `file` (created if missing) or a postgres:// URL shared by many workers (default: memory)")
}

// versionPin is the ClientOptions.ProtocolVersion of --protocol.
func (c *common) versionPin() string {
	if c.protocol == "auto" {
		return ""
	}
	return c.protocol
}

// check validates the shared flags; needServer is false for the demo,
// which runs its own server.
func (c *common) check(needServer bool) error {
	switch {
	case !slices.Contains(protocols, c.protocol):
		return usagef("--protocol %q is not one of %s", c.protocol, strings.Join(protocols, ", "))
	case c.timeout <= 0:
		return usagef("--timeout must be positive")
	case c.subject == "":
		return usagef("--subject must not be empty")
	case !needServer && (c.url != "" || len(c.command) > 0):
		return usagef("this command runs its own server: give neither --url nor a command")
	case !needServer:
		return nil
	case c.url != "" && len(c.command) > 0:
		return usagef("give either --url or a command after --, not both")
	case c.url == "" && len(c.command) == 0:
		return usagef("no server: give --url URL or a command after --")
	}
	return nil
}

// parse parses args for a command: flags and positional arguments may be
// interleaved ("read URI --json"), and everything after the first "--" is
// the stdio server's command line, never parsed. It returns the positional
// arguments.
func parse(fs *flag.FlagSet, c *common, args []string) ([]string, error) {
	if i := slices.Index(args, "--"); i >= 0 {
		args, c.command = args[:i], args[i+1:]
		if len(c.command) == 0 {
			return nil, usagef("no command after --")
		}
	}
	fs.SetOutput(io.Discard) // errors become one line; -h prints below
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional, args = append(positional, args[0]), args[1:]
	}
}

// helpOrUsage turns flag.ErrHelp into the command's help on stdout.
func helpOrUsage(err error, fs *flag.FlagSet, synopsis string, stdout io.Writer) error {
	if !errors.Is(err, flag.ErrHelp) {
		return err
	}
	fmt.Fprintf(stdout, "usage: mcpsync %s\n\nflags:\n", synopsis)
	fs.SetOutput(stdout)
	fs.PrintDefaults()
	return errHelp
}

// dialer turns the server flags into an mcpsync.Dialer, called at every
// (re)connect.
//
// Streamable HTTP: before 2026-07-28 notifications travel only on the
// standalone GET stream, which mcp-go opens with continuous listening; that
// option also pins the connection to a legacy revision. So a legacy
// --protocol gets it, and auto does not: auto lets a modern server answer
// 2026-07-28, whose subscriptions/listen stream carries notifications. A
// server that then negotiates a legacy revision would notify on a stream
// nobody opened; watch re-dials with listening in that case (listen).
//
// stdio: the library's CommandDialer rather than mcp-go's stdio client,
// which would bind the subprocess to the context of Start and kill it when
// that ends. Started without a context and in a process group of its own,
// the server survives Ctrl-C on the terminal (which signals the foreground
// group) long enough to be unsubscribed from, and ends only when the
// transport closes (stdin closed, then SIGTERM).
//
// Every HTTP session has connections of its own, which the library closes
// with it (HTTPDialer).
func (c *common) dialer(listen *bool) mcpsync.Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		if c.url != "" {
			var opts []transport.StreamableHTTPCOption
			pinnedLegacy := c.protocol != "auto" && mcpsync.EraOf(c.protocol) == mcpsync.EraLegacy
			if pinnedLegacy || (listen != nil && *listen) {
				opts = append(opts, transport.WithContinuousListening())
			}
			return mcpsync.HTTPDialer(c.url, nil, opts...)(ctx)
		}
		// The library's stdio dialer, not mcp-go's, so that every line the
		// server writes is bounded by --max-message-bytes.
		return mcpsync.CommandDialer(mcpsync.Command{Name: c.command[0], Args: c.command[1:]})(ctx)
	}
}

// connection is a connected client and what ends it.
type connection struct {
	client *mcpsync.Client
	// ctx is the transports' context: it survives Ctrl-C, so commands can
	// still unsubscribe, and ends at close.
	ctx    context.Context
	cancel context.CancelFunc
}

// close closes the client; the connection's context ends after it, so
// transport goroutines bound to it stop last.
func (c *connection) close() error {
	err := c.client.Close()
	c.cancel()
	return err
}

// bounded runs fn (a connect or reconnect) with the connection's context,
// which ends early if timeout passes or ctx is cancelled before fn returns.
// mcp-go keeps the context given to a transport's Start for the transport's
// lifetime (the HTTP listening stream ends with it), so a context that ended
// with the attempt would end the session too.
func (c *connection) bounded(ctx context.Context, timeout time.Duration, what string, fn func(context.Context) error) error {
	timer := time.AfterFunc(timeout, c.cancel)
	stopInterrupt := context.AfterFunc(ctx, c.cancel)
	err := fn(c.ctx)
	timedOut := !timer.Stop()
	interrupted := !stopInterrupt()
	switch {
	case interrupted:
		return fmt.Errorf("%s: interrupted", what)
	case timedOut:
		return fmt.Errorf("%s: no session within %v", what, timeout)
	case err != nil:
		return wrapf(err, "%s", what)
	}
	return nil
}

// connect dials and initializes a session within --timeout.
func (c *common) connect(ctx context.Context, opts mcpsync.ClientOptions, listen *bool) (*connection, error) {
	conn := &connection{}
	conn.ctx, conn.cancel = context.WithCancel(context.WithoutCancel(ctx))
	opts.Subject = c.subject
	opts.ProtocolVersion = c.versionPin()
	opts.RequestTimeout = c.timeout
	opts.Limits = &c.limits
	// The server is named by where it is reached: a restart on a shared
	// ledger resumes only what was opened on the same server.
	opts.ServerID = c.url
	if opts.ServerID == "" {
		opts.ServerID = strings.Join(c.command, " ")
	}
	err := conn.bounded(ctx, c.timeout, "connect", func(cctx context.Context) error {
		client, err := mcpsync.Connect(cctx, c.dialer(listen), &opts)
		conn.client = client
		return err
	})
	if err != nil {
		if conn.client != nil {
			_ = conn.client.Close()
		}
		conn.cancel()
		return nil, err
	}
	return conn, nil
}
