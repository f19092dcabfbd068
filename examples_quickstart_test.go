package mcpsync_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// The README's two programs against the test kit's server, side by side:
// the cache's prompt follows the document's text, a change and the
// deletion included, and the worker indexes each version and deletes what
// the deleted document fed.
func Example_quickStart() {
	const uri = "file:///handbook/onboarding.md"
	srv := mcpsynctest.NewServer(nil)
	srv.Set(uri, "text/markdown", "Badges are at desk 2.")
	dial := srv.Dialer()
	ctx, cancel := context.WithCancel(context.Background())

	prompts, indexed := make(chan string, 16), make(chan string, 16)
	var last string // the cache's goroutine only
	cacheDone := make(chan error, 1)
	go func() {
		cacheDone <- promptCache(ctx, dial, func(prompt []mcpsync.Entry) {
			var texts []string
			for _, e := range prompt {
				texts = append(texts, e.Contents[0].Text)
			}
			if s := fmt.Sprint(texts); s != last { // a rebuild with nothing new
				last = s
				prompts <- s
			}
		})
	}()
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- indexWorker(ctx, dial,
			func(uri string, c []mcpsync.Content) error { indexed <- "index: " + c[0].Text; return nil },
			func(uri string) error { indexed <- "unindex: " + uri; return nil })
	}()
	step := func() { fmt.Println("prompt:", <-prompts); fmt.Println(<-indexed) }
	step()
	srv.Set(uri, "text/markdown", "Badges are at desk 4.")
	step()
	srv.Delete(uri)
	step()
	cancel()
	fmt.Println(errors.Is(<-cacheDone, context.Canceled), errors.Is(<-workerDone, context.Canceled))
	// Output:
	// prompt: [Badges are at desk 2.]
	// index: Badges are at desk 2.
	// prompt: [Badges are at desk 4.]
	// index: Badges are at desk 4.
	// prompt: []
	// unindex: file:///handbook/onboarding.md
	// true true
}

// promptCache is the README's cache, word for word from its first line.
func promptCache(ctx context.Context, dial mcpsync.Dialer, usePrompt func([]mcpsync.Entry)) error {
	changed := make(chan struct{}, 1)
	mark := func() {
		select {
		case changed <- struct{}{}:
		default: // a rebuild is due already
		}
	}
	client, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{
		Subject: "user:alice",
		// Told, in order per URI and with contents, of every entry added,
		// updated or deleted; on the client's goroutine: do not block here.
		Handler: mcpsync.ResourceHandlerFuncs{
			AddFunc:    func(mcpsync.Entry) { mark() },
			UpdateFunc: func(old, new mcpsync.Entry) { mark() },
			DeleteFunc: func(last mcpsync.Entry, d mcpsync.Deletion) { mark() },
		},
	})
	if err != nil {
		return err
	}
	defer client.Close()

	// Subscribe (or poll where the server cannot) what the server lists, now
	// and later; deletions are confirmed by the same scans.
	if _, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true}); err != nil {
		return err
	}
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		// Strict: accepted, guarded, unrevoked versions of this subject,
		// confirmed within their staleness bound.
		var prompt []mcpsync.Entry
		for entry, err := range client.Entries(ctx, mcpsync.RequireFresh()) {
			if err != nil {
				return err
			}
			prompt = append(prompt, entry)
		}
		usePrompt(prompt)
	}
}

// indexWorker is the README's worker, word for word from its first line,
// on a client of its own.
func indexWorker(ctx context.Context, dial mcpsync.Dialer, index func(uri string, c []mcpsync.Content) error, unindex func(uri string) error) error {
	client, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: "svc:indexer"})
	if err != nil {
		return err
	}
	defer client.Close()
	if _, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true}); err != nil {
		return err
	}

	engine := client.Engine() // a worker's engine keeps its ledger in a file: see below
	for entry, err := range engine.Consume(ctx, "indexer") {
		if err != nil {
			return err
		}
		r, err := engine.Resolve(ctx, entry)
		if err != nil {
			return err
		}
		switch r.Kind {
		case mcpsync.ResolvedContents: // the exact contents of the entry's version
			err = index(entry.URI, r.Contents)
		case mcpsync.ResolvedSuperseded: // the newer version's entry follows
		default: // deleted, revoked, forgotten or quarantined: what it fed goes
			err = unindex(entry.URI)
		}
		if err != nil {
			return err
		}
		if err := engine.Acknowledge(ctx, "indexer", entry.Seq); err != nil {
			return err
		}
	}
	return nil
}

// Each Go block of the README's quick start is in this file, line for line
// and in order, so the code a reader copies is the code Example_quickStart
// runs.
func TestReadmeQuickStartIsTheExample(t *testing.T) {
	file := func(name string) []string {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var lines []string
		for sc := bufio.NewScanner(f); sc.Scan(); {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				lines = append(lines, l)
			}
		}
		return lines
	}
	readme, example := file("README.md"), file("examples_quickstart_test.go")
	var blocks [][]string
	section, inBlock := false, false
	for _, l := range readme {
		switch {
		case strings.HasPrefix(l, "## "):
			section = l == "## Quick start"
		case section && l == "```go":
			inBlock = true
			blocks = append(blocks, nil)
		case inBlock && l == "```":
			inBlock = false
		case inBlock:
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], l)
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("the README's quick start has %d Go blocks, want the cache's and the worker's", len(blocks))
	}
	for _, block := range blocks {
		at := -1
		for i, l := range example {
			if l == block[0] {
				at = i
				break
			}
		}
		for i, l := range block {
			if at < 0 || at+i >= len(example) || example[at+i] != l {
				t.Errorf("README quick start line %q is not in examples_quickstart_test.go in its place", l)
				break
			}
		}
	}
}
