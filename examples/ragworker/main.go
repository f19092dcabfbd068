// Command ragworker is a RAG ingestion worker on mcpsync, and a run that
// restarts it for real.
//
// The worker (worker.go) keeps its fence in one file, the bolt ledger, and
// syncs two MCP servers with the credentials it was given for each. It
// consumes the invalidation outbox as the named consumer "indexer" and
// resolves each entry (Engine.Resolve): the exact text of a new version is
// cut into chunks, recorded with one RecordDerived call and written to its
// index; a deletion or a revocation deletes them, and a superseded version
// is left to the entry of the version that replaced it.
//
// Run without arguments, the program is the operator. It serves two MCP
// servers over streamable HTTP without the snapshot extension, like most
// servers, so no listing can prove a resource gone, and runs the worker as
// a child process:
//
//  1. the worker syncs both servers and indexes them;
//  2. it is killed with SIGKILL;
//  3. while it is down, a document changes, another is deleted, and the
//     operator revokes one set of credentials in the ledger;
//  4. a new worker process on the same ledger and index resumes the
//     subscriptions, indexes the change, confirms the deletion by
//     corroboration (a clean two-pass scan without it, then a second
//     not-found),
//     deletes every chunk the revocation names and does not sync the revoked
//     subject;
//  5. it is stopped, and the index and the ledger are checked against the
//     servers. A wrong one exits non-zero.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

const (
	hrSync  = "svc:hr-sync"
	engSync = "svc:eng-sync"

	handbook = "file:///hr/handbook.md"
	benefits = "file:///hr/benefits.md"
	runbook  = "file:///eng/runbook.md"
	design   = "file:///eng/design.md"
	legacy   = "file:///eng/legacy.md"
)

func main() {
	if raw, ok := os.LookupEnv(configEnv); ok {
		os.Exit(workerMain(raw))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// mcpServer is one MCP server of the run, on a local port.
type mcpServer struct {
	name, principal string
	uris            []string // every URI it ever had
	srv             *mcpsynctest.Server
	url             string
	http            *http.Server
}

func serve(name, principal string) (*mcpServer, error) {
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: name})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &mcpServer{name: name, principal: principal, srv: srv, url: "http://" + l.Addr().String() + "/mcp",
		http: &http.Server{Handler: server.NewStreamableHTTPServer(srv.MCPServer()), ReadHeaderTimeout: timeout}}
	go func() { _ = s.http.Serve(l) }()
	return s, nil
}

func (s *mcpServer) set(uri, text string) {
	if !slices.Contains(s.uris, uri) {
		s.uris = append(s.uris, uri)
	}
	s.srv.Set(uri, "text/markdown", text)
}

// serveDocs starts the run's two servers, each with its documents.
func serveDocs() ([]*mcpServer, error) {
	var servers []*mcpServer
	for _, cred := range []struct{ server, principal string }{{"hr", hrSync}, {"eng", engSync}} {
		s, err := serve(cred.server, cred.principal)
		if err != nil {
			closeAll(servers)
			return nil, err
		}
		servers = append(servers, s)
	}
	hr, eng := servers[0], servers[1]
	hr.set(handbook, "Badges are collected at the front desk.\nLaptops are issued on the first morning.")
	hr.set(benefits, "Dental insurance starts after one month.\nParental leave lasts twenty weeks.")
	eng.set(runbook, "Restart the ingest service with make restart.\nPage the on-call engineer after two failures.")
	eng.set(design, "The search index is sharded by tenant.")
	eng.set(legacy, "The previous pipeline ran nightly from cron.")
	return servers, nil
}

func closeAll(servers []*mcpServer) {
	for _, s := range servers {
		_ = s.http.Close()
	}
}

func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "ragworker")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	servers, err := serveDocs()
	if err != nil {
		return err
	}
	defer closeAll(servers)
	eng := servers[1]
	cfg := config{Ledger: filepath.Join(dir, "worker.ledger"), Index: filepath.Join(dir, "index.json")}
	for _, s := range servers {
		cfg.Sources = append(cfg.Sources, source{Name: s.name, URL: s.url, Principal: s.principal})
	}
	revoked := map[string]bool{}
	converged := func(line string) bool {
		return strings.HasPrefix(line, "caught up") && diffIndex(cfg, servers, revoked) == nil
	}

	fmt.Fprintln(w, "1. Two MCP servers over streamable HTTP, neither with the snapshot extension. The worker starts.")
	first, err := start("worker 1", cfg, w)
	if err != nil {
		return err
	}
	defer first.kill()
	if err := first.await(ctx, "an index equal to the servers", converged); err != nil {
		return err
	}

	fmt.Fprintln(w, "\n2. The worker is killed (SIGKILL) while it waits for changes.")
	first.kill()
	fmt.Fprintf(w, "   worker 1: %v\n", first.err)

	fmt.Fprintln(w, "\n3. While it is down, the runbook gains a step, the legacy note is deleted and svc:hr-sync is revoked.")
	eng.set(runbook, "Restart the ingest service with make restart.\nCheck the queue depth dashboard.\nPage the on-call engineer after two failures.")
	eng.srv.Delete(legacy)
	if err := revoke(cfg.Ledger, hrSync, w); err != nil {
		return err
	}
	revoked[hrSync] = true

	fmt.Fprintln(w, "\n4. A new worker process starts on the same ledger and index.")
	second, err := start("worker 2", cfg, w)
	if err != nil {
		return err
	}
	defer second.kill()
	if err := second.await(ctx, "an index equal to the servers", converged); err != nil {
		return fmt.Errorf("%w\n%w", err, diffIndex(cfg, servers, revoked))
	}

	fmt.Fprintln(w, "\n5. The worker is stopped; the index and the ledger are checked against the servers.")
	if err := second.stop(ctx); err != nil {
		return fmt.Errorf("worker 2: %w", err)
	}
	return check(ctx, w, cfg, servers, revoked)
}

// revoke is the operator revoking subject's credentials while no worker
// runs, in the ledger file itself. A revocation cannot wait for the worker
// to come back: once made, nothing read with those credentials may be
// served or indexed. Written to the ledger, it is in force for every
// process that opens the ledger from then on; the restarted worker finds
// it before it connects, and its consumer finds an outbox entry for every
// version and chunk to delete. bbolt lets one process hold the file: were a
// worker running, Open would fail after its timeout, and the revocation
// would be that worker's to make (RevokeSubject on its engine).
func revoke(path, subject string, w io.Writer) (err error) {
	l, err := boltledger.Open(path, &boltledger.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		return err
	}
	rc, err := e.RevokeSubject(subject)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   operator: %s of %s: %d version(s) and %d recorded chunk(s) invalidated\n",
		rc.Schema, subject, len(rc.Versions), len(rc.Artifacts))
	return nil
}

// diffIndex compares the index file with what it should hold, worked out
// from the servers alone: one chunk per line of every document that exists
// and whose subject is not revoked, derived from its current text.
func diffIndex(cfg config, servers []*mcpServer, revoked map[string]bool) error {
	idx, err := openIndex(cfg.Index)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, s := range servers {
		for _, uri := range s.uris {
			text, ok := s.srv.Text(uri)
			if !ok || revoked[s.principal] {
				continue
			}
			for i, c := range split(text) {
				want[artifactID(uri, i)] = c
			}
		}
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if c, ok := idx.Chunks[id]; !ok || c.Text != want[id] || c.Vector != embed(want[id]) {
			errs = append(errs, fmt.Errorf("index: %s is %q, want %q", id, c.Text, want[id]))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(idx.Chunks)) {
		if _, ok := want[id]; !ok {
			errs = append(errs, fmt.Errorf("index: %s (%s) must not be there", id, idx.Chunks[id].Subject))
		}
	}
	return errors.Join(errs...)
}

// check is the end of the run: the index against the servers, the reason
// each deletion gives, and the ledger, opened once the worker is gone.
func check(ctx context.Context, w io.Writer, cfg config, servers []*mcpServer, revoked map[string]bool) error {
	errs := []error{diffIndex(cfg, servers, revoked)}
	idx, err := openIndex(cfg.Index)
	if err != nil {
		return err
	}
	wantDeleted := map[string]deletion{
		legacy:   {Reason: ledger.InvalidateTombstoned, Subject: engSync, Evidence: ledger.EvidenceCorroborated},
		handbook: {Reason: ledger.InvalidateRevoked, Subject: hrSync},
		benefits: {Reason: ledger.InvalidateRevoked, Subject: hrSync},
	}
	for uri, want := range wantDeleted {
		if got := idx.Deleted[uri]; got.Reason != want.Reason || got.Subject != want.Subject || got.Evidence != want.Evidence {
			errs = append(errs, fmt.Errorf("index: %s deleted for %+v, want %+v", uri, got, want))
		}
	}
	errs = append(errs, checkLedger(ctx, cfg, servers, revoked))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("end-of-run check failed:\n%w", err)
	}
	fmt.Fprintf(w, "   ok: %d chunk(s) in the index, one per line of every live document of an unrevoked subject\n", len(idx.Chunks))
	fmt.Fprintln(w, "   ok: the deleted note's chunks went on corroborated evidence, the revoked subject's on its revocation")
	fmt.Fprintln(w, "   ok: the ledger serves each subject exactly the servers' current text, nothing deleted, nothing to the revoked one, and the indexer acknowledged every entry")
	return nil
}

// checkLedger opens the ledger as a third process would and asks it what
// it serves.
func checkLedger(ctx context.Context, cfg config, servers []*mcpServer, revoked map[string]bool) (err error) {
	l, err := boltledger.Open(cfg.Ledger, &boltledger.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		return err
	}
	st, err := e.OutboxState(ctx)
	if err != nil {
		return err
	}
	var errs []error
	if st.Consumers[consumer] != st.Last {
		errs = append(errs, fmt.Errorf("ledger: %s acknowledged #%d of %d", consumer, st.Consumers[consumer], st.Last))
	}
	// What the ledger serves each subject, listed: exactly the current
	// text of its live documents, and nothing to a revoked one.
	for _, s := range servers {
		want := map[string]string{}
		for _, uri := range s.uris {
			if text, live := s.srv.Text(uri); live && !revoked[s.principal] {
				want[uri] = text
			}
		}
		got := map[string]string{}
		for entry, err := range e.Entries(ctx, s.principal) {
			if err != nil {
				return err
			}
			got[entry.Version.URI] = entry.Contents[0].Text
		}
		if !maps.Equal(got, want) {
			errs = append(errs, fmt.Errorf("ledger: %s is served %v, want %v", s.principal, got, want))
		}
	}
	return errors.Join(errs...)
}
