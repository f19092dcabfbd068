package mcpsync_test

import (
	"errors"
	"fmt"

	"github.com/mcpsync/mcpsync"
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
	if _, err := e.Activate("file:///notes.md", mcpsync.ModePush); err != nil {
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
	a, _ := e.IssueTicket("file:///notes.md", mcpsync.TriggerNotification)
	b, _ := e.IssueTicket("file:///notes.md", mcpsync.TriggerNotification)

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

	out, _ := e.Complete(first, note("v1"))
	fmt.Println("follow-up:", out.FollowUp.Trigger)
	out, _ = e.Complete(*out.FollowUp, note("v2"))
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
	inFlight, _ := e.IssueTicket("file:///notes.md", mcpsync.TriggerRevalidate)
	receipt, _ := e.BeginClose("file:///notes.md")
	fmt.Println(receipt.State, "closeOrdinal", receipt.CloseOrdinal)

	_, err := e.AcceptResourceVersion(inFlight, mcpsync.NotFoundResult())
	fmt.Println(errors.Is(err, mcpsync.ErrStaleAfterClose))
	// Output:
	// UNSUBSCRIBING closeOrdinal 1
	// true
}
