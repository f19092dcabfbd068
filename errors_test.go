package mcpsync_test

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Every error says what happened once: one "mcpsync: " however deep the
// wrapping, a server's JSON-RPC answer as the server's answer (never
// "transport error"), and a stdio server that fails its handshake by what
// it did. Callers tell them apart with errors.Is and errors.As; this test
// alone reads the messages, to pin their form.
func TestErrorsSayWhatHappenedOnce(t *testing.T) {
	sh := func(script string) mcpsync.Dialer {
		return mcpsync.CommandDialer(mcpsync.Command{Name: "sh", Args: []string{"-c", script}})
	}
	connect := func(dial mcpsync.Dialer) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: alice})
		if err == nil {
			c.Close()
		}
		return err
	}
	// faulted connects to an in-process server whose next answer to
	// method is the JSON-RPC error code, and runs do.
	faulted := func(method string, code int, do func(*mcpsync.Client) error) error {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
		dial := func(context.Context) (transport.Interface, error) { return kit, nil }
		c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Subject: alice})
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		kit.FailNext(method, "", code, "no such method here")
		return do(c)
	}
	exitStatus := func(code int) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			exit, ok := errors.AsType[*mcpsync.ExitError](err)
			require.True(t, ok, "%T", err)
			assert.True(t, exit.BeforeInitialize)
			status, ok := errors.AsType[*exec.ExitError](err)
			require.True(t, ok)
			assert.Equal(t, code, status.ExitCode())
		}
	}
	rpc := func(method string, code int) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			answer, ok := errors.AsType[*mcpsync.RPCError](err)
			require.True(t, ok, "%T", err)
			assert.Equal(t, method, answer.Method)
			assert.Equal(t, code, answer.Code)
		}
	}
	for _, tc := range []struct {
		name  string
		err   func() error
		is    error
		check func(*testing.T, error)
		// message is the whole message when the test can know it.
		message string
	}{
		{
			name: "a server that exits at once", err: func() error { return connect(sh("exit 1")) },
			is: mcpsync.ErrServerExited, check: exitStatus(1),
			message: "mcpsync: the server exited before initialize (exit status 1)",
		},
		{
			name: "a server that exits with a word on stderr", err: func() error { return connect(sh("echo 'cannot find module' >&2; exit 3")) },
			is: mcpsync.ErrServerExited, check: func(t *testing.T, err error) {
				exitStatus(3)(t, err)
				exit, _ := errors.AsType[*mcpsync.ExitError](err)
				assert.Equal(t, "cannot find module", exit.Stderr)
			},
			message: `mcpsync: the server exited before initialize (exit status 3): stderr: "cannot find module"`,
		},
		{
			name: "a server that says nothing and ends", err: func() error { return connect(sh("cat /dev/null")) },
			is: mcpsync.ErrServerExited, check: func(t *testing.T, err error) {
				exit, ok := errors.AsType[*mcpsync.ExitError](err)
				require.True(t, ok)
				assert.NoError(t, exit.Err, "exit status 0")
			},
			message: "mcpsync: the server exited before initialize (exit status 0)",
		},
		{
			name: "a program that is not an MCP server", err: func() error { return connect(sh("echo garbage")) },
			is: mcpsync.ErrNotJSONRPC, check: func(t *testing.T, err error) {
				out, ok := errors.AsType[*mcpsync.MessageError](err)
				require.True(t, ok)
				assert.Equal(t, mcpsync.FaultNotJSONRPC, out.Fault)
				assert.Equal(t, "garbage", string(out.Line))
			},
			message: `mcpsync: the server's output is not JSON-RPC: "garbage"`,
		},
		{
			name: "a read the server answers with -32601",
			err: func() error {
				return faulted("resources/read", -32601, func(c *mcpsync.Client) error {
					_, err := c.Read(t.Context(), docURI)
					return err
				})
			},
			check:   rpc("resources/read", -32601),
			message: "mcpsync: read failed: " + docURI + ": server answered -32601 method not found to resources/read: no such method here",
		},
		{
			name: "a scan whose list the server answers with -32603",
			err: func() error {
				return faulted("resources/list", -32603, func(c *mcpsync.Client) error {
					_, err := c.Scan(t.Context(), mcpsync.KindResources)
					return err
				})
			},
			is: mcpsync.ErrScanUnreconciled, check: rpc("resources/list", -32603),
			message: "mcpsync: resources scan unreconciled after 1 attempts: list pass: PAGE_ERROR at page 0: server answered -32603 internal error to resources/list: no such method here",
		},
		{
			name: "an HTTP server that refuses the connection",
			err:  func() error { return connect(mcpsync.HTTPDialer("http://127.0.0.1:1/mcp", nil)) },
			check: func(t *testing.T, err error) {
				_, ok := errors.AsType[*url.Error](err)
				assert.True(t, ok)
				assert.NotContains(t, err.Error(), "failed to send request", "mcp-go's wrapping is left out")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			require.Error(t, err)
			msg := err.Error()
			assert.Equal(t, 1, strings.Count(msg, "mcpsync:"), msg)
			assert.NotContains(t, msg, "transport error", msg)
			if tc.message != "" {
				assert.Equal(t, tc.message, msg)
			}
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
		})
	}
}

// A server's error message is its own text, not ours: one that holds a
// newline, a control character or this package's prefix is quoted, so it
// cannot forge a line of a log or an error of the library, and one past
// 512 bytes is cut short, saying how long it was.
func TestAServersErrorMessageIsQuotedWhenItCouldForgeText(t *testing.T) {
	for _, tc := range []struct{ message, want string }{
		{"no such method here", ": no such method here"},
		{"bad\nmcpsync: forged line", `: "bad\nmcpsync: forged line"`},
		{"mcpsync: looks like ours", `: "mcpsync: looks like ours"`},
		{"tab\there", `: "tab\there"`},
		{strings.Repeat("x", 600), ": " + strings.Repeat("x", 512) + "… (600 bytes)"},
	} {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), 1)
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) { return kit, nil }, &mcpsync.ClientOptions{Subject: alice})
		require.NoError(t, err)
		_, err = c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		kit.FailNext("resources/read", "", -32603, tc.message)
		_, err = c.Read(t.Context(), docURI)
		require.Error(t, err)
		msg := err.Error()
		assert.True(t, strings.HasSuffix(msg, "to resources/read"+tc.want), "%q", msg)
		assert.NotContains(t, msg, "\n")
		rpc, ok := errors.AsType[*mcpsync.RPCError](err)
		require.True(t, ok)
		assert.Equal(t, tc.message, rpc.Message, "the server's words are kept whole")
		require.NoError(t, c.Close())
	}
}

// A stdio server that fails its handshake is told by what it did, every
// time, however its exit, its output and the client's first write race:
// a server gone before the client wrote is an exit, never "broken pipe",
// and a line it wrote before it went is the reason, never lost to the
// exit that came with it.
func TestStartupFailuresAreAlwaysToldByWhatTheServerDid(t *testing.T) {
	runs := 40
	if testing.Short() {
		runs = 8
	}
	for _, tc := range []struct{ script, want string }{
		{"exit 1", "mcpsync: the server exited before initialize (exit status 1)"},
		{"echo 'cannot find module' >&2; exit 3", `mcpsync: the server exited before initialize (exit status 3): stderr: "cannot find module"`},
		{"exec true", "mcpsync: the server exited before initialize (exit status 0)"},
		{"echo garbage", `mcpsync: the server's output is not JSON-RPC: "garbage"`},
	} {
		t.Run(tc.script, func(t *testing.T) {
			told := map[string]int{}
			for range runs {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				c, err := mcpsync.Connect(ctx, mcpsync.CommandDialer(mcpsync.Command{Name: "sh", Args: []string{"-c", tc.script}}), &mcpsync.ClientOptions{Subject: alice})
				cancel()
				if err == nil {
					c.Close()
					told["connected"]++
					continue
				}
				told[err.Error()]++
			}
			assert.Equal(t, map[string]int{tc.want: runs}, told)
		})
	}
}

// An engine whose ledger fails (here a bolt ledger closed under it, as at
// shutdown) says so once in every call of the consumer API: "mcpsync: "
// begins the message, and the ledger's sentinel, which prints that prefix
// too, reads without it. It fails while the engine wraps the ledger's
// errors with fmt.Errorf ("mcpsync: pull outbox: mcpsync: ledger closed",
// "mcpsync: ack outbox for ...: boltledger: ...: mcpsync: ledger closed").
func TestLedgerFailuresSayMcpsyncOnce(t *testing.T) {
	l, err := boltledger.Open(filepath.Join(t.TempDir(), "ledger.db"), nil)
	require.NoError(t, err)
	e := newEngine(t, &mcpsync.EngineOptions{Ledger: l})
	readAs(t, e, docURI, alice, "a")
	entries, err := e.PullOutbox(0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	require.NoError(t, l.Close())

	first := func(seq func(func(mcpsync.Entry, error) bool)) error {
		for _, err := range seq {
			return err
		}
		return nil
	}
	for name, call := range map[string]func() error{
		"Resolve": func() error { _, err := e.Resolve(t.Context(), entries[0]); return err },
		"Lookup":  func() error { _, err := e.Lookup(alice, docURI); return err },
		"Entries": func() error { return first(e.Entries(t.Context(), alice)) },
		"PullOutbox": func() error {
			_, err := e.PullOutbox(0, 0)
			return err
		},
		"Acknowledge": func() error { return e.Acknowledge(t.Context(), "indexer", 1) },
		"Consume": func() error {
			for _, err := range e.Consume(t.Context(), "indexer") {
				return err
			}
			return nil
		},
		"Forget": func() error { return e.Forget(docURI) },
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			require.ErrorIs(t, err, ledger.ErrLedgerClosed)
			msg := err.Error()
			assert.Equal(t, 1, strings.Count(msg, "mcpsync:"), msg)
		})
	}
}

// A stdio server that answered initialize and exited right after is not
// told as one that exited before initialize: it answered. (This one closes
// its input first, so that the client's initialized notification always
// meets a closed pipe, as it does whenever the exit wins the race.)
func TestAServerThatExitsAfterAnsweringInitializeIsNotToldAsExitingBefore(t *testing.T) {
	const script = `read line; exec 0<&-; id=$(printf '%s' "$line" | sed 's/.*"id":\([0-9]*\).*/\1/'); ` +
		`printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"resources":{}},"serverInfo":{"name":"quick","version":"1"}}}\n' "$id"; exit 0`
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, mcpsync.CommandDialer(mcpsync.Command{Name: "sh", Args: []string{"-c", script}}),
		&mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25"})
	if err == nil {
		require.NoError(t, c.Close())
		return
	}
	exit, ok := errors.AsType[*mcpsync.ExitError](err)
	require.True(t, ok, "%T: %v", err, err)
	assert.False(t, exit.BeforeInitialize, "the server answered initialize, yet: %v", err)
}

// A stdio server that closes its output and lives on fails the handshake
// by what it did, not by mcp-go's "transport closed", which names neither
// the server nor its output.
func TestAServerThatClosesItsOutputIsToldByWhatItDid(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := mcpsync.Connect(ctx, mcpsync.CommandDialer(mcpsync.Command{Name: "sh", Args: []string{"-c", "exec >&-; exec sleep 30"}}),
		&mcpsync.ClientOptions{Subject: alice})
	require.ErrorIs(t, err, mcpsync.ErrOutputClosed)
	assert.NotContains(t, err.Error(), "transport closed")
}
