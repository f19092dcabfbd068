package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync"
)

// statusUnsupported is the status scan prints for a list the server does
// not implement: it declares no resources capability, or it answered the
// list's method with -32601 (method not found), as servers that list
// resources but no templates do. It is a fact about the server, not a
// fault: the scan succeeds.
const statusUnsupported mcpsync.CatalogStatus = "UNSUPPORTED"

// scanEvent is a catalog as the command prints it: one per listing kind.
type scanEvent struct {
	Event             string                `json:"event"`
	Kind              mcpsync.ListKind      `json:"kind"`
	Status            mcpsync.CatalogStatus `json:"status"`
	Reason            string                `json:"reason,omitempty"` // why a list is UNSUPPORTED
	SessionGeneration uint64                `json:"sessionGeneration"`
	SnapshotID        string                `json:"snapshotId,omitempty"`
	SetDigest         string                `json:"setDigest,omitempty"`
	Items             []scanItem            `json:"items"`
	Scans             []mcpsync.ScanReceipt `json:"scans"`
	MeasuredAt        time.Time             `json:"measuredAt"`
	StaleAfter        time.Time             `json:"staleAfter"`
	NextReviewAt      time.Time             `json:"nextReviewAt"`
}

type scanItem struct {
	URI         string `json:"uri,omitempty"`
	URITemplate string `json:"uriTemplate,omitempty"`
	Name        string `json:"name,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
}

func newScanEvent(c mcpsync.Catalog) scanEvent {
	items := make([]scanItem, 0, len(c.Descriptors))
	for d := range c.Items() {
		items = append(items, scanItem{d.URI, d.URITemplate, d.Name, d.MIMEType})
	}
	return scanEvent{
		Event: "scan", Kind: c.Kind, Status: c.Status, SessionGeneration: c.SessionGeneration,
		SnapshotID: c.SnapshotID, SetDigest: c.SetDigest, Items: items, Scans: c.Scans,
		MeasuredAt: c.MeasuredAt, StaleAfter: c.StaleAfter, NextReviewAt: c.NextReviewAt,
	}
}

// summaryLine is the one-line text form used by watch and demo.
func (e scanEvent) summaryLine() string {
	proof := ""
	if e.SnapshotID != "" {
		proof = "  snapshot " + e.SnapshotID
	}
	return fmt.Sprintf("scan         %s  %s  %d item(s) in %d pass(es)%s", e.Kind, e.Status, len(e.Items), len(e.Scans), proof)
}

// String is the full text form printed by scan.
func (e scanEvent) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s (session %d)\n", e.Kind, e.Status, e.SessionGeneration)
	if e.Status == statusUnsupported {
		// The receipts of the refused page are in the JSON form.
		return b.String() + "  " + e.Reason
	}
	for _, it := range e.Items {
		id := it.URI
		if id == "" {
			id = it.URITemplate
		}
		fmt.Fprintf(&b, "  %-40s  %-24s  %s\n", id, it.Name, it.MIMEType)
	}
	if len(e.Items) == 0 {
		b.WriteString("  (none)\n")
	}
	b.WriteString("  scans:\n")
	for _, r := range e.Scans {
		snap := ""
		if r.SnapshotID != "" {
			snap = "  snapshot " + r.SnapshotID
		}
		fmt.Fprintf(&b, "    attempt %d pass %s  %s  %d page(s)  %d item(s)  list_changed %d  %s%s\n",
			r.Attempt, r.Pass, r.Outcome, len(r.Pages), r.ItemCount, r.ListChangedSeen, short(r.SetDigest), snap)
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "      fault %s on page %d\n", f.Fault, f.Page)
		}
		for _, f := range r.SnapshotFaults {
			fmt.Fprintf(&b, "      snapshot fault %s on page %d\n", f.Fault, f.Page)
		}
	}
	fmt.Fprintf(&b, "  measuredAt   %s\n  staleAfter   %s\n  nextReviewAt %s",
		stamp(e.MeasuredAt), stamp(e.StaleAfter), stamp(e.NextReviewAt))
	return b.String()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func runScan(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var c common
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	c.register(fs)
	c.registerLedger(fs)
	templates := fs.Bool("templates", true, "scan resources/templates/list too")
	positional, err := parse(fs, &c, args)
	if err != nil {
		return helpOrUsage(err, fs, "scan [flags] (--url URL | -- command args...)", stdout)
	}
	if len(positional) > 0 {
		return usagef("scan takes no arguments, got %q", positional[0])
	}
	if err := c.validate(true); err != nil {
		return err
	}
	// A scan writes no record, but its session generation comes from the
	// engine's ledger: with --ledger, each run's is above every earlier
	// run's, as the receipts of a worker's scans must be.
	engine, closeLedger, err := c.newEngine(ctx, mcpsync.EngineOptions{})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeLedger(); err == nil {
			err = cerr
		}
	}()
	// One-shot: what an earlier watch left open is for the next watch to resume.
	conn, err := c.open(ctx, mcpsync.ClientOptions{Engine: engine, NoResume: true}, nil)
	if err != nil {
		return err
	}
	defer conn.close()
	p := newPrinter(c.json, stdout, stderr)
	kinds := []mcpsync.ListKind{mcpsync.KindResources}
	if *templates {
		kinds = append(kinds, mcpsync.KindResourceTemplates)
	}
	caps := conn.client.Capabilities()
	var errs []error
	for _, kind := range kinds {
		if !caps.Resources {
			// Known from the handshake: nothing was listed, so the
			// capability receipt's time is the measurement's.
			ev := scanEvent{Event: "scan", Kind: kind, Status: statusUnsupported, SessionGeneration: caps.SessionGeneration,
				Reason: "the server declares no resources capability", Items: []scanItem{}, Scans: []mcpsync.ScanReceipt{},
				MeasuredAt: caps.ReceivedAt, StaleAfter: caps.ReceivedAt, NextReviewAt: caps.ReceivedAt}
			p.emit(ev, ev.String())
			continue
		}
		p.progress("scanning %s…", kind.Method())
		cat, err := conn.client.Scan(ctx, kind)
		ev := newScanEvent(cat)
		if rpc, ok := errors.AsType[*mcpsync.RPCError](err); ok && rpc.Code == mcp.METHOD_NOT_FOUND {
			ev.Status = statusUnsupported
			ev.Reason = fmt.Sprintf("the server does not implement %s (it answered %d, method not found)", kind.Method(), rpc.Code)
			p.emit(ev, ev.String())
			continue
		}
		// An unreconciled catalog is printed too: its receipts say what
		// was seen and why nothing can be trusted.
		if cat.Schema != "" {
			p.emit(ev, ev.String())
		}
		if err != nil {
			errs = append(errs, wrapf(err, "scan %s", kind))
		}
	}
	p.done()
	return errors.Join(errs...)
}
