// Command quickstart walks the fence through the faults it exists for: a
// slow read answered after a newer one, a read answered after the
// unsubscribe began, and a revoked subject. It prints every receipt, so the
// decisions can be read; it needs no server.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/mcpsync/mcpsync"
)

const doc = "file:///handbook/onboarding.md"

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	engine, err := mcpsync.NewEngine(&mcpsync.Options{Guard: mcpsync.MaxBytes(1 << 20)})
	if err != nil {
		return err
	}
	if _, err := engine.BeginSession(mcpsync.SessionInfo{Capabilities: mcpsync.CapabilityReceipt{
		ProtocolVersion: "2025-11-25", Server: mcpsync.Implementation{Name: "handbook", Version: "1.0.0"},
		Resources: true, Subscribe: true,
	}}); err != nil {
		return err
	}
	if _, err := engine.Subscribe(doc, "user:alice"); err != nil {
		return err
	}
	if _, err := engine.Activate(doc, mcpsync.ModePush); err != nil {
		return err
	}

	fmt.Println("1. Read A is sent, the document changes, read B is sent; B answers first.")
	a, err := engine.IssueTicket(doc, mcpsync.TriggerNotification)
	if err != nil {
		return err
	}
	b, err := engine.IssueTicket(doc, mcpsync.TriggerNotification)
	if err != nil {
		return err
	}
	show(engine.AcceptResourceVersion(b, page("Welcome! Badges are at desk 4.")))
	show(engine.AcceptResourceVersion(a, page("Welcome! Badges are at desk 2.")))
	serve(engine, "user:alice")

	fmt.Println("2. A read is in flight when the unsubscribe begins; its answer comes late.")
	late, err := engine.IssueTicket(doc, mcpsync.TriggerRevalidate)
	if err != nil {
		return err
	}
	closing, err := engine.BeginClose(doc)
	if err != nil {
		return err
	}
	printJSON(closing)
	show(engine.AcceptResourceVersion(late, page("Welcome! Badges moved again.")))
	if _, err := engine.FinishClose(doc, true); err != nil {
		return err
	}
	serve(engine, "user:alice")

	fmt.Println("3. A RAG worker consumed the outbox and derived an embedding; then alice is revoked.")
	entries, err := engine.PullOutbox(0, 0)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if err := engine.RecordDerived(mcpsync.DerivedArtifact{
			Index: "embeddings", ArtifactID: "onboarding#0", Version: entry.Version,
		}); err != nil {
			return err
		}
		if err := engine.AckOutbox(entry.Seq); err != nil {
			return err
		}
	}
	receipt, err := engine.RevokeSubject("user:alice")
	if err != nil {
		return err
	}
	fmt.Printf("   %s: %d version(s), %d derived artifact(s) invalidated\n",
		receipt.Schema, len(receipt.Versions), len(receipt.Artifacts))
	serve(engine, "user:alice")
	cursor, err := engine.OutboxCursor()
	if err != nil {
		return err
	}
	pending, err := engine.PullOutbox(cursor, 0)
	if err != nil {
		return err
	}
	for _, entry := range pending {
		what := "the version itself"
		if entry.Artifact != nil {
			what = entry.Artifact.Index + "/" + entry.Artifact.ArtifactID
		}
		fmt.Printf("   outbox #%d %s %s: %s\n", entry.Seq, entry.Reason, entry.URI, what)
	}
	fmt.Println("   stale receipts by reason:", engine.StaleCounts())
	return nil
}

func page(body string) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/markdown", Text: body}})
}

func show(out mcpsync.Outcome, err error) {
	if out.Accepted {
		fmt.Printf("   ordinal %d: %s\n", out.Version.Version.ReadOrdinal, out.Version.Decision)
		return
	}
	var refusal *mcpsync.RefusalError
	if !errors.As(err, &refusal) {
		log.Fatalf("unexpected error: %v", err)
	}
	fmt.Printf("   ordinal %d: refused, %s (watermark %d)\n", out.Stale.ReadOrdinal, refusal.Reason, out.Stale.Watermark)
}

func serve(engine *mcpsync.Engine, subject string) {
	entry, err := engine.Lookup(subject, doc)
	if err != nil {
		fmt.Printf("   prompt gets nothing: %v\n\n", err)
		return
	}
	fmt.Printf("   prompt gets ordinal %d: %q\n\n", entry.Version.ReadOrdinal, entry.Contents[0].Text)
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("   ", "  ")
	fmt.Print("   ")
	if err := enc.Encode(v); err != nil {
		log.Fatal(err)
	}
}
