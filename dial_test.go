package mcpsync_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// pidServerEnv makes the test binary serve pidURI over stdio, whose text
// is the serving process's id: a read tells which process answered it.
const pidServerEnv = "MCPSYNC_TEST_PID_SERVER"

const pidURI = "file:///proc/self/pid"

func servePID() {
	srv := server.NewMCPServer("pid-server", "1.0.0", server.WithResourceCapabilities(true, false))
	text := strconv.Itoa(os.Getpid())
	srv.AddResource(mcp.NewResource(pidURI, "pid", mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: pidURI, MIMEType: "text/plain", Text: text}}, nil
		})
	if err := server.ServeStdio(srv); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// pidCommand is the test binary as a stdio server of pidURI.
func pidCommand() mcpsync.Command {
	return mcpsync.Command{
		Name: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append(os.Environ(), pidServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
	}
}

// servingPID reads pidURI through c and returns the id of the process that
// answered, with the session generation it was read in.
func servingPID(t *testing.T, ctx context.Context, c *mcpsync.Client) (int, uint64) {
	t.Helper()
	out, err := c.Read(ctx, pidURI)
	require.NoError(t, err)
	require.True(t, out.Accepted, "%+v", out.Stale)
	e, err := c.Lookup(pidURI)
	require.NoError(t, err)
	pid, err := strconv.Atoi(e.Contents[0].Text)
	require.NoError(t, err)
	return pid, out.Version.Version.SessionGeneration
}

// requireReaped fails unless every process of pids is gone and reaped (a
// zombie still answers signal 0).
func requireReaped(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d is left behind", pid)
	}
}

// A stdio server killed with SIGKILL five times: each time the Client
// starts a new process, heals the session and reads from it, and after
// Close no process it started is left, running or unreaped.
func TestCommandDialerHealsThroughKills(t *testing.T) {
	healed := make(chan uint64, 64)
	var told errorLog
	opts := &mcpsync.ClientOptions{
		Subject:   alice,
		OnError:   told.add,
		Reconnect: mcpsync.ReconnectPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		OnOutcome: func(o mcpsync.Outcome) {
			if o.Accepted {
				select {
				case healed <- o.Version.Version.SessionGeneration:
				default: // the test waits for one of a later session
				}
			}
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, mcpsync.CommandDialer(pidCommand()), opts)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Subscribe(ctx, pidURI)
	require.NoError(t, err)
	pid, gen := servingPID(t, ctx, c)
	pids := []int{pid}
	for kill := range 5 {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		// The session heals: a read of a later session is accepted.
		for healedIn := gen; healedIn <= gen; {
			select {
			case healedIn = <-healed:
			case <-ctx.Done():
				t.Fatalf("kill %d: not healed: %+v", kill+1, c.Health())
			}
		}
		next, nextGen := servingPID(t, ctx, c)
		require.NotEqual(t, pid, next, "kill %d: read from the killed server", kill+1)
		require.Greater(t, nextGen, gen)
		pid, gen = next, nextGen
		pids = append(pids, pid)
	}
	require.NoError(t, c.Close())
	requireReaped(t, pids)
	// Each loss was told as the server's exit.
	exits := 0
	for _, err := range told.list() {
		lost, ok := errors.AsType[*mcpsync.ConnectionError](err)
		if ok && lost.Attempt == 0 && errors.Is(err, mcpsync.ErrServerExited) {
			exits++
		}
	}
	require.Equal(t, 5, exits, "%v", told.list())
}

// The context given to Connect bounds the handshake only: once it ends, the
// server the Client started keeps serving the same session.
func TestCommandDialerServerOutlivesTheDialContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	c, err := mcpsync.Connect(ctx, mcpsync.CommandDialer(pidCommand()), &mcpsync.ClientOptions{Subject: alice})
	require.NoError(t, err)
	defer c.Close()
	cancel()
	_, err = c.Subscribe(t.Context(), pidURI)
	require.NoError(t, err)
	pid, gen := servingPID(t, t.Context(), c)
	again, genAgain := servingPID(t, t.Context(), c)
	require.Equal(t, pid, again)
	require.Equal(t, uint64(1), gen)
	require.Equal(t, gen, genAgain, "the session was lost after the dial context ended")
	require.NoError(t, syscall.Kill(pid, 0), "the server was ended with the dial context")
	require.NoError(t, c.Close())
	requireReaped(t, []int{pid})
}

// Command.Prepare gets the command before it starts, already in a process
// group of its own, and keeps it: its Process is the server that answers.
// An error of Prepare fails the dial with that error, and starts nothing.
func TestCommandPrepareSeesTheServerBeforeItStarts(t *testing.T) {
	cmd := pidCommand()
	var prepared []*exec.Cmd
	cmd.Prepare = func(c *exec.Cmd) error {
		require.Nil(t, c.Process, "prepared after the start")
		require.True(t, c.SysProcAttr != nil && c.SysProcAttr.Setpgid, "no process group of its own")
		prepared = append(prepared, c)
		return nil
	}
	c, err := mcpsync.Connect(t.Context(), mcpsync.CommandDialer(cmd), &mcpsync.ClientOptions{Subject: alice})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Subscribe(t.Context(), pidURI)
	require.NoError(t, err)
	pid, _ := servingPID(t, t.Context(), c)
	require.Len(t, prepared, 1)
	require.Equal(t, pid, prepared[0].Process.Pid, "the kept command is not the server")

	errNoCredentials := errors.New("no credentials for the server")
	cmd.Prepare = func(c *exec.Cmd) error {
		prepared = append(prepared, c)
		return errNoCredentials
	}
	_, err = mcpsync.Connect(t.Context(), mcpsync.CommandDialer(cmd), &mcpsync.ClientOptions{Subject: alice})
	require.ErrorIs(t, err, errNoCredentials)
	require.Len(t, prepared, 2)
	assert.Nil(t, prepared[1].Process, "a failed Prepare started the server")
}

// No two sessions of an HTTPDialer share a connection, whatever pools the
// caller's transport keeps: not the attempt Connect abandons for one with
// the notification stream and the session that follows it, not a
// reconnect's session and the one it replaces. Closing a session ends its
// requests in flight, and net/http (go1.26) hands the connection of an
// answer without a body (202 to a notification, 200 to a DELETE) to the
// next request before the answer reaches its caller: a cancellation in
// between closes it under that request, which fails with "context
// canceled". On connections of its own, a reconnect's initialize cannot
// be ended by the close of the session it replaces. They close with their
// session.
func TestHTTPSessionsNeverShareAConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		base func() *http.Client
	}{
		{"default transport", func() *http.Client { return nil }},
		{"caller's transport", func() *http.Client {
			return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{LegacyOnly: true})
			srv.Set(pidURI, "text/plain", "1")
			var (
				mu       sync.Mutex
				sessions = map[string]map[string]bool{} // client address → sessions its requests were of
				open     = map[net.Conn]bool{}
				closed   = make(chan struct{}, 1)
			)
			h := server.NewStreamableHTTPServer(srv.MCPServer())
			hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				note := func(session string) {
					if session == "" {
						return // a probe before any session
					}
					mu.Lock()
					defer mu.Unlock()
					if sessions[r.RemoteAddr] == nil {
						sessions[r.RemoteAddr] = map[string]bool{}
					}
					sessions[r.RemoteAddr][session] = true
				}
				note(r.Header.Get(server.HeaderKeySessionID))
				h.ServeHTTP(w, r)
				note(w.Header().Get(server.HeaderKeySessionID)) // an initialize's answer names its session
			}))
			hs.Config.ConnState = func(c net.Conn, s http.ConnState) {
				mu.Lock()
				defer mu.Unlock()
				switch s {
				case http.StateNew:
					open[c] = true
				case http.StateClosed, http.StateHijacked:
					delete(open, c)
					select {
					case closed <- struct{}{}:
					default:
					}
				}
			}
			hs.Start()
			t.Cleanup(hs.Close)

			// Auto: the first session answers a legacy revision without the
			// notification stream, and Connect dials again with it.
			c, err := mcpsync.Connect(t.Context(), mcpsync.HTTPDialer(hs.URL, tc.base()), &mcpsync.ClientOptions{Subject: alice, PingEvery: -1})
			require.NoError(t, err)
			_, err = c.Subscribe(t.Context(), pidURI)
			require.NoError(t, err)
			require.NoError(t, c.Reconnect(t.Context()))
			_, err = c.Read(t.Context(), pidURI)
			require.NoError(t, err)
			require.NoError(t, c.Close())

			mu.Lock()
			for addr, of := range sessions {
				assert.Len(t, of, 1, "connection %s carried requests of %d sessions", addr, len(of))
			}
			mu.Unlock()
			deadline := time.After(10 * time.Second)
			for {
				mu.Lock()
				n := len(open)
				mu.Unlock()
				if n == 0 {
					break
				}
				select {
				case <-closed:
				case <-deadline:
					t.Fatalf("%d connection(s) still open after Close", n)
				}
			}
		})
	}
}
