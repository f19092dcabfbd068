package pgledger_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Environment of a shard worker process: the database, the schema, the MCP
// server and the worker's name.
const (
	envShardConn   = "MCPSYNC_SHARD_CONN"
	envShardSchema = "MCPSYNC_SHARD_SCHEMA"
	envShardURL    = "MCPSYNC_SHARD_URL"
	envShardName   = "MCPSYNC_SHARD_NAME"
)

// shardTTL is the lease TTL of the test's workers: short, so that a
// takeover is quick, and long against their rounds (shardEvery).
const (
	shardTTL   = 2 * time.Second
	shardEvery = 100 * time.Millisecond
	// shardRevalidate is the workers' staleness bound: each revalidates
	// its share of the 1,000 URIs every 10 s.
	shardRevalidate = 10 * time.Second
	// shardChangeEvery is how often the test's server changes a resource.
	shardChangeEvery = 5 * time.Millisecond
)

// TestShardWorker is not a test: run by TestManyWorkers as a child process
// (the os/exec TestHelperProcess pattern), it keeps its share of the
// server's resources on the fenced ledger until it is killed or told to
// stop (SIGTERM), announcing on stdout what it takes, lets go and is
// refused.
func TestShardWorker(t *testing.T) {
	conn := os.Getenv(envShardConn)
	if conn == "" {
		t.Skip("run by TestManyWorkers")
	}
	if err := shardWorker(conn, os.Getenv(envShardSchema), os.Getenv(envShardURL)); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func shardWorker(conn, schema, url string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: shardTTL}})
	if err != nil {
		return err
	}
	defer l.Close()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		return err
	}
	say("worker %s engine %s", l.Worker(), e.ID())
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(url, nil), &mcpsync.ClientOptions{
		Engine: e, Subject: "user:indexer", NoResume: true, ProtocolVersion: "2025-11-25",
		CoalesceWindow: -1, ReconnectReads: 1e6, PingEvery: -1,
		// The staleness bound: a notification the server dropped while a
		// worker was paused (its stream backed up) is caught by the next
		// revalidation.
		RevalidateEvery: shardRevalidate,
		OnError: func(err error) {
			if errors.Is(err, ledger.ErrNotLeaseholder) {
				say("refused %v", err)
			}
		},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	shard, err := pgledger.NewShard(l, c, &pgledger.ShardOptions{
		Every: shardEvery,
		URIs: func(ctx context.Context) ([]string, error) {
			cat, err := c.Scan(ctx, mcpsync.KindResources)
			if err != nil {
				return nil, err
			}
			var uris []string
			for d := range cat.Items() {
				uris = append(uris, d.URI)
			}
			return uris, nil
		},
		OnChange: func(uri string, owned bool) {
			if owned {
				say("took %s", uri)
			} else {
				say("dropped %s", uri)
			}
		},
		OnError: func(err error) { say("shard-error %v", err) },
	})
	if err != nil {
		return err
	}
	// SIGUSR1, sent while the worker is stopped past its TTL, has it write,
	// as soon as it runs again, to every URI it believes it holds: another
	// worker took them meanwhile, so the ledger must refuse.
	probe := make(chan os.Signal, 1)
	signal.Notify(probe, syscall.SIGUSR1)
	defer signal.Stop(probe)
	go func() {
		for range probe {
			for key := range l.Owned() {
				if _, err := e.Subscribe(key, "user:indexer"); errors.Is(err, ledger.ErrNotLeaseholder) {
					say("refused %s", key)
				}
			}
			say("probed")
		}
	}()
	if err := shard.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// shardProc is one worker process and what it announced.
type shardProc struct {
	name   string
	cmd    *exec.Cmd
	worker uuid.UUID

	mu    sync.Mutex // protects lines and at
	lines []string
	at    []time.Time   // when each line was read
	done  chan struct{} // closed when its stdout ends
}

func startShard(t testing.TB, name, conn, schema, url string) *shardProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestShardWorker$")
	cmd.Env = append(os.Environ(), envShardConn+"="+withApplicationName(conn, name),
		envShardSchema+"="+schema, envShardURL+"="+url, envShardName+"="+name)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p := &shardProc{name: name, cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		_ = cmd.Wait()
	})
	ready := make(chan uuid.UUID, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if f := strings.Fields(line); len(f) > 1 && f[0] == "worker" {
				if id, err := uuid.Parse(f[1]); err == nil {
					ready <- id
				}
			}
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.at = append(p.at, time.Now())
			p.mu.Unlock()
		}
	}()
	select {
	case p.worker = <-ready:
	case <-p.done:
		t.Fatalf("%s exited before it started: %v", name, p.said(""))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start", name)
	}
	return p
}

// last returns the last n lines the worker announced.
func (p *shardProc) last(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines[max(0, len(p.lines)-n):])
}

// tookSince returns the URIs the worker announced it took (subscribed and
// read) at or after since, with when it said so.
func (p *shardProc) tookSince(since time.Time) map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]time.Time{}
	for i, l := range p.lines {
		if uri, ok := strings.CutPrefix(l, "took "); ok && !p.at[i].Before(since) {
			out[uri] = p.at[i]
		}
	}
	return out
}

// said returns the lines the worker announced that start with prefix.
func (p *shardProc) said(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// docsServer serves n documents, file:///docs/0000.md on, at "v0", over
// streamable HTTP until the test ends.
func docsServer(tb testing.TB, n int) (*mcpsynctest.Server, []string, *httptest.Server) {
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{PageSize: 200})
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///docs/%04d.md", i)
		srv.Set(uris[i], "text/markdown", "v0")
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	tb.Cleanup(hs.Close)
	return srv, uris, hs
}

// keepChanging changes one of uris, picked by a generator seeded with
// seed, every shardChangeEvery until ctx ends; Wait on what it returns
// waits for the last change.
func keepChanging(ctx context.Context, srv *mcpsynctest.Server, uris []string, seed uint64) *sync.WaitGroup {
	var changer sync.WaitGroup
	changer.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		for v := 1; ctx.Err() == nil; v++ {
			srv.Set(uris[rng.IntN(len(uris))], "text/markdown", fmt.Sprintf("v%d", v))
			select {
			case <-ctx.Done():
			case <-time.After(shardChangeEvery):
			}
		}
	})
	return &changer
}

// owners returns who holds each key's lease, of the leases not expired.
func owners(t testing.TB, l *pgledger.Ledger) map[string]uuid.UUID {
	t.Helper()
	leases, err := l.Leases(context.Background())
	require.NoError(t, err)
	out := map[string]uuid.UUID{}
	for key, ls := range leases {
		if ls.Live {
			out[key] = ls.Owner
		}
	}
	return out
}

// eventually asks cond again until it holds or the deadline passes: the
// workers are other processes, so there is no event to wait on but the
// database's state.
func eventually(t testing.TB, deadline time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("%s: not within %v", what, deadline)
		}
	}
	return time.Since(start)
}

// Many workers, one fence: three worker processes split the server's 1,000
// changing resources. One is killed and its URIs are taken over within the
// lease TTL and a round; one is stopped past its TTL, its URIs are taken
// over, and once resumed its writes are refused and it lets them go; one has
// its database connections terminated and goes on. Once changes stop, every
// URI converges to the server's text; the outbox holds no regression, no
// entry twice, and a consumer reads each entry once.
func TestManyWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	if raceDetector {
		t.Skip("three race-instrumented workers on two cores miss every lease; make test-workers runs it")
	}
	conn, schema := pgtest.Schema(t)
	ctx := t.Context()
	store, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	db, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })

	const n = 1000
	srv, uris, hs := docsServer(t, n)

	procs := []*shardProc{
		startShard(t, "worker-a", conn, schema, hs.URL),
		startShard(t, "worker-b", conn, schema, hs.URL),
		startShard(t, "worker-c", conn, schema, hs.URL),
	}
	worker := map[uuid.UUID]*shardProc{}
	for _, p := range procs {
		worker[p.worker] = p
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		count := map[string]int{}
		for _, o := range owners(t, store) {
			count[worker[o].nameOr("none")]++
		}
		t.Logf("leases held: %v", count)
		for _, p := range procs {
			errs := p.said("shard-error")
			t.Logf("%s: took %d, dropped %d, refused %d, %d shard errors, e.g. %q; last said %q", p.name,
				len(p.said("took")), len(p.said("dropped")), len(p.said("refused")), len(errs), errs[:min(3, len(errs))], p.last(5))
		}
		// What each worker still running is doing, on its stderr.
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		}
	})
	split := func() map[uuid.UUID]int {
		count := map[uuid.UUID]int{}
		for _, o := range owners(t, store) {
			count[o]++
		}
		return count
	}
	members := []uuid.UUID{procs[0].worker, procs[1].worker, procs[2].worker}
	balanced := func(members []uuid.UUID) func() bool {
		return func() bool {
			own := owners(t, store)
			for _, u := range uris {
				if want, _ := pgledger.Assign(u, members); own[u] != want {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 60*time.Second, "every URI owned by the worker it is assigned to", balanced(members))
	t.Logf("split: %v", split())

	// The server keeps changing while workers die, pause and lose their
	// connections.
	changes, stopChanges := context.WithCancel(ctx)
	changer := keepChanging(changes, srv, uris, 16)

	// A worker killed: every URI it held is taken by a live worker and
	// read again (BenchmarkTakeover measures how soon).
	a, b, c := procs[0], procs[1], procs[2]
	before := owners(t, store)
	var held []string
	for key, o := range before {
		if o == a.worker {
			held = append(held, key)
		}
	}
	killed := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	took := eventually(t, 60*time.Second, "the killed worker's URIs taken over and read", func() bool {
		taken := b.tookSince(killed)
		maps.Copy(taken, c.tookSince(killed))
		for _, key := range held {
			if _, ok := taken[key]; !ok {
				return false
			}
		}
		return true
	})
	now := owners(t, store)
	require.Len(t, now, n, "every URI has a live lease")
	for key, o := range now {
		require.NotEqual(t, a.worker, o, "%s still leased to the killed worker", key)
	}
	t.Logf("takeover after SIGKILL: %v (TTL %v); split %v", took, shardTTL, split())
	moved := 0
	for key, o := range owners(t, store) {
		if before[key] != o {
			moved++
			assert.Equal(t, a.worker, before[key], "%s moved from a live worker when another died", key)
		}
	}
	t.Logf("%d URIs moved", moved)

	// A worker's connections terminated mid-run: it goes on.
	_, err = db.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", c.name)
	require.NoError(t, err)

	// A worker paused past its TTL: the other takes its URIs; resumed, it
	// is refused and lets them go.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGSTOP))
	eventually(t, shardTTL+60*time.Second, "the paused worker's URIs taken over", func() bool {
		count := split()
		return count[c.worker] == n
	})
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGUSR1))
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGCONT))
	eventually(t, 60*time.Second, "the resumed worker let go of what it lost and took its share again", balanced(members[1:]))
	eventually(t, 60*time.Second, "the resumed worker probed what it lost", func() bool { return len(b.said("probed")) > 0 })
	refused := b.said("refused")
	t.Logf("the resumed worker was refused %d times, e.g. %q", len(refused), first(refused))
	assert.NotEmpty(t, refused, "the resumed worker tried to write what it lost, and was refused")

	stopChanges()
	changer.Wait()
	for _, p := range []*shardProc{b, c} {
		for _, l := range p.said("error") {
			t.Errorf("%s: %s", p.name, l)
		}
	}

	// Convergence: every URI reaches the server's text.
	behind := func() []string {
		var out []string
		own := owners(t, store)
		for _, u := range uris {
			r, err := store.Load(ctx, u)
			want, _ := srv.Text(u)
			if err != nil || r == nil || r.Current == nil || len(r.Current.Contents) != 1 || r.Current.Contents[0].Text != want {
				desc := fmt.Sprintf("%s want %s owner %s", u, want, worker[own[u]].nameOr("none"))
				if r != nil && r.Current != nil && len(r.Current.Contents) == 1 {
					desc += fmt.Sprintf(" has %s state %s tickets %d", r.Current.Contents[0].Text, r.State, len(r.Tickets))
				}
				out = append(out, desc)
			}
		}
		return out
	}
	if !waitFor(60*time.Second, func() bool { return len(behind()) == 0 }) {
		left := behind()
		t.Fatalf("%d URIs did not converge to the server's text, e.g. %q", len(left), left[:min(5, len(left))])
	}

	// The outbox: numbered once each, no version regression, no change
	// announced twice; a consumer reads each entry once.
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: store})
	require.NoError(t, err)
	st, err := store.OutboxState(ctx)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	last := map[string]mcpsync.ResourceVersion{}
	var seq uint64
	for en, err := range e.Consume(cctx, "index") {
		require.NoError(t, err)
		require.Equal(t, seq+1, en.Seq, "each entry once, in order")
		seq = en.Seq
		if en.Reason == ledger.InvalidateUpdated {
			if prev, ok := last[en.URI]; ok {
				require.True(t, en.Version.After(prev), "%s regressed at #%d", en.URI, en.Seq)
				require.NotEqual(t, prev.Digest, en.Version.Digest, "%s: one change announced twice (#%d)", en.URI, en.Seq)
			}
			last[en.URI] = en.Version
		}
		if seq == st.Last {
			break
		}
	}
	require.Equal(t, st.Last, seq)
	t.Logf("%d outbox entries, %d URIs", seq, len(last))
}

func (p *shardProc) nameOr(none string) string {
	if p == nil {
		return none
	}
	return p.name
}

// waitFor is eventually, reporting instead of failing.
func waitFor(deadline time.Duration, cond func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			return false
		}
	}
	return true
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// withApplicationName names the connections of conn, so a test can find
// their backends.
func withApplicationName(conn, name string) string {
	switch {
	case !strings.Contains(conn, "://"):
		return conn + " application_name=" + name
	case strings.Contains(conn, "?"):
		return conn + "&application_name=" + name
	}
	return conn + "?application_name=" + name
}
