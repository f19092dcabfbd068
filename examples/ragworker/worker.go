package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// The worker: what a RAG ingestion worker on mcpsync is made of.

// configEnv carries the worker's configuration; the program runs as the
// worker when it is set.
const configEnv = "RAGWORKER_CONFIG"

// consumer is the worker's name on the outbox: its acknowledged position is
// kept in the ledger, apart from any other consumer's.
const consumer = "indexer"

// config is what the worker reads at start.
type config struct {
	Ledger  string   `json:"ledger"` // the bolt file: fence, versions, revocations, outbox
	Index   string   `json:"index"`
	Sources []source `json:"sources"`
}

// source is one MCP server and the credentials the worker reads it with.
type source struct {
	Name      string `json:"name"`
	URL       string `json:"url"`
	Principal string `json:"principal"`
}

// guard runs before any content becomes visible: a worker that embeds
// whatever a server sends embeds executables too.
var guard = mcpsync.Guards(mcpsync.MaxBytes(64<<10), mcpsync.AllowMIME("text/*"))

// workerMain runs the worker until its stdin ends: the parent closes it to
// stop the worker, and it ends when the parent dies, however it dies.
func workerMain(raw string) int {
	var cfg config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		log.Print(err)
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := work(ctx, cfg, &logger{w: os.Stdout}); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// logger serializes the worker's lines: the fence, the scans and the
// consumer print from their own goroutines.
type logger struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// worker is one process's state.
type worker struct {
	log     *logger
	ledger  *boltledger.Ledger
	indexer *mcpsync.Engine // reads the outbox and records what it derives
	idx     *index
}

func work(ctx context.Context, cfg config, lg *logger) (err error) {
	ledger, err := boltledger.Open(cfg.Ledger, &boltledger.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ledger.Close()) }()
	wk := &worker{log: lg, ledger: ledger}
	if wk.idx, err = openIndex(cfg.Index); err != nil {
		return err
	}
	lg.printf("started, pid %d; ledger %s, index at entry #%d", os.Getpid(), filepath.Base(cfg.Ledger), wk.idx.Applied)
	revoked, err := wk.revoked(ctx)
	if err != nil {
		return err
	}
	for _, src := range cfg.Sources {
		if at, ok := revoked[src.Principal]; ok {
			// Its client would say so too (WaitForSync: ErrRevoked); asking
			// first keeps the worker up for the other sources.
			lg.printf("%s: %s was revoked at %s: not synced", src.Name, src.Principal, at.Format(time.TimeOnly))
			continue
		}
		c, err := wk.sync(ctx, src)
		if err != nil {
			return err
		}
		defer c.Close()
	}
	if wk.indexer, err = mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: ledger}); err != nil {
		return err
	}
	err = wk.consume(ctx)
	if ctx.Err() != nil {
		lg.printf("stopped")
		return nil
	}
	return err
}

// revoked returns the subjects the ledger holds revoked, and since when.
func (wk *worker) revoked(ctx context.Context) (map[string]time.Time, error) {
	list, err := wk.ledger.Revoked(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, r := range list {
		out[r.Subject] = r.At
	}
	return out, nil
}

// sync connects to src, keeps its resources subscribed and returns once
// every one of them has been read. Connect resumes what an earlier process
// left open in the ledger; the kept scan subscribes what the server lists
// and confirms deletions, by corroboration where the server cannot prove
// its listing.
func (wk *worker) sync(ctx context.Context, src source) (*mcpsync.Client, error) {
	engine, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: wk.ledger, Guard: guard})
	if err != nil {
		return nil, err
	}
	if n := wk.resumable(engine, src); n > 0 {
		wk.log.printf("%s: resuming %d subscription(s) the last process left open", src.Name, n)
	}
	c, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(src.URL, nil), &mcpsync.ClientOptions{
		Engine: engine, Subject: src.Principal, ServerID: src.URL,
		OnOutcome: func(o mcpsync.Outcome) { wk.fenced(src, o) },
		OnError:   func(err error) { log.Printf("%s: %v", src.Name, err) },
	})
	if err != nil {
		return nil, err
	}
	_, err = c.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true, OnScan: func(r mcpsync.ScanReport) {
		if len(r.Subscribed) > 0 {
			wk.log.printf("%s: scan listed %d resource(s) (%s), subscribed %d", src.Name, len(r.Catalog.Descriptors), r.Catalog.Status, len(r.Subscribed))
		}
	}})
	if err == nil {
		err = c.WaitForSync(ctx) // the first scan's subscriptions too
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	wk.log.printf("%s: synced as %s", src.Name, src.Principal)
	return c, nil
}

// resumable counts the subscriptions Connect will resume for src.
func (wk *worker) resumable(e *mcpsync.Engine, src source) int {
	n := 0
	for sub, err := range e.ResumableSubscriptions() {
		if err == nil && sub.Subject == src.Principal && sub.Capabilities.ServerID == src.URL {
			n++
		}
	}
	return n
}

// fenced logs the fence's decisions that index entries do not show: the
// steps of a deletion.
func (wk *worker) fenced(src source, o mcpsync.Outcome) {
	switch o.Decision() {
	case mcpsync.DecisionTombstonePending:
		wk.log.printf("%s: %s not found (%s read): TOMBSTONE_PENDING until a later scan and read agree",
			src.Name, o.Version.Version.URI, o.Version.Trigger)
	case mcpsync.DecisionTombstoned:
		wk.log.printf("%s: %s not found again (%s read): TOMBSTONED, evidence %s",
			src.Name, o.Version.Version.URI, o.Version.Trigger, o.Tombstone.Evidence.Kind)
	}
}

// consume applies every outbox entry after the consumer's acknowledged
// position, in order, and acknowledges each once its effect is saved. It
// returns when ctx ends.
func (wk *worker) consume(ctx context.Context) error {
	for e, err := range wk.indexer.Consume(ctx, consumer) {
		if err != nil {
			return err // ctx done, or *ledger.OutboxGapError: rebuild from a full scan
		}
		if err := wk.apply(ctx, e); err != nil {
			return err
		}
		if err := wk.indexer.Acknowledge(ctx, consumer, e.Seq); err != nil {
			return err
		}
		st, err := wk.indexer.OutboxState(ctx)
		if err != nil {
			return err
		}
		if st.Last == e.Seq {
			wk.log.printf("caught up at #%d: %d chunk(s) in the index", e.Seq, len(wk.idx.Chunks))
		}
	}
	return nil
}

// apply makes the index reflect one entry, resolved to the exact text of
// its version or to why there is none, and saves it with the entry's
// number.
func (wk *worker) apply(ctx context.Context, e mcpsync.OutboxEntry) error {
	what := e.URI
	if e.Artifact != nil {
		what = e.Artifact.ArtifactID
	}
	if e.Seq <= wk.idx.Applied {
		wk.log.printf("#%d %s %s: delivered again, already applied", e.Seq, e.Reason, what)
		return nil
	}
	r, err := wk.indexer.Resolve(ctx, e)
	if err != nil {
		return err
	}
	var did string
	switch r.Kind {
	case mcpsync.ResolvedContents:
		if did, err = wk.derive(e, r); err != nil {
			return err
		}
	case mcpsync.ResolvedSuperseded:
		did = fmt.Sprintf("superseded by ordinal %d: its own entry follows", r.By.ReadOrdinal)
	case mcpsync.ResolvedRevoked:
		did = wk.revoke(e)
	default: // deleted, forgotten, quarantined: what the URI fed goes
		did = fmt.Sprintf("%s: %d chunk(s) deleted", r.Kind, wk.idx.drop(e.URI))
		d := deletion{Seq: e.Seq, Reason: e.Reason, Subject: e.Subject}
		if ev := r.Evidence; ev != nil {
			d.Evidence = ev.Kind
			did += fmt.Sprintf(" (%s: %d clean scan passes without it, not-found reads %v)", ev.Kind, len(ev.Scans), ev.Reads)
		}
		wk.idx.Deleted[e.URI] = d
	}
	wk.idx.Applied = e.Seq
	if err := wk.idx.save(); err != nil {
		return err
	}
	wk.log.printf("#%d %s %s: %s", e.Seq, e.Reason, what, did)
	return nil
}

// derive replaces the chunks of an updated resource with those of the
// entry's version, whose text r holds.
func (wk *worker) derive(e mcpsync.OutboxEntry, r mcpsync.Resolution) (string, error) {
	texts := split(r.Contents[0].Text)
	artifacts := make([]ledger.DerivedArtifact, len(texts))
	for i := range texts {
		artifacts[i] = ledger.DerivedArtifact{Index: indexName, ArtifactID: artifactID(e.URI, i), Version: r.Version}
	}
	// Recorded before they are indexed, all at once: a revocation can only
	// name the chunks the ledger knows of.
	if err := wk.indexer.RecordDerived(artifacts...); errors.Is(err, mcpsync.ErrRevoked) {
		return "subject revoked meanwhile: nothing indexed", nil
	} else if err != nil {
		return "", err
	}
	wk.idx.drop(e.URI)
	delete(wk.idx.Deleted, e.URI)
	for i, text := range texts {
		wk.idx.Chunks[artifactID(e.URI, i)] = chunk{URI: e.URI, Text: text, Vector: embed(text),
			Subject: e.Subject, Ordinal: r.Version.ReadOrdinal, Digest: r.Version.Digest}
	}
	return fmt.Sprintf("%s (subscription generation %d, read ordinal %d): %d chunk(s) recorded and indexed",
		short(r.Version.Digest), r.Version.SubscriptionGeneration, r.Version.ReadOrdinal, len(texts)), nil
}

// revoke deletes what a revocation names. An entry without an artifact is
// about the version itself; each chunk derived from it has an entry of its
// own, since each was recorded before it was indexed.
func (wk *worker) revoke(e mcpsync.OutboxEntry) string {
	if e.Artifact == nil {
		return fmt.Sprintf("version of %s unservable; its chunks' entries follow", e.Subject)
	}
	id := e.Artifact.ArtifactID
	c, ok := wk.idx.Chunks[id]
	if !ok || c.Subject != e.Subject {
		return "not in the index"
	}
	delete(wk.idx.Chunks, id)
	wk.idx.Deleted[c.URI] = deletion{Seq: e.Seq, Reason: e.Reason, Subject: e.Subject}
	return "chunk deleted"
}
