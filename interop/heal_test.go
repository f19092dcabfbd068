package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// mcpgoEnv makes the test binary the helper process that serves an mcp-go
// server over stdio (see TestMain).
const mcpgoEnv = "MCPSYNC_INTEROP_MCPGO"

var healDocs = []string{"file:///heal/a.md", "file:///heal/b.md", "file:///heal/c.md"}

// newHealServer is the server every healing case restarts: the same
// documents in every incarnation, as a restarted process would serve them.
func newHealServer() *mcpsynctest.Server {
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "heal"})
	for _, uri := range healDocs {
		srv.Set(uri, "text/markdown", "body of "+uri)
	}
	return srv
}

// runMCPGoServer serves newHealServer over stdio until stdin closes.
func runMCPGoServer() int {
	if err := server.ServeStdio(newHealServer().MCPServer()); err != nil {
		return 1
	}
	return 0
}

// healOptions are small enough that every case heals within a few seconds:
// a heartbeat every 100 ms, a first reconnect after 50 ms. Revalidation
// every second makes the staleness bound short enough for a slow heal to
// pass it (which strict lookups must then refuse), yet longer than the
// heartbeat takes to find a hung server (PingEvery + PingTimeout).
func healOptions() mcpsync.ClientOptions {
	return mcpsync.ClientOptions{
		Subject:         "heal",
		RevalidateEvery: time.Second,
		PingEvery:       100 * time.Millisecond,
		PingTimeout:     200 * time.Millisecond,
		RequestTimeout:  2 * time.Second,
		RetryInitial:    20 * time.Millisecond,
		RetryMax:        200 * time.Millisecond,
		CloseTimeout:    5 * time.Second,
		Reconnect:       mcpsync.ReconnectPolicy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
	}
}

// healRig is a client under test and everything it reported.
type healRig struct {
	client *mcpsync.Client
	errs   chan error
	outs   chan mcpsync.Outcome

	mu    sync.Mutex // protects procs
	procs []*exec.Cmd
}

// newHealRig connects through dial (nil: the stdio server of cmd, whose
// processes it keeps) and subscribes uris.
func newHealRig(t *testing.T, dial mcpsync.Dialer, cmd mcpsync.Command, uris []string, pin ...string) *healRig {
	t.Helper()
	r := &healRig{errs: make(chan error, 1024), outs: make(chan mcpsync.Outcome, 1024)}
	if dial == nil {
		cmd.Prepare = func(c *exec.Cmd) error {
			r.mu.Lock()
			r.procs = append(r.procs, c)
			r.mu.Unlock()
			return nil
		}
		dial = mcpsync.CommandDialer(cmd)
	}
	opts := healOptions()
	if len(pin) > 0 {
		opts.ProtocolVersion = pin[0]
	}
	opts.OnError = func(err error) { r.errs <- err }
	opts.OnOutcome = func(o mcpsync.Outcome) { r.outs <- o }
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	client, err := mcpsync.Connect(ctx, dial, &opts)
	require.NoError(t, err)
	r.client = client
	for _, uri := range uris {
		_, err := client.Subscribe(ctx, uri)
		require.NoError(t, err)
	}
	// Every first read is in before anything is broken.
	for seen := map[string]bool{}; len(seen) < len(uris); {
		select {
		case o := <-r.outs:
			if o.Accepted {
				seen[o.Version.Version.URI] = true
			}
		case <-ctx.Done():
			t.Fatal("no first read of every URI")
		}
	}
	return r
}

// mcpgoProcess is this test binary as the mcp-go stdio server.
func mcpgoProcess() mcpsync.Command {
	return mcpsync.Command{Name: os.Args[0], Args: []string{"-test.run=^$"}, Env: append(os.Environ(), mcpgoEnv+"=1", "GORACE=atexit_sleep_ms=0")}
}

// current is the server process of the session now up.
func (r *healRig) current() *os.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[len(r.procs)-1].Process
}

// healing is what one loss cost.
type healing struct {
	detect, heal time.Duration
	reads        int // fenced reads and failed reads between the break and the heal
	failedReads  int
	// strictPastBound counts strict lookups that returned a copy older than
	// its bound; silent counts lookups that returned such a copy with no
	// Degraded reason.
	strictPastBound, silent int
	regressions             int
}

// breakAndHeal breaks the server with brk, then waits, on the client's own
// reports only, until every URI in uris has a version accepted in a newer
// session. With repair, the session is kept: once every URI's read has
// failed twice (tried and retried), repair runs, and a URI is healed by
// its next accepted read. The caller never calls Reconnect.
func (r *healRig) breakAndHeal(t *testing.T, uris []string, brk, repair func()) healing {
	t.Helper()
	var h healing
	gen := r.client.Health().SessionGeneration
	last := map[string]mcpsync.ResourceVersion{}
	for _, uri := range uris {
		e, err := r.client.Lookup(uri)
		require.NoError(t, err)
		last[uri] = e.Version
	}
	start := time.Now()
	brk()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	check := time.NewTicker(5 * time.Millisecond)
	defer check.Stop()
	healed := map[string]bool{}
	failed := map[string]int{}
	repaired := false
	newSession := repair == nil
	for len(healed) < len(uris) {
		select {
		case err := <-r.errs:
			var ce *mcpsync.ConnectionError
			var re *mcpsync.ReadError
			switch {
			case errors.As(err, &ce) && ce.Attempt == 0 && h.detect == 0:
				h.detect = time.Since(start)
			case errors.As(err, &re):
				h.failedReads++
				h.reads++
				if h.detect == 0 && !newSession {
					h.detect = time.Since(start)
				}
				failed[re.URI]++
			}
			if !newSession && !repaired && len(failed) == len(uris) && minCount(failed) >= 2 {
				for _, uri := range uris {
					e, err := r.client.Lookup(uri)
					require.NoError(t, err)
					assert.NotEmpty(t, e.Degraded, "a copy whose reads fail says so")
				}
				repair()
				repaired = true
			}
		case o := <-r.outs:
			h.reads++
			if !o.Accepted {
				continue
			}
			v := o.Version.Version
			if before(v, last[v.URI]) {
				h.regressions++
			}
			last[v.URI] = v
			if newSession && v.SessionGeneration > gen || repaired && failed[v.URI] > 0 {
				healed[v.URI] = true
			}
		case <-check.C:
		case <-deadline.C:
			t.Fatalf("not healed within %v: %d of %d URIs, health %+v", bound, len(healed), len(uris), r.client.Health())
		}
		for _, uri := range uris {
			if e, err := r.client.Lookup(uri, mcpsync.RequireFresh()); err == nil && time.Since(e.ValidatedAt) > e.StalenessBound {
				h.strictPastBound++
			} else if err != nil && !errors.Is(err, mcpsync.ErrStale) {
				t.Errorf("strict lookup of %s: %v", uri, err)
			}
			if e, err := r.client.Lookup(uri); err == nil && e.StalenessBound > 0 &&
				time.Since(e.ValidatedAt) > e.StalenessBound && e.Degraded == "" {
				h.silent++
			}
		}
	}
	h.heal = time.Since(start)
	return h
}

// before reports whether v is older than w in the fence's order: session,
// then subscription generation, then read ordinal.
func before(v, w mcpsync.ResourceVersion) bool {
	if v.SessionGeneration != w.SessionGeneration {
		return v.SessionGeneration < w.SessionGeneration
	}
	if v.SubscriptionGeneration != w.SubscriptionGeneration {
		return v.SubscriptionGeneration < w.SubscriptionGeneration
	}
	return v.ReadOrdinal < w.ReadOrdinal
}

func minCount(m map[string]int) int {
	n := -1
	for _, v := range m {
		if n < 0 || v < n {
			n = v
		}
	}
	return n
}

func (h healing) log(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s: detected in %v, healed in %v, %d reads during healing (%d failed)",
		what, h.detect.Round(time.Millisecond), h.heal.Round(time.Millisecond), h.reads, h.failedReads)
}

func (h healing) assertSafe(t *testing.T) {
	t.Helper()
	assert.Zero(t, h.regressions, "version regressions")
	assert.Zero(t, h.strictPastBound, "strict lookups served past the bound")
	assert.Zero(t, h.silent, "lookups past the bound with no Degraded reason")
}

// closeAndReap closes the client and checks that no server process it
// started is left.
func (r *healRig) closeAndReap(t *testing.T) {
	t.Helper()
	require.NoError(t, r.client.Close())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cmd := range r.procs {
		if cmd.Process == nil {
			continue
		}
		// Signal 0 finds a process that still runs or was never reaped.
		err := syscall.Kill(cmd.Process.Pid, 0)
		assert.ErrorIs(t, err, syscall.ESRCH, "server process %d is left after Close", cmd.Process.Pid)
	}
}

func TestHealAfterSIGKILLOfMCPGoStdioServer(t *testing.T) {
	r := newHealRig(t, nil, mcpgoProcess(), healDocs)
	h := r.breakAndHeal(t, healDocs, func() { require.NoError(t, r.current().Kill()) }, nil)
	h.log(t, "mcp-go stdio server SIGKILLed")
	h.assertSafe(t)
	assert.NotZero(t, h.detect, "the loss was reported")
	hl := r.client.Health()
	assert.Equal(t, mcpsync.ConnectionUp, hl.State)
	assert.EqualValues(t, 1, hl.Reconnects)
	r.closeAndReap(t)
}

func TestHealAfterSIGKILLOfEverythingServer(t *testing.T) {
	srv := everythingNow.server(t)
	const uri = "demo://resource/static/document/features.md"
	r := newHealRig(t, nil, mcpsync.Command{Name: srv.command, Args: srv.args}, []string{uri})
	h := r.breakAndHeal(t, []string{uri}, func() { require.NoError(t, r.current().Kill()) }, nil)
	h.log(t, "server-everything (stdio) SIGKILLed")
	h.assertSafe(t)
	assert.NotZero(t, h.detect, "the loss was reported")
	assert.EqualValues(t, 1, r.client.Health().Reconnects)
	r.closeAndReap(t)
}

// A stopped process keeps its pipes open and answers nothing: only the
// heartbeat can tell, and the process left behind must still be ended.
func TestHealAfterStdioServerStopsAnswering(t *testing.T) {
	r := newHealRig(t, nil, mcpgoProcess(), healDocs)
	h := r.breakAndHeal(t, healDocs, func() { require.NoError(t, r.current().Signal(syscall.SIGSTOP)) }, nil)
	h.log(t, "mcp-go stdio server stopped (SIGSTOP)")
	h.assertSafe(t)
	assert.NotZero(t, h.detect, "the loss was reported")
	r.closeAndReap(t)
}

// restartableHTTP serves a new mcp-go streamable HTTP server, with no
// memory of the last one's sessions, on the same address at every start.
type restartableHTTP struct {
	addr string
	hs   *http.Server
	done chan struct{}
	// failReads, while set, answers every resources/read with -32603.
	failReads atomic.Bool
}

func newRestartableHTTP(t *testing.T) *restartableHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &restartableHTTP{addr: ln.Addr().String()}
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *restartableHTTP) url() string { return "http://" + s.addr + "/mcp" }

// knownSessions accepts only the session ids it issued, so a restarted
// server answers a session of its predecessor with 404, as stateful
// servers do (mcp-go's default manager accepts any well-formed id).
type knownSessions struct {
	mu  sync.Mutex // protects ids
	ids map[string]bool
}

func (k *knownSessions) Generate() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := "mcp-session-" + hex.EncodeToString(b[:])
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ids[id] = true
	return id
}

func (k *knownSessions) Validate(id string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ids[id] {
		return false, errors.New("unknown session")
	}
	return false, nil
}

func (k *knownSessions) Terminate(id string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.ids, id)
	return false, nil
}

func (s *restartableHTTP) serve(ln net.Listener) {
	h := server.NewStreamableHTTPServer(newHealServer().MCPServer(),
		server.WithSessionIdManager(&knownSessions{ids: map[string]bool{}}))
	s.hs = &http.Server{Handler: s.failing(h), ReadHeaderTimeout: bound}
	s.done = make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		_ = hs.Serve(ln)
	}(s.hs, s.done)
}

// failing answers resources/read with an internal error while failReads
// is set, as a server whose backend is down answers.
func (s *restartableHTTP) failing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !s.failReads.Load() || req.Method != http.MethodPost {
			next.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "resources/read" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
				"error": map[string]any{"code": -32603, "message": "backend unavailable"}})
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, req)
	})
}

func (s *restartableHTTP) stop() {
	_ = s.hs.Close()
	<-s.done
}

// restart stops the server, dropping every connection, and starts a new
// one on the same port.
func (s *restartableHTTP) restart(t *testing.T) {
	s.stop()
	ln, err := net.Listen("tcp", s.addr)
	require.NoError(t, err)
	s.serve(ln)
}

// A legacy session has an id, which the restarted server answers with 404:
// the session is gone and a new one must be opened. (2026-07-28 has no
// session to lose; see heal_break_test.go in the library for what its
// listening stream does across a restart.)
func TestHealAfterHTTPServerRestartsOnTheSamePort(t *testing.T) {
	s := newRestartableHTTP(t)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer hc.CloseIdleConnections()
	r := newHealRig(t, mcpsync.HTTPDialer(s.url(), hc, transport.WithContinuousListening()), mcpsync.Command{}, healDocs, "2025-11-25")
	h := r.breakAndHeal(t, healDocs, func() { s.restart(t) }, nil)
	h.log(t, "streamable HTTP server restarted on the same port")
	h.assertSafe(t)
	assert.NotZero(t, h.detect, "the loss was reported")
	require.NoError(t, r.client.Close())
}

func TestHealAfterServerAnswersErrorsForAWhile(t *testing.T) {
	s := newRestartableHTTP(t)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer hc.CloseIdleConnections()
	r := newHealRig(t, mcpsync.HTTPDialer(s.url(), hc), mcpsync.Command{}, healDocs)
	// The errors last until every URI's read has failed and been retried
	// (the revalidation reads hit them).
	h := r.breakAndHeal(t, healDocs, func() { s.failReads.Store(true) }, func() { s.failReads.Store(false) })
	h.log(t, "server answered -32603 to every read")
	h.assertSafe(t)
	assert.Positive(t, r.client.Health().FailedReads)
	assert.Zero(t, r.client.Health().Reconnects, "failed reads are retried, the session kept")
	require.NoError(t, r.client.Close())
}
