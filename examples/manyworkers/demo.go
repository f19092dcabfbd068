package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

const (
	workers = 3
	// demoTTL is short, so that the takeover is quick to watch.
	demoTTL = 3 * time.Second
	// patience bounds every wait of the demonstration; one that runs out
	// fails the run.
	patience = 60 * time.Second
)

var topics = []string{"onboarding", "badges", "laptops", "payroll", "leave", "travel",
	"expenses", "security", "vpn", "on-call", "incidents", "glossary"}

func demonstrate() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, where, err := findPostgres(ctx)
	if err != nil {
		if os.Getenv("MCPSYNC_REQUIRE_POSTGRES") == "1" {
			fmt.Fprintf(os.Stderr, "manyworkers: no PostgreSQL at %s, and MCPSYNC_REQUIRE_POSTGRES=1: %v\n", where, err)
			return 1
		}
		fmt.Printf("manyworkers: skipped: no PostgreSQL at %s; set MCPSYNC_TEST_POSTGRES\n", where)
		return 0
	}
	if err := run(ctx, conn, &console{w: os.Stdout, took: map[string]string{}}); err != nil {
		fmt.Fprintln(os.Stderr, "manyworkers:", err)
		return 1
	}
	return 0
}

// findPostgres returns the first server that answers: the one
// MCPSYNC_TEST_POSTGRES names, else the local one's database test or
// postgres. where names what was tried, without a password.
func findPostgres(ctx context.Context) (conn, where string, err error) {
	tries := []string{os.Getenv("MCPSYNC_TEST_POSTGRES")}
	if tries[0] == "" {
		tries = []string{
			"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		}
	}
	where = "MCPSYNC_TEST_POSTGRES"
	if cfg, err := pgx.ParseConfig(tries[0]); err == nil {
		where = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	}
	for _, c := range tries {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var db *pgx.Conn
		if db, err = pgx.Connect(pctx, c); err == nil {
			err = db.Close(pctx)
		}
		cancel()
		if err == nil {
			return c, where, nil
		}
	}
	return "", where, err
}

// console writes the demonstration's lines and relays the workers', one
// line at a time, noting who said it took which URI.
type console struct {
	mu    sync.Mutex // protects every field
	w     io.Writer
	shown bool              // whether the workers' lines are relayed; their errors always are
	took  map[string]string // URI -> the worker that said it took it last, until it let go
}

func (c *console) say(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.w, format+"\n", args...)
}

func (c *console) relay(worker, line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shown || strings.HasPrefix(line, "error") {
		fmt.Fprintf(c.w, "   %s | %s\n", worker, line)
	}
	switch f := strings.Fields(line); {
	case len(f) > 1 && f[0] == "took":
		c.took[f[1]] = worker
	case len(f) > 2 && f[0] == "let" && c.took[f[2]] == worker:
		delete(c.took, f[2])
	}
}

// holder returns the worker that said it holds uri.
func (c *console) holder(uri string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.took[uri]
}

func (c *console) show(shown bool) {
	c.mu.Lock()
	c.shown = shown
	c.mu.Unlock()
}

// proc is one worker process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	worker uuid.UUID     // its lease identity, the first thing it says
	done   chan struct{} // closed when its output ends: it exited
}

// start runs this program again as a worker and waits until it says who it
// is. Its standard input is a pipe nobody writes to: when the
// demonstration ends, however it ends, the pipe closes and the worker
// stops.
func start(ctx context.Context, out *console, name, conn, schema, url string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-worker", "-schema", schema, "-url", url,
		"-ttl", demoTTL.String(), "-until-eof")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+conn)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	ready := make(chan uuid.UUID, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "worker "); ok {
				if u, err := uuid.Parse(id); err == nil {
					ready <- u
					continue
				}
			}
			out.relay(name, sc.Text())
		}
	}()
	select {
	case p.worker = <-ready:
		return p, nil
	case <-p.done:
		err = fmt.Errorf("%s ended before it started", name)
	case <-time.After(patience):
		err = fmt.Errorf("%s did not start within %v", name, patience)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return p, err
}

// stop ends a worker: with its standard input closed it lets its URIs go
// and leaves. One that does not end in time is killed.
func (p *proc) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(patience):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = p.cmd.Wait()
}

// view is how the demonstration sees the workers' work: in the database.
type view struct {
	db     *pgx.Conn
	schema string
}

// indexed returns the index: URI to text.
func (s view) indexed(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.Query(ctx, "SELECT uri, body FROM "+pgx.Identifier{s.schema, indexTable}.Sanitize())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var uri, body string
	_, err = pgx.ForEachRow(rows, []any{&uri, &body}, func() error {
		out[uri] = body
		return nil
	})
	return out, err
}

// waitFor asks cond again until it holds and returns how long that took:
// the workers are other processes, and the database is where their work
// shows.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) (time.Duration, error) {
	started := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(patience)
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return 0, fmt.Errorf("%s: %w", what, err)
		case ok:
			return time.Since(started), nil
		}
		select {
		case <-tick.C:
		case <-limit:
			return 0, fmt.Errorf("%s: not within %v", what, patience)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// change is one text the server gave a document.
type change struct{ uri, text string }

// run is the demonstration on the PostgreSQL server at conn.
func run(ctx context.Context, conn string, out *console) (err error) {
	started := time.Now()
	schema := "manyworkers_" + strings.ToLower(rand.Text()[:12])
	db, err := pgx.Connect(ctx, conn)
	if err != nil {
		return err
	}
	st := view{db: db, schema: schema}
	defer func() {
		// A context of its own: ctx may be what ended the run.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patience)
		defer cancel()
		if _, derr := db.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); derr != nil {
			err = errors.Join(err, fmt.Errorf("drop schema %s: %w", schema, derr))
		}
		_ = db.Close(cctx)
	}()
	// The demonstration reads the ledger through a ledger of its own, not
	// fenced: it writes nothing but its consumer's position.
	ledger, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	if err != nil {
		return err
	}
	defer ledger.Close()
	audit, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: ledger})
	if err != nil {
		return err
	}
	// A second named consumer, registered before the first entry: the
	// outbox keeps every entry until it has read them too.
	if err := audit.Acknowledge(ctx, "audit", 0); err != nil {
		return err
	}
	if err := createIndex(ctx, db, schema); err != nil {
		return err
	}

	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "handbook", PageSize: 50})
	var changes []change
	revision := map[string]int{}
	set := func(uri string) {
		text := fmt.Sprintf("%s, revision %d", topic(uri), revision[uri])
		revision[uri]++
		srv.Set(uri, "text/markdown", text)
		changes = append(changes, change{uri, text})
	}
	uris := make([]string, len(topics))
	for i, t := range topics {
		uris[i] = "file:///handbook/" + t + ".md"
		set(uris[i])
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv.MCPServer()))
	defer hs.Close()

	out.say("1. %d documents served at %s; %d workers start on schema %s (lease TTL %v).",
		len(uris), hs.URL, workers, schema, demoTTL)
	var procs []*proc
	defer func() {
		out.show(false)
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.stop)
		}
		wg.Wait()
	}()
	for i := range workers {
		p, err := start(ctx, out, fmt.Sprintf("w%d", i+1), conn, schema, hs.URL)
		if p != nil {
			procs = append(procs, p)
		}
		if err != nil {
			return err
		}
	}
	name := map[uuid.UUID]string{}
	var members []uuid.UUID
	for _, p := range procs {
		name[p.worker] = p.name
		members = append(members, p.worker)
	}
	// settled: every URI is leased by the member rendezvous hashing gives
	// it, which said it took it, and the index holds the server's text.
	settled := func(members []uuid.UUID) func() (bool, error) {
		return func() (bool, error) {
			ls, err := ledger.Leases(ctx)
			if err != nil {
				return false, err
			}
			ix, err := st.indexed(ctx)
			if err != nil {
				return false, err
			}
			for _, u := range uris {
				want, _ := srv.Text(u)
				owner, _ := pgledger.Assign(u, members)
				if !ls[u].Live || ls[u].Owner != owner || out.holder(u) != name[owner] || ix[u] != want {
					return false, nil
				}
			}
			return true, nil
		}
	}
	took, err := waitFor(ctx, "every document held and indexed", settled(members))
	if err != nil {
		return err
	}
	ls, err := ledger.Leases(ctx)
	if err != nil {
		return err
	}
	out.say("   In %v each document is leased to the worker rendezvous hashing gives it, and indexed:", took.Round(100*time.Millisecond))
	for _, p := range procs {
		out.say("   %s holds %s", p.name, topicsOf(heldBy(ls, p.worker)))
	}
	out.say("   Below, lines \"w1 | …\" are the workers' own: what each takes (a lease, then a subscription")
	out.say("   and a read) and what it indexes. All read the one outbox; the first to apply an entry indexes it.")
	out.show(true)

	out.say("\n2. A document of each worker changes.")
	for _, p := range procs {
		if held := heldBy(ls, p.worker); len(held) > 0 {
			set(held[0])
		}
	}
	if _, err := waitFor(ctx, "the changes indexed", settled(members)); err != nil {
		return err
	}

	victim := slices.MaxFunc(procs, func(a, b *proc) int { return len(heldBy(ls, a.worker)) - len(heldBy(ls, b.worker)) })
	lost := heldBy(ls, victim.worker)
	out.say("\n3. %s, holding %d documents, is killed with SIGKILL; %s changes at once, its lease still %s's.",
		victim.name, len(lost), topic(lost[0]), victim.name)
	if err := victim.cmd.Process.Kill(); err != nil {
		return err
	}
	<-victim.done
	set(lost[0])
	survivors := slices.DeleteFunc(slices.Clone(members), func(m uuid.UUID) bool { return m == victim.worker })
	took, err = waitFor(ctx, "the killed worker's documents taken over and indexed", settled(survivors))
	if err != nil {
		return err
	}
	after, err := ledger.Leases(ctx)
	if err != nil {
		return err
	}
	for _, u := range lost {
		out.say("   %-10s %s at lease epoch %d -> %s at epoch %d", topic(u), victim.name, ls[u].Epoch, name[after[u].Owner], after[u].Epoch)
	}
	out.say("   taken over and indexed %v after the kill (lease TTL %v)", took.Round(100*time.Millisecond), demoTTL)

	out.say("\n4. %s changes under its new owner.", topic(lost[len(lost)-1]))
	set(lost[len(lost)-1])
	if _, err := waitFor(ctx, "the change indexed", settled(survivors)); err != nil {
		return err
	}

	out.say("\n5. Checks.")
	errs := []error{checkCopies(ctx, st, ledger, srv, uris), checkOutbox(ctx, audit, changes)}
	if ls, err = ledger.Leases(ctx); err != nil {
		return err
	}
	for u, l := range ls {
		if l.Owner == victim.worker || !slices.Contains(survivors, l.Owner) || !l.Live {
			errs = append(errs, fmt.Errorf("%s is leased to %s (live %v) after the takeover", u, name[l.Owner], l.Live))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("end-of-run check failed:\n%w", err)
	}
	out.say("   ok: the ledger serves the server's text of all %d documents, and the index holds it", len(uris))
	out.say("   ok: each of the %d texts the server gave reached the outbox once, in order", len(changes))
	var split []string
	for _, m := range survivors {
		split = append(split, fmt.Sprintf("%s holds %d", name[m], len(heldBy(ls, m))))
	}
	out.say("   ok: no document leased to %s, the killed worker; %s", victim.name, strings.Join(split, ", "))
	out.say("   run time %v", time.Since(started).Round(100*time.Millisecond))
	return nil
}

// checkCopies compares, for every URI, the ledger's current version and
// the index with the server.
func checkCopies(ctx context.Context, st view, pl *pgledger.Ledger, srv *mcpsynctest.Server, uris []string) error {
	ix, err := st.indexed(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, u := range uris {
		want, _ := srv.Text(u)
		r, err := pl.Load(ctx, u)
		switch {
		case err != nil:
			errs = append(errs, err)
		case r == nil || r.Current == nil || r.Current.Status != ledger.VersionServed || text(r.Current.Contents) != want:
			errs = append(errs, fmt.Errorf("%s: the ledger does not serve the server's text %q", u, want))
		}
		if ix[u] != want {
			errs = append(errs, fmt.Errorf("%s: the index has %q, the server %q", u, ix[u], want))
		}
	}
	return errors.Join(errs...)
}

// checkOutbox reads the outbox as the audit consumer and matches its
// updated entries with the changes, one to one and in order per URI.
func checkOutbox(ctx context.Context, audit *mcpsync.Engine, changes []change) error {
	st, err := audit.OutboxState(ctx)
	if err != nil {
		return err
	}
	want := map[string][]string{} // URI -> digests of its texts, in order
	for _, c := range changes {
		r := mcpsync.NewReadResult([]mcpsync.Content{{URI: c.uri, MIMEType: "text/markdown", Text: c.text}})
		want[c.uri] = append(want[c.uri], r.Digest())
	}
	got := map[string][]string{}
	cctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	for e, err := range audit.Consume(cctx, "audit") {
		if err != nil {
			return err
		}
		if e.Reason == ledger.InvalidateUpdated {
			got[e.URI] = append(got[e.URI], e.Version.Digest)
		}
		if e.Seq >= st.Last {
			break
		}
	}
	var errs []error
	for _, u := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(got[u], want[u]) {
			errs = append(errs, fmt.Errorf("%s: the outbox announced %d version(s), the server gave %d text(s)", u, len(got[u]), len(want[u])))
		}
	}
	return errors.Join(errs...)
}

// heldBy returns the URIs worker holds a live lease of, in order.
func heldBy(ls map[string]pgledger.Lease, worker uuid.UUID) []string {
	var out []string
	for u, l := range ls {
		if l.Live && l.Owner == worker {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

func topic(uri string) string {
	return strings.TrimSuffix(strings.TrimPrefix(uri, "file:///handbook/"), ".md")
}

func topicsOf(uris []string) string {
	var out []string
	for _, u := range uris {
		out = append(out, topic(u))
	}
	return strings.Join(out, ", ")
}
