package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func exampleEngine() *mcpsync.Engine {
	e, err := mcpsync.NewEngine(nil)
	if err != nil {
		panic(err)
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		panic(err)
	}
	if _, err := e.Subscribe("file:///notes.md", "user:alice"); err != nil {
		panic(err)
	}
	if _, err := e.Activate("file:///notes.md", ledger.ModePush); err != nil {
		panic(err)
	}
	return e
}

func note(body string) mcpsync.ReadResult {
	return mcpsync.NewReadResult([]mcpsync.Content{{URI: "file:///notes.md", MIMEType: "text/plain", Text: body}})
}

// Read A was sent before read B but answers after it: B's version stays.
func ExampleEngine_AcceptResourceVersion() {
	e := exampleEngine()
	a, _ := e.IssueTicket("file:///notes.md", ledger.TriggerNotification)
	b, _ := e.IssueTicket("file:///notes.md", ledger.TriggerNotification)

	out, _ := e.AcceptResourceVersion(b, note("newer"))
	fmt.Println(out.Version.Version.ReadOrdinal, out.Version.Decision)

	out, err := e.AcceptResourceVersion(a, note("older"))
	fmt.Println(out.Stale.ReadOrdinal, out.Stale.Reason, errors.Is(err, mcpsync.ErrRefused))

	entry, _ := e.Lookup("user:alice", "file:///notes.md")
	fmt.Println(entry.Contents[0].Text)
	// Output:
	// 2 ACCEPTED
	// 1 STALE_ORDINAL true
	// newer
}

// Ten duplicate notifications while a read is in flight cost one more read.
func ExampleEngine_Notify() {
	e := exampleEngine()
	first, send, _ := e.Notify("file:///notes.md")
	fmt.Println("send first read:", send)
	for range 10 {
		_, send, _ = e.Notify("file:///notes.md")
	}
	fmt.Println("send while in flight:", send)

	out, _ := e.FinishRead(first, note("v1"))
	fmt.Println("follow-up:", out.FollowUp.Trigger)
	out, _ = e.FinishRead(*out.FollowUp, note("v2"))
	fmt.Println("follow-up after that:", out.FollowUp != nil)
	// Output:
	// send first read: true
	// send while in flight: false
	// follow-up: notification
	// follow-up after that: false
}

// A read answered after the unsubscribe began changes nothing.
func ExampleEngine_BeginClose() {
	e := exampleEngine()
	inFlight, _ := e.IssueTicket("file:///notes.md", ledger.TriggerRevalidate)
	receipt, _ := e.BeginClose("file:///notes.md")
	fmt.Println(receipt.State, "closeOrdinal", receipt.CloseOrdinal)

	_, err := e.AcceptResourceVersion(inFlight, mcpsync.NotFoundResult())
	fmt.Println(errors.Is(err, mcpsync.ErrStaleAfterClose))
	// Output:
	// UNSUBSCRIBING closeOrdinal 1
	// true
}

// A Client synced to an in-process server from the test kit: subscribe, then
// read what may go into alice's prompt.
func ExampleConnect() {
	srv := mcpsynctest.NewServer(nil)
	srv.Set("file:///handbook.md", "text/markdown", "Badges are at desk 4.")
	outcomes := make(chan mcpsync.Outcome, 1)
	client, err := mcpsync.Connect(context.Background(), srv.Dialer(), &mcpsync.ClientOptions{Subject: "user:alice", OnOutcome: func(o mcpsync.Outcome) { outcomes <- o }})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	sub, _ := client.Subscribe(context.Background(), "file:///handbook.md")
	fmt.Println(sub.Mode, sub.StalenessBoundMs)
	first := <-outcomes
	fmt.Println(first.Version.Decision, first.Version.Trigger)
	entry, _ := client.Lookup("file:///handbook.md")
	fmt.Println(entry.Contents[0].Text)
	// Output:
	// push 390000
	// ACCEPTED initial
	// Badges are at desk 4.
}

// Two identical passes over a server without the snapshot extension give an
// UNPROVEN catalog, which completeness tasks refuse.
func ExampleClient_Scan() {
	srv := mcpsynctest.NewServer(nil)
	for _, name := range []string{"a", "b", "c"} {
		srv.Set("file:///"+name+".md", "text/markdown", name)
	}
	client, err := mcpsync.Connect(context.Background(), srv.Dialer(), &mcpsync.ClientOptions{Subject: "user:alice"})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	catalog, _ := client.Scan(context.Background(), mcpsync.KindResources)
	fmt.Println(catalog.Status, len(catalog.Descriptors), "items in", len(catalog.Scans), "passes")
	_, err = catalog.Proven(catalog.MeasuredAt, client.Engine().SessionGeneration())
	fmt.Println(errors.Is(err, mcpsync.ErrSnapshotUnproven))
	// Output:
	// SNAPSHOT_UNPROVEN 3 items in 2 passes
	// true
}

// A program that talks to the server over its own transport (here an mcp-go
// client of a server in the same process) drives the engine through one
// read cycle: a session per initialize, a subscription, a ticket before the
// request, and the answer through the fence.
func ExampleEngine_ownTransport() {
	const uri = "file:///notes.md"
	ctx := context.Background()
	srv := server.NewMCPServer("notes", "1.0.0", server.WithResourceCapabilities(false, false))
	srv.AddResource(mcp.NewResource(uri, "notes", mcp.WithMIMEType("text/plain")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/plain", Text: "buy milk"}}, nil
		})
	mc, err := mcpclient.NewInProcessClient(srv)
	if err != nil {
		panic(err)
	}
	defer mc.Close()
	if err := mc.Start(ctx); err != nil {
		panic(err)
	}
	init, err := mc.Initialize(ctx, mcp.InitializeRequest{})
	if err != nil {
		panic(err)
	}

	e, err := mcpsync.NewEngine(nil)
	if err != nil {
		panic(err)
	}
	// Every initialize begins a session: answers of an older one are refused.
	caps := ledger.CapabilityReceipt{
		ProtocolVersion: init.ProtocolVersion,
		Server:          ledger.Implementation{Name: init.ServerInfo.Name, Version: init.ServerInfo.Version},
		Resources:       init.Capabilities.Resources != nil,
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{Capabilities: caps}); err != nil {
		panic(err)
	}
	// This server cannot notify, so the subscription polls, and says how
	// stale its copy may get.
	if _, err := e.Subscribe(uri, "user:alice"); err != nil {
		panic(err)
	}
	if _, err := e.Activate(uri, ledger.ModePoll); err != nil {
		panic(err)
	}
	if _, err := e.PublishStalenessBound(uri, time.Minute); err != nil {
		panic(err)
	}

	// One read: its ticket is issued before the request goes out.
	t, send, err := e.RequestRead(uri, ledger.TriggerInitial)
	if err != nil || !send {
		panic(err) // !send: a read in flight covers this one
	}
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := mc.ReadResource(ctx, req)
	if err != nil {
		// No answer: the ticket is spent (a late answer is refused), and
		// Fail returns the read to send instead, if one is due.
		_, _ = e.Fail(t)
		return
	}
	out, err := e.FinishRead(t, mcpsync.ReadResultFromMCP(res))
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Version.Decision, "ordinal", out.Version.Version.ReadOrdinal)
	entry, _ := e.Lookup("user:alice", uri)
	fmt.Println(entry.Contents[0].Text)
	// Output:
	// ACCEPTED ordinal 1
	// buy milk
}
