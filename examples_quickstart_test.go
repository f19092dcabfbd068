package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// The README's quick start against the test kit's server: the prompt gets
// the first text once it is read, the change that arrives rebuilds it, and
// the index sees both versions in order.
func Example_quickStart() {
	const uri = "file:///handbook/onboarding.md"
	srv := mcpsynctest.NewServer(nil)
	srv.Set(uri, "text/markdown", "Badges are at desk 2.")
	dial := func(context.Context) (transport.Interface, error) { return srv.NewInProcessTransport(), nil }

	rebuilds := make(chan string, 8)
	errDone := errors.New("done")
	err := quickStart(context.Background(), dial,
		func(uri string) { rebuilds <- uri },
		func(e mcpsync.Entry) { fmt.Println("prompt:", e.Contents[0].Text) },
		func(e mcpsync.OutboxEntry) error {
			fmt.Println("reindex:", e.Seq, e.Reason)
			if e.Seq == 1 {
				srv.Set(uri, "text/markdown", "Badges are at desk 4.")
				return nil
			}
			return errDone
		})
	fmt.Println(errors.Is(err, errDone), len(rebuilds), "prompt rebuilds")
	// Output:
	// prompt: Badges are at desk 2.
	// reindex: 1 updated
	// reindex: 2 updated
	// true 2 prompt rebuilds
}

// quickStart is the README's quick start, word for word from Connect on.
func quickStart(ctx context.Context, dial mcpsync.Dialer, rebuildPrompt func(uri string),
	addToPrompt func(mcpsync.Entry), reindex func(mcpsync.OutboxEntry) error) error {
	client, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{
		Subject: "user:alice",
		// Every fenced read, on the read's goroutine: do not block here.
		OnOutcome: func(o mcpsync.Outcome) {
			if o.Changed() || o.Withdrawn() { // new text, or text taken away
				rebuildPrompt(o.Version.Version.URI)
			}
		},
	})
	if err != nil {
		return err
	}
	defer client.Close()

	// Subscribe (or poll where the server cannot), then wait for the first reads.
	const uri = "file:///handbook/onboarding.md"
	if _, err := client.Subscribe(ctx, uri); err != nil {
		return err
	}
	if err := client.WaitForSync(ctx); err != nil {
		return err
	}

	// Prompt assembly, strict: accepted, guarded, unrevoked versions of this
	// subject, confirmed within their staleness bound. A refusal says why.
	entry, err := client.Lookup(uri, mcpsync.RequireFresh())
	if why, refused := mcpsync.RefusalOf(err); refused {
		log.Printf("%s left out: %s", uri, why) // QUARANTINED, REVOKED, STALE, …
	} else if err != nil {
		return err
	} else {
		addToPrompt(entry)
	}

	// Keep scanning: new resources are subscribed, deletions confirmed.
	if _, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true}); err != nil {
		return err
	}

	// Index maintenance: a named outbox consumer, at least once, in order per URI.
	for entry, err := range client.Engine().Consume(ctx, "indexer") {
		if err != nil {
			return err
		}
		if err := reindex(entry); err != nil {
			return err
		}
		if err := client.Engine().Acknowledge(ctx, "indexer", entry.Seq); err != nil {
			return err
		}
	}
	return nil
}
