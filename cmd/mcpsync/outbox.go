package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// The outbox command is a worker's pull and ack from a shell: it lists what
// a ledger's outbox holds for a consumer and, with --ack, acknowledges it.
// It reads what is there and exits; it never waits for new entries.

const outboxSynopsis = "outbox --ledger FILE [--consumer NAME] [--json] [--ack] [--through N]"

// outboxBatch is how many entries the command reads from the ledger at once.
const outboxBatch = 256

// lostEntriesError is a consumer that the retention bound overtook: the
// ledger dropped entries it had not passed. Exit status 3.
type lostEntriesError struct {
	gap *ledger.OutboxGapError
}

func (e *lostEntriesError) Error() string {
	return fmt.Sprintf("consumer %q lost outbox entries #%d to #%d: the retention bound dropped them before it passed them; "+
		"rebuild what they fed (a full rescan), then run with --ack --through %d", e.gap.Consumer, e.gap.From, e.gap.Through, e.gap.Through)
}

func (e *lostEntriesError) Unwrap() error { return e.gap }

func runOutbox(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var spec, consumer nonEmpty
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	fs.Var(&spec, "ledger", "ledger `file` to read (required)")
	fs.Var(&consumer, "consumer", "list what consumer `NAME` has not acknowledged (default: every retained entry)")
	jsonLines := fs.Bool("json", false, "each entry as its stored JSON (invalidation.v1), one per line; the summary goes to stderr")
	ack := fs.Bool("ack", false, "acknowledge for --consumer what this run listed, once written")
	through := fs.Uint64("through", 0, "list entries up to `N` only and, with --ack, acknowledge up to N, lost entries included; list, apply, then --ack --through N, and nothing unapplied is acknowledged (0: no bound)")
	var c common
	positional, err := parse(fs, &c, args)
	if err != nil {
		return helpOrUsage(err, fs, outboxSynopsis, stdout)
	}
	switch {
	case len(c.command) > 0:
		return usagef("outbox reads a ledger and runs no server: nothing goes after --")
	case len(positional) > 0:
		return usagef("outbox takes no arguments, got %q", positional[0])
	case spec == "":
		return usagef("outbox needs --ledger FILE")
	case *ack && consumer == "":
		return usagef("--ack needs --consumer NAME: every consumer acknowledges for itself")
	}

	l, closeLedger, err := openLedger(ctx, string(spec), existingLedger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeLedger(); err == nil {
			err = cerr
		}
	}()
	st, err := l.OutboxState(ctx)
	if err != nil {
		return wrapf(err, "outbox")
	}
	// Without a consumer, or for one not yet registered (which registering
	// places before the oldest retained entry), everything retained is
	// pending.
	var pos uint64
	registered := false
	if consumer != "" {
		pos, registered = st.Consumers[string(consumer)]
	}
	var gap *ledger.OutboxGapError
	if registered {
		gap = st.Lost(string(consumer), pos)
	}

	out := listing{json: *jsonLines, w: stdout}
	after := pos
	for more := true; more; {
		batch, err := l.Outbox(ctx, after, outboxBatch)
		if err != nil {
			return wrapf(err, "outbox")
		}
		more = len(batch) == outboxBatch
		for _, e := range batch {
			if *through > 0 && e.Seq > *through {
				more = false
				break
			}
			if err := out.entry(e); err != nil {
				return wrapf(err, "outbox: write") // nothing acknowledged
			}
			after = e.Seq
		}
	}

	ackNote := ""
	if *ack {
		upTo := out.last
		switch {
		case *through > 0:
			upTo = *through
		case gap != nil:
			// Acknowledging past lost entries must be asked for by number,
			// once what they fed was rebuilt.
			ackNote = "acknowledged nothing (entries lost)"
		}
		if ackNote == "" {
			// With nothing listed this still registers the consumer, so the
			// outbox keeps what is appended from now on for it.
			if err := l.Ack(ctx, string(consumer), upTo); err != nil {
				return wrapf(err, "outbox")
			}
			if st, err = l.OutboxState(ctx); err != nil {
				return wrapf(err, "outbox")
			}
			ackNote = fmt.Sprintf("%q acknowledged through #%d", consumer, st.Consumers[string(consumer)])
		}
	}

	sum := outboxSummary(st, consumer, registered, pos, *through, out.n, ackNote)
	if *jsonLines {
		fmt.Fprintln(stderr, sum)
	} else if err := out.line(sum); err != nil {
		return wrapf(err, "outbox: write")
	}
	if gap != nil && st.Consumers[string(consumer)] < gap.Through {
		return &lostEntriesError{gap: gap}
	}
	return nil
}

// listing writes the listed entries: their stored JSON with --json, the
// command's text lines otherwise.
type listing struct {
	json bool
	w    io.Writer
	n    int    // entries written
	last uint64 // the newest written; 0 if none
}

func (l *listing) entry(e mcpsync.OutboxEntry) error {
	if l.json {
		b, err := ledger.EncodeOutboxEntry(e)
		if err != nil {
			return err
		}
		if _, err := l.w.Write(append(b, '\n')); err != nil {
			return err
		}
	} else if err := l.line(newOutboxEvent(e).String()); err != nil {
		return err
	}
	l.n, l.last = l.n+1, e.Seq
	return nil
}

func (l *listing) line(s string) error {
	_, err := fmt.Fprintln(l.w, s)
	return err
}

// outboxSummary is the outbox command's last line: what was listed for
// whom, what was acknowledged, the outbox's extent and every consumer's
// position, with the entries each lost.
func outboxSummary(st ledger.OutboxState, consumer nonEmpty, registered bool, pos, through uint64, listed int, ackNote string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "summary      listed %d", listed)
	switch {
	case consumer == "":
		b.WriteString(" retained")
	case registered:
		fmt.Fprintf(&b, " pending for %q after #%d", consumer, pos)
	default:
		fmt.Fprintf(&b, " for %q (not registered: every retained entry)", consumer)
	}
	if through > 0 {
		fmt.Fprintf(&b, " up to #%d", through)
	}
	if ackNote != "" {
		b.WriteString("; " + ackNote)
	}
	fmt.Fprintf(&b, "; outbox last #%d, first retained ", st.Last)
	if st.First > st.Last {
		b.WriteString("- (none)")
	} else {
		fmt.Fprintf(&b, "#%d", st.First)
	}
	fmt.Fprintf(&b, ", dropped %d", st.Dropped)
	if st.Dropped > 0 {
		fmt.Fprintf(&b, " (through #%d)", st.DroppedThrough)
	}
	b.WriteString("; consumers")
	if len(st.Consumers) == 0 {
		b.WriteString(" none")
	}
	for _, name := range slices.Sorted(maps.Keys(st.Consumers)) {
		p := st.Consumers[name]
		fmt.Fprintf(&b, " %q at #%d", name, p)
		if gap := st.Lost(name, p); gap != nil {
			fmt.Fprintf(&b, " (lost #%d to #%d)", gap.From, gap.Through)
		}
	}
	return b.String()
}
