package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// The demo runs the library's main job against an in-process mcpsynctest
// server while the kit drops, duplicates and reorders notifications and
// holds reads, then checks the local copy against the server. Nothing in its
// output is scripted: every line reports what the library did, and the exit
// status is the final check's.

// phaseEvent marks the start of a demo phase.
type phaseEvent struct {
	Event  string `json:"event"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// checkEvent is the final comparison of one URI with the server.
type checkEvent struct {
	Event      string                      `json:"event"`
	URI        string                      `json:"uri"`
	Live       bool                        `json:"live"`
	State      ledger.SubscriptionState    `json:"state"`
	Served     string                      `json:"served"` // "yes" or why not (ErrTombstoned, …)
	Generation uint64                      `json:"subscriptionGeneration"`
	Ordinal    uint64                      `json:"ordinal,omitempty"`
	Accepted   int                         `json:"accepted"`
	Refused    map[mcpsync.StaleReason]int `json:"refused,omitempty"`
	OK         bool                        `json:"ok"`
}

// demoSummary is the demo's last line.
type demoSummary struct {
	Event                string                         `json:"event"`
	OK                   bool                           `json:"ok"`
	Protocol             string                         `json:"protocol"`
	Seed                 int64                          `json:"seed"`
	ElapsedMs            int64                          `json:"elapsedMs"`
	ConvergedMs          int64                          `json:"convergedMs"`
	Live                 int                            `json:"live"`
	Deleted              int                            `json:"deleted"`
	Mismatches           int                            `json:"mismatches"`
	VersionsAccepted     int                            `json:"versionsAccepted"`
	Unchanged            int                            `json:"unchanged"`
	Tombstones           int                            `json:"tombstones"`
	Invalidations        int                            `json:"invalidations"`
	StaleByReason        map[mcpsync.StaleReason]uint64 `json:"staleByReason"`
	Faults               map[string]int                 `json:"faults"`
	Notifications        uint64                         `json:"notifications"`
	NotificationReads    int                            `json:"notificationReads"`
	ReadsPerNotification float64                        `json:"readsPerNotification"`
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	c.register(fs)
	seed := fs.Int64("seed", 1, "seed of the injected faults")
	count := fs.Int("resources", 12, "number of resources on the demo server (4 to 100)")
	budget := fs.Duration("converge", 20*time.Second, "how long the local copy may take to converge")
	positional, err := parse(fs, &c, args)
	if err != nil {
		return helpOrUsage(err, fs, "demo [flags]", stdout)
	}
	switch {
	case len(positional) > 0:
		return usagef("demo takes no arguments, got %q", positional[0])
	case *count < 4 || *count > 100:
		return usagef("--resources must be between 4 and 100")
	case *budget <= 0:
		return usagef("--converge must be positive")
	}
	if err := c.validate(false); err != nil {
		return err
	}
	d := &demo{c: &c, p: newPrinter(c.json, stdout, stderr), seed: *seed, count: *count, budget: *budget,
		stats: map[string]*uriStats{}}
	defer d.p.done()
	return d.run(ctx)
}

type demo struct {
	c      *common
	p      *printer
	seed   int64
	count  int
	budget time.Duration

	srv    *mcpsynctest.Server
	client *mcpsync.Client
	engine *mcpsync.Engine
	uris   []string // every URI the demo server ever listed, in creation order

	mu      sync.Mutex // protects kit and stats
	kit     *mcpsynctest.Transport
	stats   map[string]*uriStats
	outbox  uint64 // last outbox entry pulled
	inval   int
	tombs   int
	started time.Time
}

// uriStats is what the fence decided for one URI, as OnOutcome reported it.
type uriStats struct {
	outcomeCounts
	refused map[mcpsync.StaleReason]int
}

func (d *demo) statsOf(uri string) *uriStats {
	s := d.stats[uri]
	if s == nil {
		s = &uriStats{refused: map[mcpsync.StaleReason]int{}}
		d.stats[uri] = s
	}
	return s
}

// onOutcome records and prints every fenced read. UNCHANGED versions (most
// revalidation reads) are JSON-only, so the text stays readable.
func (d *demo) onOutcome(out mcpsync.Outcome) {
	uri := out.Stale.URI
	if out.Accepted {
		uri = out.Version.Version.URI
	}
	d.mu.Lock()
	s := d.statsOf(uri)
	s.add(out)
	if !out.Accepted {
		s.refused[out.Stale.Reason]++
	}
	d.mu.Unlock()
	ev, text := outcomeEvent(out)
	if out.Accepted && out.Version.Decision == mcpsync.DecisionUnchanged {
		text = "" // quiet in text: revalidation confirms the same content often
	}
	d.p.emit(ev, text)
}

// onTransition prints state changes: all of them as JSON; as text only
// those a reader cares about (closing, tombstones, reconciliation).
func (d *demo) onTransition(t mcpsync.Transition) {
	ev := newStateEvent(t)
	text := ev.String()
	if ev.readStep() || ev.To == ledger.StateSubscribing || ev.From == ledger.StateSubscribing {
		text = ""
	}
	d.p.emit(ev, text)
}

func (d *demo) phase(name, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	d.p.emit(phaseEvent{"phase", name, detail}, fmt.Sprintf("\n== %s: %s", name, detail))
	d.p.progress("demo: %s…", name)
}

func (d *demo) faults() *mcpsynctest.Transport {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kit
}

// topics name the demo's handbook pages.
var topics = []string{"welcome", "badges", "payroll", "security", "laptops", "travel", "holidays", "benefits", "parking", "wifi", "expenses", "offboarding"}

// title is the text of resource i at revision rev.
func title(i, rev int) string {
	topic := topics[i%len(topics)]
	return fmt.Sprintf("# %s\n\nrevision %d of the %s page.", topic, rev, topic)
}

func demoURI(i int) string {
	return fmt.Sprintf("file:///handbook/%02d-%s.md", i+1, topics[i%len(topics)])
}

func (d *demo) run(ctx context.Context) error {
	d.started = time.Now()
	if err := d.catalogs(ctx); err != nil {
		return err
	}
	if err := d.subscribe(ctx); err != nil {
		if d.client != nil {
			// Its callbacks print: they end before run returns.
			_ = d.client.Close()
		}
		return err
	}
	convergedIn, err := d.scenario(ctx)
	// Closing stops every read and callback, so the report, checked
	// again after it, describes a copy that no longer moves.
	if cerr := d.client.Close(); err == nil && cerr != nil {
		err = wrapf(cerr, "demo close")
	}
	if err != nil && ctx.Err() != nil {
		// Interrupted: show how far it got; the check did not run to
		// its end, so the demo still fails.
		_ = d.report(convergedIn)
		return errors.New("demo interrupted before the local copy could converge")
	}
	if err != nil {
		return err
	}
	return d.report(convergedIn)
}

// scenario runs the fault phases and waits for convergence.
func (d *demo) scenario(ctx context.Context) (time.Duration, error) {
	steps := []func(context.Context) error{d.churn, d.slowRead, d.closeRace, d.deleteAndRecreate}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return 0, err
		}
	}
	return d.converge(ctx)
}

// catalogs scans the same handbook on two servers: one without the snapshot
// extension, whose listing changes while it is walked, and one with it.
func (d *demo) catalogs(ctx context.Context) error {
	d.phase("catalog", "%d paged resources; a plain server and one with the snapshot extension", d.count)
	plain := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "handbook-plain", Version: "1.0.0", PageSize: 4})
	d.srv = mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Name: "handbook", Version: "1.0.0", PageSize: 4, Snapshot: true})
	for i := range d.count {
		plain.Set(demoURI(i), "text/markdown", title(i, 1))
		d.srv.Set(demoURI(i), "text/markdown", title(i, 1))
		d.uris = append(d.uris, demoURI(i))
	}
	// A resource added while the first walk is between pages: the two
	// passes disagree, so the scanner starts over.
	var once sync.Once
	plain.OnPage(func(kind string, page int) {
		if kind == mcpsynctest.KindResources && page == 2 {
			once.Do(func() { plain.Set("file:///handbook/99-late.md", "text/markdown", "added mid-walk") })
		}
	})
	for _, s := range []*mcpsynctest.Server{plain, d.srv} {
		client, err := d.connect(ctx, s, nil)
		if err != nil {
			return err
		}
		cat, err := client.Scan(ctx, mcpsync.KindResources)
		if err == nil {
			ev := newScanEvent(cat)
			d.p.emit(ev, ev.summaryLine())
			_, cerr := cat.Proven(time.Now(), client.Engine().SessionGeneration())
			verdict := "complete: may confirm deletions"
			if errors.Is(cerr, mcpsync.ErrSnapshotUnproven) {
				verdict = "refused for completeness tasks: " + strings.TrimPrefix(cerr.Error(), "mcpsync: ")
			}
			d.p.text("             %s: %s", cat.Kind, verdict)
		}
		client.Close()
		if err != nil {
			return wrapf(err, "demo scan")
		}
	}
	return nil
}

// connect opens a client to s through a fresh fault kit.
func (d *demo) connect(ctx context.Context, s *mcpsynctest.Server, opts *mcpsync.ClientOptions) (*mcpsync.Client, error) {
	var o mcpsync.ClientOptions
	if opts != nil {
		o = *opts
	}
	o.Subject, o.ProtocolVersion, o.RequestTimeout = d.c.subject, d.c.versionPin(), d.c.timeout
	dial := func(context.Context) (transport.Interface, error) {
		kit := mcpsynctest.NewTransport(s.NewInProcessTransport(), d.seed)
		d.mu.Lock()
		d.kit = kit
		d.mu.Unlock()
		return kit, nil
	}
	cctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	client, err := mcpsync.Connect(cctx, dial, &o)
	if err != nil {
		return nil, wrapf(err, "demo connect")
	}
	return client, nil
}

// subscribe connects the syncing client and subscribes every listed URI.
func (d *demo) subscribe(ctx context.Context) error {
	engine, err := mcpsync.NewEngine(&mcpsync.EngineOptions{OnTransition: d.onTransition})
	if err != nil {
		return err
	}
	d.engine = engine
	// Revalidation every 200ms is what heals lost notifications here; a
	// real deployment revalidates in minutes.
	d.client, err = d.connect(ctx, d.srv, &mcpsync.ClientOptions{
		Engine: engine, RevalidateEvery: 200 * time.Millisecond, PollEvery: 200 * time.Millisecond,
		Seed: uint64(d.seed), OnOutcome: d.onOutcome,
	})
	if err != nil {
		return err
	}
	caps := d.client.Capabilities()
	d.phase("subscribe", "protocol %s, server %s %s: subscribe=%v listChanged=%v snapshot=%v",
		caps.ProtocolVersion, caps.Server.Name, caps.Server.Version, caps.Subscribe, caps.ListChanged, caps.SnapshotList)
	modes := map[ledger.SubscriptionMode]int{}
	for _, uri := range d.uris {
		sub, err := d.client.Subscribe(ctx, uri)
		if err != nil {
			return wrapf(err, "subscribe %s", uri)
		}
		modes[sub.Mode]++
	}
	if err := d.waitFor(ctx, "initial versions", func() bool { return d.served() == len(d.uris) }); err != nil {
		return err
	}
	d.p.text("             %d subscriptions (%d push, %d poll), %d versions served", len(d.uris), modes[ledger.ModePush], modes[ledger.ModePoll], d.served())
	return nil
}

// served counts the URIs whose Lookup succeeds.
func (d *demo) served() int {
	n := 0
	for _, uri := range d.uris {
		if _, err := d.client.Lookup(uri); err == nil {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, ctx ends or the convergence budget
// runs out. The demo is a program, not a test: real time is its medium.
func (d *demo) waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.NewTimer(d.budget)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo interrupted while waiting for %s", what)
		case <-deadline.C:
			return fmt.Errorf("demo: %s did not happen within %v", what, d.budget)
		case <-tick.C:
			d.pullOutbox()
		}
	}
	d.pullOutbox()
	return nil
}

// churn edits resources three times while the kit drops, duplicates and
// reorders their notifications.
func (d *demo) churn(ctx context.Context) error {
	kit := d.faults()
	d.phase("churn", "3 rounds of edits; 30%% of notifications dropped, 30%% duplicated, some reordered")
	kit.SetDropRate(0.3)
	kit.SetDuplicateRate(0.3)
	edited := min(8, len(d.uris)-4) // the last ones are for the delete phase
	for round := 2; round <= 4; round++ {
		for i := range edited {
			if i%3 == round%3 {
				kit.ReorderNext(d.uris[i])
			}
			d.srv.Set(d.uris[i], "text/markdown", title(i, round))
		}
		// Let the round's reads land before the next round, so that every
		// round is a separate change rather than one coalesced edit.
		select {
		case <-ctx.Done():
			return errors.New("demo interrupted")
		case <-time.After(150 * time.Millisecond):
		}
		d.pullOutbox()
	}
	f := d.faultCounts()
	d.p.text("             so far the kit dropped %d, duplicated %d and reordered %d notifications", f["dropped"], f["duplicated"], f["reordered"])
	return nil
}

// slowRead sends read A, holds its answer, lets the resource change and read
// B pass, then releases A: the older answer arrives last and is refused.
func (d *demo) slowRead(ctx context.Context) error {
	uri := d.uris[0]
	d.phase("slow read", "read A of %s is held; the resource changes; read B overtakes it", uri)
	before := d.engine.StaleCounts()[mcpsync.ReasonStaleOrdinal]
	hold, a, err := d.heldRead(ctx, uri)
	if err != nil {
		return err
	}
	d.srv.Set(uri, "text/markdown", title(0, 5))
	// B may itself be refused if a notification's read overtook it: then
	// that read is the newer one, and A is still the older answer.
	if _, err := d.client.Read(ctx, uri); err != nil && !errors.Is(err, mcpsync.ErrRefused) {
		hold.Release()
		<-a
		return wrapf(err, "read B")
	}
	hold.Release()
	<-a
	return d.waitFor(ctx, "the held read's refusal", func() bool {
		return d.engine.StaleCounts()[mcpsync.ReasonStaleOrdinal] > before
	})
}

// heldRead sends a read of uri whose answer the fault kit holds, and waits
// until the server has answered it; a closes when the read is done.
func (d *demo) heldRead(ctx context.Context, uri string) (hold *mcpsynctest.Hold, a chan struct{}, err error) {
	hold = d.faults().HoldNext("resources/read", uri)
	a = make(chan struct{})
	go func() {
		defer close(a)
		_, _ = d.client.Read(context.WithoutCancel(ctx), uri)
	}()
	if err := d.waitHold(ctx, hold); err != nil {
		<-a
		return nil, nil, err
	}
	return hold, a, nil
}

func (d *demo) waitHold(ctx context.Context, hold *mcpsynctest.Hold) error {
	timer := time.NewTimer(d.budget)
	defer timer.Stop()
	select {
	case <-hold.Arrived():
		return nil
	case <-ctx.Done():
		hold.Release()
		return errors.New("demo interrupted")
	case <-timer.C:
		hold.Release()
		return errors.New("demo: the held read never reached the server")
	}
}

// closeRace holds a read, unsubscribes while it is in flight, then releases
// it: its answer is audit only. The URI is then subscribed again, as a new
// generation.
func (d *demo) closeRace(ctx context.Context) error {
	uri := d.uris[1]
	d.phase("close race", "a read of %s is in flight when the unsubscribe begins", uri)
	before := d.engine.StaleCounts()[mcpsync.ReasonStaleAfterClose]
	hold, a, err := d.heldRead(ctx, uri)
	if err != nil {
		return err
	}
	d.srv.Set(uri, "text/markdown", title(1, 5))
	if _, err := d.client.Unsubscribe(ctx, uri); err != nil {
		hold.Release()
		<-a
		return wrapf(err, "unsubscribe %s", uri)
	}
	hold.Release()
	<-a
	if err := d.waitFor(ctx, "the late answer's refusal", func() bool {
		return d.engine.StaleCounts()[mcpsync.ReasonStaleAfterClose] > before
	}); err != nil {
		return err
	}
	sub, err := d.client.Subscribe(ctx, uri)
	if err != nil {
		return wrapf(err, "subscribe %s again", uri)
	}
	d.p.text("             subscribed again: generation %d, %s", sub.SubscriptionGeneration, sub.Mode)
	return nil
}

// deleteAndRecreate deletes one resource for good, deletes another and
// brings it back once the client saw it gone, and recreates a third in one
// step; list reconciliation with the proven catalog settles the first two.
func (d *demo) deleteAndRecreate(ctx context.Context) error {
	n := len(d.uris)
	gone, back, reborn := d.uris[n-1], d.uris[n-2], d.uris[n-3]
	d.phase("delete", "%s deleted; %s deleted and restored; %s recreated in one step", gone, back, reborn)
	d.srv.Delete(gone)
	d.srv.Delete(back)
	d.srv.Recreate(reborn, title(n-3, 9)+"\n\n(new incarnation)")
	pending := func(uri string) bool {
		sub, err := d.engine.Subscription(uri)
		return err == nil && sub.State == ledger.StateTombstonePending
	}
	if err := d.waitFor(ctx, "the deletions to be seen", func() bool { return pending(gone) && pending(back) }); err != nil {
		return err
	}
	d.srv.Set(back, "text/markdown", title(n-2, 9)+"\n\n(restored)")
	return nil
}

// converge waits until the local copy equals the server, reconciling
// pending tombstones against fresh catalogs as it goes.
func (d *demo) converge(ctx context.Context) (time.Duration, error) {
	d.phase("converge", "revalidation reads every 200ms heal lost notifications; list reconciliation confirms deletions")
	start := time.Now()
	deadline := time.NewTimer(d.budget)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		d.pullOutbox()
		if d.reconcile(ctx) && len(d.mismatches()) == 0 {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), errors.New("demo interrupted")
		case <-deadline.C:
			// Not an error yet: the report shows what differs and fails.
			return time.Since(start), nil
		case <-tick.C:
		}
	}
}

// reconcile scans when a subscription waits for list reconciliation and
// hands the catalog to the client; it reports whether none is waiting.
func (d *demo) reconcile(ctx context.Context) bool {
	waiting, settled := false, true
	for sub, err := range d.engine.Subscriptions() {
		if err != nil {
			continue
		}
		if sub.State == ledger.StateTombstonePending || sub.State == ledger.StateReconciliationRequired {
			waiting = true
		}
		// A deleted resource between reads is not yet confirmed either.
		if _, ok := d.srv.Text(sub.URI); !ok && sub.CloseEpoch == 0 && sub.State != ledger.StateTombstoned {
			settled = false
		}
	}
	if !waiting {
		return settled
	}
	cat, err := d.client.Scan(ctx, mcpsync.KindResources)
	if err != nil {
		d.p.emit(newErrorEvent(err), newErrorEvent(err).String())
		return false
	}
	ev := newScanEvent(cat)
	d.p.emit(ev, ev.summaryLine())
	rec, err := d.client.Reconcile(cat)
	if err != nil {
		d.p.emit(newErrorEvent(err), newErrorEvent(err).String())
		return false
	}
	d.p.text("reconcile    present %v  tombstoned %v  deferred %v", rec.Present, rec.Tombstoned, rec.Deferred)
	return false
}

// pullOutbox prints and acknowledges new outbox entries, as a downstream
// consumer would apply them.
func (d *demo) pullOutbox() {
	d.mu.Lock()
	after := d.outbox
	d.mu.Unlock()
	entries, err := d.engine.PullOutbox(after, 0)
	if err != nil || len(entries) == 0 {
		return
	}
	for _, e := range entries {
		ev := newOutboxEvent(e)
		text := ev.String()
		if ev.Event == "change" {
			text = "" // one per accepted version: the version line said it
		}
		d.p.emit(ev, text)
	}
	last := entries[len(entries)-1].Seq
	_ = d.engine.Acknowledge(context.Background(), mcpsync.DefaultConsumer, last)
	d.mu.Lock()
	d.outbox = last
	for _, e := range entries {
		if e.Reason == ledger.InvalidateTombstoned {
			d.tombs++
		} else {
			d.inval++
		}
	}
	d.mu.Unlock()
}

// mismatches compares the local copy with the server: a live resource must
// be served with the server's text; a deleted one must not be served.
func (d *demo) mismatches() []string {
	var out []string
	for _, uri := range d.uris {
		want, live := d.srv.Text(uri)
		entry, err := d.client.Lookup(uri)
		switch {
		case live && err != nil:
			out = append(out, fmt.Sprintf("%s: not served (%v)", uri, err))
		case live && (len(entry.Contents) != 1 || entry.Contents[0].Text != want):
			out = append(out, fmt.Sprintf("%s: local copy differs from the server", uri))
		case !live && err == nil:
			out = append(out, fmt.Sprintf("%s: deleted on the server but still served", uri))
		}
	}
	return out
}

func (d *demo) faultCounts() map[string]int {
	counts := map[string]int{"dropped": 0, "duplicated": 0, "reordered": 0, "heldReads": 0}
	for _, line := range d.faults().Log() {
		switch {
		case strings.Contains(line, ": drop "):
			counts["dropped"]++
		case strings.Contains(line, ": duplicate "):
			counts["duplicated"]++
		case strings.Contains(line, "for reordering"):
			counts["reordered"]++
		case strings.Contains(line, ": hold response to resources/read"):
			counts["heldReads"]++
		}
	}
	return counts
}

// report prints the final table and summary and fails unless the local
// copy equals the server.
func (d *demo) report(convergedIn time.Duration) error {
	d.pullOutbox()
	d.p.done()
	d.phase("result", "the local copy against the server")
	bad := d.mismatches()
	sum := demoSummary{
		Event: "summary", Protocol: d.client.Capabilities().ProtocolVersion, Seed: d.seed,
		StaleByReason: d.engine.StaleCounts(), Faults: d.faultCounts(),
	}
	var rows []checkEvent
	d.mu.Lock()
	for _, uri := range d.uris {
		s := d.statsOf(uri)
		sub, _ := d.engine.Subscription(uri)
		_, live := d.srv.Text(uri)
		row := checkEvent{Event: "check", URI: uri, Live: live, State: sub.State, Served: "yes",
			Generation: sub.SubscriptionGeneration, Accepted: s.accepted, Refused: s.refused}
		entry, err := d.client.Lookup(uri)
		if err != nil {
			row.Served = strings.TrimPrefix(err.Error(), "mcpsync: ")
		} else {
			row.Ordinal = entry.Version.ReadOrdinal
		}
		row.OK = !slices.ContainsFunc(bad, func(m string) bool { return strings.HasPrefix(m, uri+":") })
		rows = append(rows, row)
		sum.VersionsAccepted += s.accepted
		sum.Unchanged += s.unchanged
		sum.NotificationReads += s.notificationReads
		sum.Notifications += sub.LastNotificationSeq
		if live {
			sum.Live++
		} else {
			sum.Deleted++
		}
	}
	sum.Tombstones, sum.Invalidations = d.tombs, d.inval
	d.mu.Unlock()

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "URI\tSTATE\tSERVED\tGEN/ORDINAL\tACCEPTED\tREFUSED (WHY)\tLOCAL = SERVER")
	for _, r := range rows {
		refused := map[mcpsync.StaleReason]uint64{}
		for k, v := range r.Refused {
			refused[k] = uint64(v)
		}
		verdict := "yes"
		switch {
		case !r.OK:
			verdict = "NO"
		case !r.Live:
			verdict = "yes (deleted, not served)"
		}
		ord := "-"
		if r.Ordinal != 0 {
			ord = fmt.Sprintf("%d/%d", r.Generation, r.Ordinal)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.URI, r.State, r.Served, ord, r.Accepted, reasons(refused), verdict)
		d.p.emit(r, "")
	}
	tw.Flush()
	d.p.text("%s", strings.TrimRight(table.String(), "\n"))

	sum.ElapsedMs = time.Since(d.started).Milliseconds()
	sum.ConvergedMs = convergedIn.Milliseconds()
	sum.Mismatches = len(bad)
	sum.OK = len(bad) == 0
	if sum.Notifications > 0 {
		sum.ReadsPerNotification = float64(sum.NotificationReads) / float64(sum.Notifications)
	}
	d.p.emit(sum, fmt.Sprintf(`
versions accepted %d, unchanged %d; outbox: %d invalidations, %d tombstones
stale receipts by reason (reads and notifications refused): %s
faults injected: %d notifications dropped, %d duplicated, %d reordered; %d reads held
reads per notification: %.2f (%d fenced reads for %d notifications seen)
%s in %v (protocol %s, seed %d): %d live resources equal the server, %d deleted not served, %d mismatches`,
		sum.VersionsAccepted, sum.Unchanged, sum.Invalidations, sum.Tombstones,
		reasons(sum.StaleByReason),
		sum.Faults["dropped"], sum.Faults["duplicated"], sum.Faults["reordered"], sum.Faults["heldReads"],
		sum.ReadsPerNotification, sum.NotificationReads, sum.Notifications,
		map[bool]string{true: "converged", false: "NOT converged"}[sum.OK], convergedIn.Round(time.Millisecond),
		sum.Protocol, sum.Seed, sum.Live-d.countBad(bad, true), sum.Deleted-d.countBad(bad, false), len(bad)))
	if len(bad) > 0 {
		return fmt.Errorf("demo: the local copy differs from the server: %s", strings.Join(bad, "; "))
	}
	return nil
}

// countBad counts the mismatches of live (or deleted) resources.
func (d *demo) countBad(bad []string, live bool) int {
	n := 0
	for _, uri := range d.uris {
		if _, isLive := d.srv.Text(uri); isLive != live {
			continue
		}
		if slices.ContainsFunc(bad, func(m string) bool { return strings.HasPrefix(m, uri+":") }) {
			n++
		}
	}
	return n
}
