// Command mcpsync keeps a provably consistent local copy of an MCP server's
// resources from the command line: it scans catalogs, reads through the
// fence, watches subscriptions, and demonstrates the library converging
// under injected faults.
//
//	mcpsync scan  [flags] (--url URL | -- command args...)
//	mcpsync read  [flags] URI (--url URL | -- command args...)
//	mcpsync watch [flags] [URI...] [--all] (--url URL | -- command args...)
//	mcpsync outbox --ledger FILE [--consumer NAME] [--json] [--ack] [--through N]
//	mcpsync demo  [flags]
//
// The server is given as --url (streamable HTTP) or as a command after "--"
// (stdio), which mcpsync runs and ends. --json prints one JSON object per
// line, each with an "at" field (when it was written, RFC 3339 with
// nanoseconds, UTC) and an "event" field; the default is readable text.
// watch --events selects the kinds of event printed; text leaves state
// transitions out unless asked. Exit status: 0 on success, 1 on a runtime
// failure, 2 on a usage error (a bad flag, a malformed --url, a missing
// argument), 3 when an outbox consumer lost entries to the retention bound,
// with a one-line message on stderr.
//
// scan, read and watch keep their engine in memory unless --ledger names a
// ledger file: then the fence, the versions, the revocations and the outbox
// carry over from run to run, and outbox lists what is pending in it. One
// process opens a ledger file at a time.
//
// Over streamable HTTP, revisions before 2026-07-28 deliver notifications
// only on the standalone GET stream, and mcp-go opens that stream only on
// connections it keeps on a legacy revision. A pinned legacy --protocol
// opens it. With --protocol auto a server may answer 2026-07-28, whose
// subscriptions/listen stream carries notifications; if it answers a legacy
// revision instead, watch reconnects once with the GET stream before it
// subscribes. Either way revalidation reads (--revalidate) bound how stale
// the copy may get when notifications are lost.
//
// watch keeps scanning the server's resources, every --rescan and after each
// list_changed: that is how deletions are confirmed against servers that
// cannot prove a listing complete (corroborated: two clean passes without
// the URI, then a second read that is still not found), and, with --all, how
// resources created later are subscribed. Where the server cannot
// subscribe, --rescan bounds how late a new or deleted resource is found and
// --poll how late changed content is seen; neither does the other's work.
//
// The demo needs no server and no network: it runs an in-process server
// from mcpsynctest, injects faults under --seed and exits 1 unless the
// local copy ends equal to the server's content.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mcpsync/mcpsync"
)

func main() {
	// The first Ctrl-C cancels ctx, so long-running commands unsubscribe,
	// close and print their summary; stop restores the default handling, so
	// a second Ctrl-C kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitOutboxGap: the retention bound dropped outbox entries before the
	// consumer passed them. A worker must know, so it is not 1.
	exitOutboxGap = 3
)

const usage = `usage: mcpsync <command> [flags] (--url URL | -- command args...)

commands:
  scan    two-pass discovery of resources and templates; prints the catalog
          (a list the server does not implement is UNSUPPORTED, not a failure)
  read    one fenced read of URI; prints the version receipt and the content
  watch   subscribe (or poll), keep scanning (--rescan) and stream events
          until --duration or Ctrl-C; --events change,delete,error selects
          kinds (text leaves state transitions out by default). Where the
          server cannot subscribe, --rescan bounds how late a new or deleted
          resource is found, --poll how late changed content is seen
  outbox  list what a ledger's outbox holds for a consumer; --ack acknowledges it
  demo    the library converging under injected faults, in process

common flags:
  --url URL          streamable HTTP endpoint of the server
  -- command args    run the server as a subprocess speaking stdio
  --protocol V       auto|2025-06-18|2025-11-25|2026-07-28 (default auto); a pinned
                     revision the server does not accept is an error
  --timeout D        bound on connecting, every request and closing (default 30s)
  --scan-timeout D   bound on a whole scan, every page included (default 5m)
  --subject S        authorization subject every read is bound to (default "cli")
  --json             JSON lines on stdout instead of text, each with "at"
                     (RFC 3339, nanoseconds, UTC) and "event"
  --ledger FILE      scan, read, watch: keep the fence, versions and outbox in
                     this file across runs (default: memory, forgotten at exit)

exit status: 0 success, 1 runtime failure, 2 usage error,
  3 an outbox consumer lost entries to the retention bound (outbox)

Run "mcpsync <command> -h" for the flags of a command.
`

// usageError is a mistake in the command line: exit 2.
type usageError struct {
	msg string
	cmd string // the subcommand whose flags were wrong, "" before one is known
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp is returned when -h was asked for and the help was printed.
var errHelp = errors.New("help printed")

// run is the whole command: it parses args, runs one subcommand and returns
// the exit status. A failure is reported as one line on stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	_ = stdin // no command reads stdin; stdio servers get their own pipes
	err := dispatch(ctx, args, stdout, stderr)
	var uerr *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &uerr):
		help := "mcpsync -h"
		if uerr.cmd != "" {
			help = "mcpsync " + uerr.cmd + " -h"
		}
		fmt.Fprintf(stderr, "mcpsync: %s (run %q for usage)\n", message(err), help)
		return exitUsage
	case errors.Is(err, mcpsync.ErrOutboxGap):
		fmt.Fprintf(stderr, "mcpsync: %s\n", message(err))
		return exitOutboxGap
	default:
		fmt.Fprintf(stderr, "mcpsync: %s\n", message(err))
		return exitFailure
	}
}

// wrapped is an error of the command around one of the library's, whose
// message begins with the "mcpsync: " the command says once, in front of
// the whole line (message): the cause is said without it.
type wrapped struct {
	context string
	err     error
}

// wrapf says what the command was doing when err happened, as
// fmt.Errorf("format: %w", a..., err) does.
func wrapf(err error, format string, a ...any) error {
	return &wrapped{context: fmt.Sprintf(format, a...), err: err}
}

func (w *wrapped) Error() string {
	return w.context + ": " + strings.TrimPrefix(w.err.Error(), "mcpsync: ")
}

func (w *wrapped) Unwrap() error { return w.err }

// message is err as one line after the command's "mcpsync: ": the
// library's errors begin with it already, and it is said once.
func message(err error) string {
	return oneLine(strings.TrimPrefix(err.Error(), "mcpsync: "))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given")
	}
	name, rest := args[0], args[1:]
	commands := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"scan": runScan, "read": runRead, "watch": runWatch, "outbox": runOutbox, "demo": runDemo,
	}
	if cmd, ok := commands[name]; ok {
		err := cmd(ctx, rest, stdout, stderr)
		var uerr *usageError
		if errors.As(err, &uerr) {
			uerr.cmd = name
		}
		return err
	}
	switch name {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return errHelp
	}
	return usagef("unknown command %q", name)
}

// oneLine keeps a message on one line: errors joined by errors.Join, or
// carrying a server's text, may hold newlines.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
