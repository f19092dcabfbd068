package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// printer writes events: one JSON object per line with --json, readable
// text otherwise. Events come from the library's callbacks on several
// goroutines, so every line is written under one lock, and one encoder
// serves every JSON line. Every JSON line begins with "at", the time it was
// written (RFC 3339, nanoseconds, UTC), so lines are in the order of their
// times.
type printer struct {
	json bool
	// kinds are the kinds of event printed (the event field); nil prints
	// every kind. Set before the first line.
	kinds map[string]bool

	mu     sync.Mutex // protects everything below and the writers' line order
	out    io.Writer
	enc    *json.Encoder // encodes into buf
	buf    bytes.Buffer
	status io.Writer // where the progress line goes; nil: no progress
	shown  bool      // a progress line is on screen and must be cleared first
	err    error     // the first write error; later lines are dropped
}

// newPrinter prints to stdout; progress goes to stderr only when stdout is
// a terminal and the output is text, so pipes and JSON consumers never see
// control characters.
func newPrinter(jsonLines bool, stdout, stderr io.Writer) *printer {
	p := &printer{json: jsonLines, out: stdout}
	p.enc = json.NewEncoder(&p.buf)
	p.enc.SetEscapeHTML(false)
	if !jsonLines && isTerminal(stdout) {
		p.status = stderr
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// emit writes ev as a JSON line, or text as lines (nothing when text is
// empty: some events are for machines only), if its kind is printed.
func (p *printer) emit(ev any, text string) {
	if !p.wants(kindOf(ev)) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	p.clearStatus()
	if p.json {
		p.err = p.line(ev)
		return
	}
	if text != "" {
		_, p.err = fmt.Fprintln(p.out, text)
	}
}

// atLayout is RFC 3339 with every digit of the nanoseconds, so that the
// times of lines sort as text too.
const atLayout = "2006-01-02T15:04:05.000000000Z07:00"

// line writes ev as one JSON object with "at" first; p.mu is held.
func (p *printer) line(ev any) error {
	p.buf.Reset()
	if err := p.enc.Encode(ev); err != nil {
		return err
	}
	obj := p.buf.Bytes()
	if len(obj) < 2 || obj[0] != '{' {
		return fmt.Errorf("event %T is not a JSON object", ev)
	}
	sep := ","
	if obj[1] == '}' {
		sep = ""
	}
	_, err := fmt.Fprintf(p.out, `{"at":%q%s%s`, time.Now().UTC().Format(atLayout), sep, obj[1:])
	return err
}

// wants reports whether events of kind are printed.
func (p *printer) wants(kind string) bool {
	return p.kinds == nil || p.kinds[kind]
}

// kindOf returns the event field of an event ("" for a value without one).
func kindOf(ev any) string {
	v := reflect.Indirect(reflect.ValueOf(ev))
	if v.Kind() != reflect.Struct {
		return ""
	}
	f := v.FieldByName("Event")
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}

// text writes a line in text mode only; an empty line is not written.
func (p *printer) text(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if p.json || line == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	p.clearStatus()
	_, p.err = fmt.Fprintln(p.out, line)
}

// progress replaces the status line; it does nothing off a terminal.
func (p *printer) progress(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == nil {
		return
	}
	fmt.Fprintf(p.status, "\r\033[K"+format, args...)
	p.shown = true
}

// done clears the status line for good.
func (p *printer) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatus()
}

func (p *printer) clearStatus() {
	if p.shown {
		fmt.Fprint(p.status, "\r\033[K")
		p.shown = false
	}
}

// Events. Each is a small struct whose event field names it.

type stateEvent struct {
	Event                  string                   `json:"event"`
	URI                    string                   `json:"uri"`
	From                   ledger.SubscriptionState `json:"from"`
	To                     ledger.SubscriptionState `json:"to"`
	Cause                  string                   `json:"cause"`
	SubscriptionGeneration uint64                   `json:"subscriptionGeneration"`
}

func newStateEvent(t mcpsync.Transition) stateEvent {
	return stateEvent{"state", t.URI, t.From, t.To, t.Event, t.SubscriptionGeneration}
}

func (e stateEvent) String() string {
	return fmt.Sprintf("state        %s  %s -> %s (%s)", e.URI, e.From, e.To, e.Cause)
}

// readStep reports whether a transition is one of the steps every read
// takes (ACTIVE, UPDATE_SEEN, READ_PENDING, VERSION_ACCEPTED); text output
// leaves those out, the version and stale lines already tell the story.
func (e stateEvent) readStep() bool {
	open := []ledger.SubscriptionState{ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending, ledger.StateVersionAccepted}
	return slices.Contains(open, e.From) && slices.Contains(open, e.To) && e.Cause != "reconcile present"
}

type versionEvent struct {
	Event                  string           `json:"event"`
	URI                    string           `json:"uri"`
	Ordinal                uint64           `json:"ordinal"`
	Digest                 string           `json:"digest"`
	SessionGeneration      uint64           `json:"sessionGeneration"`
	SubscriptionGeneration uint64           `json:"subscriptionGeneration"`
	Decision               mcpsync.Decision `json:"decision"`
	Trigger                ledger.Trigger   `json:"trigger"`
}

func newVersionEvent(r mcpsync.VersionReceipt) versionEvent {
	v := r.Version
	return versionEvent{"version", v.URI, v.ReadOrdinal, v.Digest, v.SessionGeneration, v.SubscriptionGeneration, r.Decision, r.Trigger}
}

func (e versionEvent) String() string {
	return fmt.Sprintf("version      %s  ordinal %d  %s (%s)  %s  session %d  subscription %d",
		e.URI, e.Ordinal, e.Decision, e.Trigger, short(e.Digest), e.SessionGeneration, e.SubscriptionGeneration)
}

type staleEvent struct {
	Event                  string              `json:"event"`
	URI                    string              `json:"uri"`
	Ordinal                uint64              `json:"ordinal"`
	Reason                 mcpsync.StaleReason `json:"reason"`
	Trigger                ledger.Trigger      `json:"trigger"`
	Watermark              uint64              `json:"watermark"`
	NotFound               bool                `json:"notFound,omitempty"`
	SessionGeneration      uint64              `json:"sessionGeneration"`
	SubscriptionGeneration uint64              `json:"subscriptionGeneration"`
}

func newStaleEvent(s mcpsync.StaleReceipt) staleEvent {
	return staleEvent{"stale", s.URI, s.ReadOrdinal, s.Reason, s.Trigger, s.Watermark, s.NotFound, s.SessionGeneration, s.SubscriptionGeneration}
}

func (e staleEvent) String() string {
	what := "content"
	if e.NotFound {
		what = "not found"
	}
	return fmt.Sprintf("stale        %s  ordinal %d  %s (%s, %s)  watermark %d",
		e.URI, e.Ordinal, e.Reason, e.Trigger, what, e.Watermark)
}

// outboxEvent is an outbox entry pulled by the command: "delete" for
// confirmed deletions (tombstones), "change" for everything else (a new
// version, a revocation, a quarantine: what may be served changed).
type outboxEvent struct {
	Event          string                    `json:"event"`
	Seq            uint64                    `json:"seq"`
	URI            string                    `json:"uri"`
	Reason         ledger.InvalidationReason `json:"reason"`
	Digest         string                    `json:"digest,omitempty"`
	PreviousDigest string                    `json:"previousDigest,omitempty"`
	Subject        string                    `json:"subject"`
	// Artifact names the derived artifact a revocation is about, as
	// "index/id"; empty otherwise.
	Artifact string `json:"artifact,omitempty"`
	// Evidence is what confirmed a tombstone: proven, corroborated or
	// unlisted.
	Evidence *ledger.DeletionEvidence `json:"evidence,omitempty"`
}

func newOutboxEvent(o mcpsync.OutboxEntry) outboxEvent {
	ev := "change"
	if o.Reason == ledger.InvalidateTombstoned {
		ev = "delete"
	}
	artifact := ""
	if o.Artifact != nil {
		artifact = o.Artifact.Index + "/" + o.Artifact.ArtifactID
	}
	return outboxEvent{ev, o.Seq, o.URI, o.Reason, o.Version.Digest, o.Previous.Digest, o.Subject, artifact, o.Evidence}
}

func (e outboxEvent) String() string {
	if e.Event == "delete" {
		how := ""
		if e.Evidence != nil {
			how = "  " + string(e.Evidence.Kind)
		}
		return fmt.Sprintf("delete       %s  outbox #%d  tombstoned: delete what %s fed%s", e.URI, e.Seq, short(e.PreviousDigest), how)
	}
	s := fmt.Sprintf("change       %s  outbox #%d  %s  %s -> %s", e.URI, e.Seq, e.Reason, short(e.PreviousDigest), short(e.Digest))
	if e.Artifact != "" {
		s += "  artifact " + e.Artifact
	}
	return s
}

type errorEvent struct {
	Event   string `json:"event"`
	Message string `json:"message"`
}

func newErrorEvent(err error) errorEvent { return errorEvent{"error", oneLine(err.Error())} }

func (e errorEvent) String() string { return "error        " + e.Message }

// short abbreviates a digest for text output; JSON keeps it whole.
func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	if d == "" {
		return "-"
	}
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

// reasons renders stale counts sorted by reason, e.g.
// "STALE_ORDINAL=2 STALE_AFTER_CLOSE=1", or "none".
func reasons(counts map[mcpsync.StaleReason]uint64) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", r, counts[r]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// outcomeCounts counts fenced reads by what the fence decided.
type outcomeCounts struct {
	accepted, unchanged, pending int
	notificationReads            int // reads a notification triggered, passed or not
}

func (c *outcomeCounts) add(out mcpsync.Outcome) {
	trigger := out.Stale.Trigger
	if out.Accepted {
		trigger = out.Version.Trigger
		switch out.Version.Decision {
		case mcpsync.DecisionUnchanged:
			c.unchanged++
		case mcpsync.DecisionTombstonePending:
			c.pending++
		default:
			c.accepted++
		}
	}
	if trigger == ledger.TriggerNotification {
		c.notificationReads++
	}
}

// outcomeEvent returns the event of a fenced read and its text line.
func outcomeEvent(out mcpsync.Outcome) (any, string) {
	if out.Accepted {
		ev := newVersionEvent(out.Version)
		return ev, ev.String()
	}
	ev := newStaleEvent(out.Stale)
	return ev, ev.String()
}
