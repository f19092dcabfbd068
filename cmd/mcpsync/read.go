package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// readEvent is the answer of the read command: the version line, the full
// receipt and the content.
type readEvent struct {
	versionEvent
	Receipt  mcpsync.VersionReceipt `json:"receipt"`
	Contents []contentItem          `json:"contents"`
}

type contentItem struct {
	URI      string `json:"uri"`
	MIMEType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"` // base64, as on the wire
}

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var c common
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	c.register(fs)
	c.registerLedger(fs)
	positional, err := parse(fs, &c, args)
	if err != nil {
		return helpOrUsage(err, fs, "read [flags] URI (--url URL | -- command args...)", stdout)
	}
	switch {
	case len(positional) == 0:
		return usagef("read needs the URI to read")
	case len(positional) > 1:
		return usagef("read takes one URI, got %d arguments", len(positional))
	}
	uri := positional[0]
	if err := c.validate(true); err != nil {
		return err
	}
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

	// A one-shot read needs a ticket, and tickets belong to an open
	// subscription generation. The generation is opened in the engine only,
	// in poll mode, so the server is not asked to subscribe for one read.
	// It is closed again on the way out, or a ledger would keep it open for
	// every later run that resumes subscriptions, unless an earlier run left
	// the URI open: then read leaves it open too.
	if c.shared != nil {
		// A shared ledger fences writes by lease: read takes the URI's for
		// its one read, and a worker that holds it answers for it instead.
		key, err := mcpsync.NormalizeURI(uri)
		if err != nil {
			return err
		}
		if _, err := c.shared.Acquire(ctx, key); err != nil {
			return wrapf(err, "read %s", uri)
		}
		defer func() { _ = c.shared.Release(context.WithoutCancel(ctx), key) }()
	}
	keep := leftOpen(engine, uri)
	if _, err := engine.Subscribe(uri, c.subject); err != nil {
		return wrapf(err, "read %s", uri)
	}
	if !keep {
		defer func() {
			if cerr := closeOneShot(engine, uri); err == nil && cerr != nil {
				err = wrapf(cerr, "read %s: close", uri)
			}
		}()
	}
	if _, err := engine.Activate(uri, ledger.ModePoll); err != nil {
		return wrapf(err, "read %s", uri)
	}
	out, err := conn.client.Read(ctx, uri)
	p := newPrinter(c.json, stdout, stderr)
	if !out.Accepted {
		if out.Stale.Schema != "" {
			ev := newStaleEvent(out.Stale)
			p.emit(ev, ev.String())
		}
		if err == nil {
			err = errors.New("no answer")
		}
		return wrapf(err, "read %s refused", uri)
	}
	ev := readEvent{versionEvent: newVersionEvent(out.Version), Receipt: out.Version}
	if out.Version.Decision == mcpsync.DecisionTombstonePending {
		p.emit(ev, ev.versionEvent.String())
		return fmt.Errorf("read %s: resource not found (%s)", uri, out.Version.Decision)
	}
	entry, err := conn.client.Lookup(uri)
	if err != nil {
		p.emit(ev, ev.versionEvent.String())
		return wrapf(err, "read %s: accepted but not servable", uri)
	}
	var text strings.Builder
	for _, item := range entry.Contents {
		ci := contentItem{URI: item.URI, MIMEType: item.MIMEType, Text: item.Text}
		if item.Binary {
			ci.Text, ci.Blob = "", base64.StdEncoding.EncodeToString(item.Data)
			fmt.Fprintf(&text, "\n(%s: %d bytes of %s)", item.URI, len(item.Data), item.MIMEType)
		} else {
			fmt.Fprintf(&text, "\n%s", item.Text)
		}
		ev.Contents = append(ev.Contents, ci)
	}
	v := out.Version
	p.emit(ev, fmt.Sprintf("%s %s  %s\n  digest   %s\n  ordinal  %d (request %d, %s)\n  subject  %s\n  server   %s %s\n  session  %d  subscription %d\n  bytes    %d\n%s",
		v.Schema, v.Decision, v.Version.URI, v.Version.Digest, v.Version.ReadOrdinal, v.RequestID, v.Trigger,
		v.Version.Subject, v.Version.Server.Name, v.Version.Server.Version,
		v.Version.SessionGeneration, v.Version.SubscriptionGeneration, v.Version.Bytes, text.String()))
	return nil
}

// leftOpen reports whether an earlier session left uri subscribed in the
// engine's ledger (a watch that was killed): what a restarted worker
// subscribes again.
func leftOpen(engine *mcpsync.Engine, uri string) bool {
	sub, err := engine.Subscription(uri)
	if err != nil {
		return false // unknown, or not a URI: Subscribe says which
	}
	for open, err := range engine.ResumableSubscriptions() {
		if err != nil {
			return false
		}
		if open.URI == sub.URI {
			return true
		}
	}
	return false
}

// closeOneShot closes the generation read opened. No resources/unsubscribe
// goes out, since none was sent to subscribe, so the close is acknowledged
// at once; a result still in flight is refused as STALE_AFTER_CLOSE.
func closeOneShot(engine *mcpsync.Engine, uri string) error {
	if _, err := engine.BeginClose(uri); err != nil {
		return err
	}
	_, err := engine.FinishClose(uri, true)
	return err
}
