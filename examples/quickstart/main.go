// Command quickstart runs the README's two programs against an in-process
// MCP server: an agent's context cache, whose handler has the prompt
// rebuilt from the entries its principal may be served now, and an index
// worker, which follows the outbox as a named consumer and resolves each
// entry to the exact text of its version. The server changes a document,
// gains one and loses one; after each step the prompt and the index must
// equal the server's text, or the run exits non-zero.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"path"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

const timeout = 30 * time.Second

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	srv := mcpsynctest.NewServer(nil)
	srv.Set("file:///kb/onboarding.md", "text/markdown", "Badges are at desk 2.")
	srv.Set("file:///kb/faq.md", "text/markdown", "Expenses are filed in the travel tool.")
	dial := func(context.Context) (transport.Interface, error) { return srv.NewInProcessTransport(), nil }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	prompts := make(chan map[string]string, 16)
	index := map[string]string{} // the worker's goroutine only, until it ended
	ops := make(chan map[string]string, 16)
	done := make(chan error, 2)
	go func() {
		done <- cache(ctx, dial, func(prompt []mcpsync.Entry) {
			texts := map[string]string{}
			for _, e := range prompt {
				texts[e.Version.URI] = e.Contents[0].Text
			}
			send(ctx, prompts, texts)
		})
	}()
	go func() {
		done <- worker(ctx, dial, func(uri string, c []mcpsync.Content) error {
			index[uri] = c[0].Text
			send(ctx, ops, maps.Clone(index))
			return nil
		}, func(uri string) error {
			delete(index, uri)
			send(ctx, ops, maps.Clone(index))
			return nil
		})
	}()

	steps := []struct {
		what   string
		change func()
	}{
		{"1. The cache and the worker start.", func() {}},
		{"2. The onboarding document changes.", func() { srv.Set("file:///kb/onboarding.md", "text/markdown", "Badges are at desk 4.") }},
		{"3. A glossary appears; both programs' kept scans subscribe it.", func() {
			srv.Set("file:///kb/glossary.md", "text/markdown", "SLO: service level objective.")
		}},
		{"4. The FAQ is deleted.", func() { srv.Delete("file:///kb/faq.md") }},
	}
	for _, step := range steps {
		fmt.Fprintln(w, step.what)
		step.change()
		want := map[string]string{}
		for _, uri := range []string{"file:///kb/faq.md", "file:///kb/glossary.md", "file:///kb/onboarding.md"} {
			if text, ok := srv.Text(uri); ok {
				want[uri] = text
			}
		}
		// Each program may take several steps (a rebuild, an entry) to get
		// there: what is shown is where each arrives.
		for _, p := range []struct {
			name string
			ch   <-chan map[string]string
		}{{"prompt", prompts}, {"index", ops}} {
			if err := await(ctx, w, p.name, p.ch, want); err != nil {
				return err
			}
		}
	}
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("a program ended with %v", err)
		}
	}
	fmt.Fprintln(w, "ok: after every step the prompt and the index held the server's current text")
	return nil
}

// send hands a program's state to run, unless the run is over.
func send(ctx context.Context, ch chan<- map[string]string, state map[string]string) {
	select {
	case ch <- state:
	case <-ctx.Done():
	}
}

// await waits until ch says want, then prints it.
func await(ctx context.Context, w io.Writer, name string, ch <-chan map[string]string, want map[string]string) error {
	deadline := time.After(timeout)
	for {
		select {
		case got := <-ch:
			if !maps.Equal(got, want) {
				continue
			}
			fmt.Fprintf(w, "   %-6s", name)
			for _, uri := range slices.Sorted(maps.Keys(got)) {
				fmt.Fprintf(w, "  %s %q", path.Base(uri), got[uri])
			}
			fmt.Fprintln(w)
			return nil
		case <-deadline:
			return fmt.Errorf("the %s never held %v within %v", name, want, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cache is the README's agent-context cache.
func cache(ctx context.Context, dial mcpsync.Dialer, usePrompt func([]mcpsync.Entry)) error {
	changed := make(chan struct{}, 1)
	mark := func() {
		select {
		case changed <- struct{}{}:
		default: // a rebuild is due already
		}
	}
	client, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{
		Subject: "user:alice",
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
	if _, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true}); err != nil {
		return err
	}
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
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

// worker is the README's index worker, on a client of its own.
func worker(ctx context.Context, dial mcpsync.Dialer, index func(string, []mcpsync.Content) error, unindex func(string) error) error {
	client, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: "svc:indexer"})
	if err != nil {
		return err
	}
	defer client.Close()
	if _, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true}); err != nil {
		return err
	}
	engine := client.Engine()
	for entry, err := range engine.Consume(ctx, "indexer") {
		if err != nil {
			return err
		}
		r, err := engine.Resolve(ctx, entry)
		if err != nil {
			return err
		}
		switch r.Kind {
		case mcpsync.ResolvedContents:
			err = index(entry.URI, r.Contents)
		case mcpsync.ResolvedSuperseded: // the newer version's entry follows
		default: // deleted, revoked, forgotten or quarantined
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
