// Command ragworker is a RAG ingestion worker fed by mcpsync's invalidation
// outbox. It pulls from the acknowledged cursor, applies each entry to two
// in-memory indexes (toy embeddings and keywords, keyed by index name and
// artifact id), records every artifact it derives against the entry's
// version with RecordDerived, and acknowledges.
//
// The run meets every reason an entry can give: updated (re-chunk),
// quarantined (evict), tombstoned (a deleted resource, confirmed by a
// snapshot-proven catalog) and revoked (delete each artifact the revocation
// names). Delivery is at least once: the worker crashes once before its
// acknowledgement, the entries come again and are applied once. At the end
// the indexes are checked against the server; a wrong one exits non-zero.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
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

	// protocol is pinned so that the run is the same on every machine;
	// 2025-11-25 subscribes each URI on its own, so one change is read once.
	protocol = "2025-11-25"
	seed     = 11
	// timeout bounds every wait: a wait that times out fails the run.
	timeout = 10 * time.Second
)

// indexes are the derived indexes the worker keeps; every chunk goes into each.
var indexes = []string{"vectors", "keywords"}

// guard runs before any content becomes visible: a worker that embeds
// whatever a server sends embeds executables too.
var guard = mcpsync.Guards(mcpsync.MaxBytes(64<<10), mcpsync.AllowMIME("text/*"))

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// source is one ingestion subject's sync of the server: a Client with an
// Engine of its own, since every version is bound to the subject that read
// it and revoking one subject must not touch the other's versions.
type source struct {
	name, principal string
	uris            []string
	client          *mcpsync.Client
	outcomes        chan mcpsync.Outcome

	mu          sync.Mutex // protects transitions
	transitions []mcpsync.Transition
}

func connect(ctx context.Context, srv *mcpsynctest.Server, name, principal string, uris ...string) (*source, error) {
	src := &source{name: name, principal: principal, uris: uris, outcomes: make(chan mcpsync.Outcome, 64)}
	engine, err := mcpsync.NewEngine(&mcpsync.Options{
		Guard: guard,
		// Tombstones are the one change a read alone cannot make final;
		// keep their steps to show where list reconciliation comes in.
		OnTransition: func(t mcpsync.Transition) {
			if t.To == mcpsync.StateTombstonePending || t.To == mcpsync.StateTombstoned {
				src.mu.Lock()
				src.transitions = append(src.transitions, t)
				src.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	src.client, err = mcpsync.Connect(ctx, func(context.Context) (transport.Interface, error) {
		return mcpsynctest.NewTransport(srv.NewInProcessTransport(), seed), nil
	}, &mcpsync.ClientOptions{
		Engine: engine, Principal: principal, ProtocolVersion: protocol,
		RevalidateEvery: 10 * time.Minute, Seed: seed,
		OnOutcome: func(o mcpsync.Outcome) { src.outcomes <- o },
	})
	if err != nil {
		return nil, err
	}
	// One URI at a time, so outbox numbers are the same on every run.
	for _, uri := range uris {
		if _, err := src.client.Subscribe(ctx, uri); err != nil {
			_ = src.client.Close()
			return nil, err
		}
		if _, err := src.next("initial read of " + uri); err != nil {
			_ = src.client.Close()
			return nil, err
		}
	}
	return src, nil
}

// next waits for the fence's next decision on this source.
func (src *source) next(what string) (mcpsync.Outcome, error) {
	select {
	case o := <-src.outcomes:
		return o, nil
	case <-time.After(timeout):
		return mcpsync.Outcome{}, fmt.Errorf("%s (%s): no outcome within %v", what, src.name, timeout)
	}
}

func (src *source) takeTransitions() []mcpsync.Transition {
	src.mu.Lock()
	defer src.mu.Unlock()
	t := src.transitions
	src.transitions = nil
	return t
}

// key names an artifact: which index, which chunk of which resource.
type key struct{ index, id string }

// artifact is one index entry and the version it was derived from.
type artifact struct {
	uri     string
	text    string // the chunk
	value   string // its embedding or keywords
	version mcpsync.ResourceVersion
}

// store is the worker's durable state. Beside the artifacts it keeps, per
// source, the last outbox entry applied, written in the same step as the
// artifacts (one transaction in a real store): comparing an entry with it
// is what makes a redelivered entry harmless.
type store struct {
	artifacts map[key]artifact
	applied   map[string]uint64 // source -> last outbox entry applied

	// For the end check only: how often each entry was delivered and applied.
	delivered map[string]map[uint64]int
	applies   map[string]map[uint64]int
}

func newStore(sources ...*source) *store {
	s := &store{artifacts: map[key]artifact{}, applied: map[string]uint64{},
		delivered: map[string]map[uint64]int{}, applies: map[string]map[uint64]int{}}
	for _, src := range sources {
		s.delivered[src.name], s.applies[src.name] = map[uint64]int{}, map[uint64]int{}
	}
	return s
}

// dropWhere deletes the artifacts match selects and returns how many.
func (s *store) dropWhere(match func(key, artifact) bool) int {
	n := 0
	for k, a := range s.artifacts {
		if match(k, a) {
			delete(s.artifacts, k)
			n++
		}
	}
	return n
}

// worker is the process that crashes: it holds nothing the store does not.
type worker struct {
	st *store
	w  io.Writer
}

// pass pulls every entry after the acknowledged cursor, applies them in
// order and acknowledges the last; crash stops it after applying, before the
// acknowledgement reaches the engine.
func (wk *worker) pass(src *source, crash bool) error {
	engine := src.client.Engine()
	cursor, err := engine.OutboxCursor()
	if err != nil {
		return err
	}
	entries, err := engine.PullOutbox(cursor, 0)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintf(wk.w, "   %s: nothing after #%d\n", src.name, cursor)
		return nil
	}
	fmt.Fprintf(wk.w, "   %s: pulled %d entr%s after #%d\n", src.name, len(entries), plural(len(entries), "y", "ies"), cursor)
	for _, e := range entries {
		if err := wk.apply(src, e); err != nil {
			return err
		}
	}
	last := entries[len(entries)-1].Seq
	if crash {
		fmt.Fprintf(wk.w, "   %s: worker crashes before acknowledging #%d\n", src.name, last)
		return nil
	}
	if err := engine.AckOutbox(last); err != nil {
		return err
	}
	fmt.Fprintf(wk.w, "   %s: acknowledged through #%d\n", src.name, last)
	return nil
}

func (wk *worker) apply(src *source, e mcpsync.OutboxEntry) error {
	st := wk.st
	st.delivered[src.name][e.Seq]++
	seq := fmt.Sprintf("#%d", e.Seq)
	what := fmt.Sprintf("%3s %-11s %s", seq, e.Reason, e.URI)
	if e.Artifact != nil {
		what = fmt.Sprintf("%3s %-11s %s/%s", seq, e.Reason, e.Artifact.Index, e.Artifact.ArtifactID)
	}
	if e.Seq <= st.applied[src.name] {
		fmt.Fprintf(wk.w, "     %s: delivered again, already applied (store is at #%d): skipped\n", what, st.applied[src.name])
		return nil
	}
	var did string
	switch e.Reason {
	case mcpsync.InvalidateUpdated:
		var err error
		if did, err = wk.derive(src, e); err != nil {
			return err
		}
	case mcpsync.InvalidateQuarantined, mcpsync.InvalidateTombstoned:
		n := st.dropWhere(func(_ key, a artifact) bool { return a.uri == e.URI })
		did = fmt.Sprintf("%d artifact(s) deleted", n)
	case mcpsync.InvalidateRevoked:
		if e.Artifact == nil {
			// The version itself: the worker indexes nothing under a
			// version, only artifacts, and each of those it recorded
			// before indexing, so each has an entry of its own.
			did = fmt.Sprintf("version ordinal %d %s unservable; its artifacts follow", e.Previous.ReadOrdinal, short(e.Previous.Digest))
			break
		}
		k := key{e.Artifact.Index, e.Artifact.ArtifactID}
		if a, ok := st.artifacts[k]; ok && a.version.Subject == e.Subject {
			delete(st.artifacts, k)
			did = fmt.Sprintf("deleted (derived from ordinal %d %s)", a.version.ReadOrdinal, short(a.version.Digest))
		} else {
			did = "not in the index"
		}
	default:
		return fmt.Errorf("outbox entry #%d: unknown reason %q", e.Seq, e.Reason)
	}
	st.applied[src.name] = e.Seq
	st.applies[src.name][e.Seq]++
	fmt.Fprintf(wk.w, "     %s: %s\n", what, did)
	return nil
}

// derive replaces the chunks of an updated resource. It derives only from
// the entry's own version: if the engine already serves a newer one (or
// none), that change has its own entry further on.
func (wk *worker) derive(src *source, e mcpsync.OutboxEntry) (string, error) {
	engine := src.client.Engine()
	entry, err := engine.Lookup(src.principal, e.URI)
	switch {
	case err != nil:
		return fmt.Sprintf("not servable any more (%v): a later entry says why", err), nil
	case entry.Version.Digest != e.Version.Digest || entry.Version.After(e.Version):
		return fmt.Sprintf("superseded by ordinal %d: its own entry follows", entry.Version.ReadOrdinal), nil
	}
	st := wk.st
	st.dropWhere(func(_ key, a artifact) bool { return a.uri == e.URI })
	chunks := chunk(entry.Contents[0].Text)
	for i, text := range chunks {
		id := fmt.Sprintf("%s#%d", e.URI, i)
		for _, index := range indexes {
			// Recorded before it is indexed: an artifact the engine does not
			// know of could not be traced by a later revocation.
			err := engine.RecordDerived(mcpsync.DerivedArtifact{Index: index, ArtifactID: id, Version: e.Version})
			if errors.Is(err, mcpsync.ErrRevoked) {
				return "subject revoked meanwhile: nothing indexed", nil
			}
			if err != nil {
				return "", err
			}
			st.artifacts[key{index, id}] = artifact{uri: e.URI, text: text, value: derived(index, text), version: e.Version}
		}
	}
	return fmt.Sprintf("ordinal %d %s: %d chunk(s) in each index", e.Version.ReadOrdinal, short(e.Version.Digest), len(chunks)), nil
}

// chunk splits a document into its non-empty lines.
func chunk(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// derived is the toy model: an "embedding" is a hash prefix of the chunk,
// its keywords are its three first long words in order.
func derived(index, text string) string {
	if index == "vectors" {
		sum := sha256.Sum256([]byte(strings.ToLower(text)))
		return fmt.Sprintf("vec:%x", sum[:4])
	}
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return r < 'a' || r > 'z' }) {
		if len(w) >= 6 && !slices.Contains(words, w) && len(words) < 3 {
			words = append(words, w)
		}
	}
	return strings.Join(words, ",")
}

func short(digest string) string {
	if len(digest) < len("sha256:")+8 {
		return digest
	}
	return digest[:len("sha256:")+8]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func run(ctx context.Context, w io.Writer) error {
	// A server with the snapshot extension: one scan can prove its listing
	// complete, which is what confirming a deletion needs. It declares
	// list_changed but never sends it, like many real servers.
	srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "docs", Snapshot: true, SuppressListChanged: true})
	mime := map[string]string{}
	set := func(uri, mt, text string) {
		mime[uri] = mt
		srv.Set(uri, mt, text)
	}
	set(handbook, "text/markdown", "Badges are collected at the front desk.\nLaptops are issued on the first morning.")
	set(benefits, "text/markdown", "Dental insurance starts after one month.\nParental leave lasts twenty weeks.")
	set(runbook, "text/markdown", "Restart the ingest service with make restart.\nPage the on-call engineer after two failures.")
	set(design, "text/markdown", "The search index is sharded by tenant.")
	set(legacy, "text/markdown", "The previous pipeline ran nightly from cron.")

	hr, err := connect(ctx, srv, "hr", hrSync, handbook, benefits)
	if err != nil {
		return err
	}
	defer hr.client.Close()
	eng, err := connect(ctx, srv, "eng", engSync, runbook, design, legacy)
	if err != nil {
		return err
	}
	defer eng.client.Close()
	sources := []*source{hr, eng}
	st := newStore(sources...)
	wk := &worker{st: st, w: w}
	counts := func() {
		n := map[string]int{}
		for k := range st.artifacts {
			n[k.index]++
		}
		fmt.Fprintf(w, "   index: %d vectors, %d keywords\n", n["vectors"], n["keywords"])
	}

	fmt.Fprintf(w, "1. Two ingestion subjects, %s and %s, sync the docs server (protocol %s); the worker drains both outboxes.\n", hrSync, engSync, protocol)
	for _, src := range sources {
		if err := wk.pass(src, false); err != nil {
			return err
		}
	}
	counts()

	fmt.Fprintln(w, "\n2. The runbook gains a step and the design note becomes a binary; the worker crashes before its ack.")
	set(runbook, "text/markdown", "Restart the ingest service with make restart.\nCheck the queue depth dashboard.\nPage the on-call engineer after two failures.")
	if _, err := eng.next("runbook update"); err != nil {
		return err
	}
	set(design, "application/octet-stream", "MZ\x00\x00 (a Windows executable)")
	o, err := eng.next("design quarantine")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   design read ordinal %d: %s (%s)\n", o.Version.Version.ReadOrdinal, o.Version.Decision, o.Version.GuardReason)
	if err := wk.pass(eng, true); err != nil {
		return err
	}
	fmt.Fprintln(w, "   a new worker starts from the acknowledged cursor:")
	wk = &worker{st: st, w: w}
	if err := wk.pass(eng, false); err != nil {
		return err
	}
	counts()

	fmt.Fprintln(w, "\n3. The legacy note is deleted on the server.")
	srv.Delete(legacy)
	if o, err = eng.next("read of the deleted note"); err != nil {
		return err
	}
	fmt.Fprintf(w, "   legacy read ordinal %d: %s\n", o.Version.Version.ReadOrdinal, o.Version.Decision)
	// A not-found read is not yet a deletion: nothing for the index.
	if err := wk.pass(eng, false); err != nil {
		return err
	}
	catalog, err := eng.client.Scan(ctx, mcpsync.KindResources)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   scan: %s, %d resources listed, %d pass(es)\n", catalog.Status, len(catalog.Descriptors), len(catalog.Scans))
	rec, err := eng.client.Reconcile(catalog)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   reconcile: tombstoned %v, deferred %v\n", rec.Tombstoned, rec.Deferred)
	for _, t := range eng.takeTransitions() {
		fmt.Fprintf(w, "   transition %s: %s -> %s (%s)\n", t.URI, t.From, t.To, t.Event)
	}
	if err := wk.pass(eng, false); err != nil {
		return err
	}
	counts()

	fmt.Fprintf(w, "\n4. %s's credentials are revoked.\n", hrSync)
	// What the index holds from the subject now: each of these must be
	// named by an entry of the revocation.
	before := map[key]bool{}
	for k, a := range st.artifacts {
		if a.version.Subject == hrSync {
			before[k] = true
		}
	}
	rc, err := hr.client.Engine().RevokeSubject(hrSync)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   %s: %d version(s), %d derived artifact(s)\n", rc.Schema, len(rc.Versions), len(rc.Artifacts))
	cursor, err := hr.client.Engine().OutboxCursor()
	if err != nil {
		return err
	}
	revocations, err := hr.client.Engine().PullOutbox(cursor, 0)
	if err != nil {
		return err
	}
	if err := wk.pass(hr, false); err != nil {
		return err
	}
	named := map[key]uint64{}
	for _, e := range revocations {
		if e.Reason == mcpsync.InvalidateRevoked && e.Artifact != nil {
			named[key{e.Artifact.Index, e.Artifact.ArtifactID}] = e.Seq
		}
	}
	var untraced []string
	for _, index := range indexes {
		n, traced := 0, 0
		for k := range before {
			if k.index == index {
				n++
				if _, ok := named[k]; ok {
					traced++
				} else {
					untraced = append(untraced, k.index+"/"+k.id)
				}
			}
		}
		fmt.Fprintf(w, "   %s: %d of %d artifact(s) of %s traced to a revocation entry\n", index, traced, n, hrSync)
	}
	counts()

	fmt.Fprintln(w, "\n5. The index at the end, checked against the server.")
	for _, k := range slices.SortedFunc(maps.Keys(st.artifacts), func(a, b key) int {
		return strings.Compare(a.index+" "+a.id, b.index+" "+b.id)
	}) {
		a := st.artifacts[k]
		fmt.Fprintf(w, "   %-8s %-24s %-22s %s ordinal %d %s\n", k.index, k.id, a.value, a.version.Subject, a.version.ReadOrdinal, short(a.version.Digest))
	}

	errs := []error{checkIndex(st, srv, mime, sources, map[string]bool{hrSync: true})}
	// Implied by the comparison above, and said on its own because it is
	// the promise that matters most.
	for k, a := range st.artifacts {
		if _, live := srv.Text(a.uri); !live || a.version.Subject == hrSync {
			errs = append(errs, fmt.Errorf("%s/%s is derived from a deleted resource or a revoked subject", k.index, k.id))
		}
	}
	if len(untraced) > 0 {
		errs = append(errs, fmt.Errorf("artifacts of %s named by no revocation entry: %v", hrSync, untraced))
	}
	if !slices.Equal(rec.Tombstoned, []string{legacy}) {
		errs = append(errs, fmt.Errorf("reconcile tombstoned %v, want [%s]", rec.Tombstoned, legacy))
	}
	redelivered := 0
	for _, src := range sources {
		n, err := checkOnce(st, src)
		redelivered += n
		errs = append(errs, err)
	}
	if redelivered == 0 {
		errs = append(errs, errors.New("no entry was delivered twice: the crash demonstrated nothing"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("end-of-run check failed:\n%w", err)
	}
	fmt.Fprintln(w, "   ok: one artifact per live chunk and index, each matching the server's current text")
	fmt.Fprintln(w, "   ok: nothing derived from a revoked subject, a deleted or a quarantined resource")
	fmt.Fprintf(w, "   ok: every entry applied exactly once, %d of them delivered twice\n", redelivered)
	return nil
}

// checkIndex compares the store with what it should hold, worked out from
// the server alone: for every resource of a subject that is not revoked,
// that exists and whose current content passes the guard, one artifact per
// chunk and index, derived from the current text.
func checkIndex(st *store, srv *mcpsynctest.Server, mime map[string]string, sources []*source, revoked map[string]bool) error {
	want := map[key]string{}
	for _, src := range sources {
		for _, uri := range src.uris {
			text, ok := srv.Text(uri)
			if !ok || revoked[src.principal] || guard(uri, []mcpsync.Content{{URI: uri, MIMEType: mime[uri], Text: text}}) != nil {
				continue
			}
			for i, c := range chunk(text) {
				for _, index := range indexes {
					want[key{index, fmt.Sprintf("%s#%d", uri, i)}] = derived(index, c)
				}
			}
		}
	}
	var errs []error
	for k, v := range want {
		if a, ok := st.artifacts[k]; !ok || a.value != v {
			errs = append(errs, fmt.Errorf("%s/%s is %q, want %q", k.index, k.id, a.value, v))
		}
	}
	for k, a := range st.artifacts {
		if _, ok := want[k]; !ok {
			errs = append(errs, fmt.Errorf("%s/%s (%s, %s) must not be in the index", k.index, k.id, a.uri, a.version.Subject))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// checkOnce reports how many of a source's entries were delivered more than
// once, and fails unless every entry the engine ever numbered was applied
// exactly once and the outbox is acknowledged to its end.
func checkOnce(st *store, src *source) (int, error) {
	engine := src.client.Engine()
	cursor, err := engine.OutboxCursor()
	if err != nil {
		return 0, err
	}
	if rest, err := engine.PullOutbox(cursor, 0); err != nil || len(rest) > 0 {
		return 0, fmt.Errorf("%s: %d entries left unacknowledged after #%d (%v)", src.name, len(rest), cursor, err)
	}
	redelivered := 0
	var errs []error
	for seq := uint64(1); seq <= cursor; seq++ {
		if n := st.applies[src.name][seq]; n != 1 {
			errs = append(errs, fmt.Errorf("%s: entry #%d applied %d times", src.name, seq, n))
		}
		if st.delivered[src.name][seq] > 1 {
			redelivered++
		}
	}
	if len(st.applies[src.name]) != int(cursor) {
		errs = append(errs, fmt.Errorf("%s: %d entries applied, %d numbered", src.name, len(st.applies[src.name]), cursor))
	}
	return redelivered, errors.Join(errs...)
}
