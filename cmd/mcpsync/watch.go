package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// uriList collects a repeatable --uri flag.
type uriList []string

func (l *uriList) String() string { return strings.Join(*l, ",") }

func (l *uriList) Set(v string) error {
	if v == "" {
		return errors.New("empty URI")
	}
	*l = append(*l, v)
	return nil
}

// watchKinds are the kinds of event watch prints, as --events names them.
var watchKinds = []string{"session", "scan", "subscribed", "state", "version", "stale", "change", "delete", "error", "took", "released", "summary"}

// eventKinds is --events: a comma list of watchKinds.
type eventKinds map[string]bool

func (k *eventKinds) String() string {
	if k == nil || *k == nil {
		return ""
	}
	return strings.Join(slices.Sorted(maps.Keys(*k)), ",")
}

func (k *eventKinds) Set(v string) error {
	*k = eventKinds{}
	for kind := range strings.SplitSeq(v, ",") {
		if !slices.Contains(watchKinds, kind) {
			return fmt.Errorf("unknown event kind %q (kinds: %s)", kind, strings.Join(watchKinds, ","))
		}
		(*k)[kind] = true
	}
	return nil
}

// sessionEvent describes the session watch runs on.
type sessionEvent struct {
	Event             string                `json:"event"`
	ProtocolVersion   string                `json:"protocolVersion"`
	Server            ledger.Implementation `json:"server"`
	Subscribe         bool                  `json:"subscribe"`
	ListChanged       bool                  `json:"listChanged"`
	SnapshotList      bool                  `json:"snapshotList"`
	SessionGeneration uint64                `json:"sessionGeneration"`
	// Reconnects counts the sessions opened after the first: 0 for the
	// first session event, then one more with each healed loss.
	Reconnects uint64 `json:"reconnects"`
	Note       string `json:"note,omitempty"`
}

func newSessionEvent(caps ledger.CapabilityReceipt, reconnects uint64, note string) sessionEvent {
	return sessionEvent{"session", caps.ProtocolVersion, caps.Server, caps.Subscribe, caps.ListChanged, caps.SnapshotList, caps.SessionGeneration, reconnects, note}
}

func (e sessionEvent) String() string {
	s := fmt.Sprintf("session      %s %s  protocol %s  subscribe=%v listChanged=%v snapshot=%v  generation %d",
		e.Server.Name, e.Server.Version, e.ProtocolVersion, e.Subscribe, e.ListChanged, e.SnapshotList, e.SessionGeneration)
	if e.Note != "" {
		s += "\n             " + e.Note
	}
	return s
}

// subscribedEvent reports a subscription watch opened.
type subscribedEvent struct {
	Event                  string                  `json:"event"`
	URI                    string                  `json:"uri"`
	Mode                   ledger.SubscriptionMode `json:"mode"`
	SubscriptionGeneration uint64                  `json:"subscriptionGeneration"`
	StalenessBoundMs       int64                   `json:"stalenessBoundMs"`
}

// watchSummary is watch's last line.
type watchSummary struct {
	Event                string                         `json:"event"`
	ElapsedMs            int64                          `json:"elapsedMs"`
	Interrupted          bool                           `json:"interrupted"`
	Subscriptions        int                            `json:"subscriptions"`
	VersionsAccepted     int                            `json:"versionsAccepted"`
	Unchanged            int                            `json:"unchanged"`
	TombstonesPending    int                            `json:"tombstonesPending"`
	StaleByReason        map[mcpsync.StaleReason]uint64 `json:"staleByReason"`
	Invalidations        int                            `json:"invalidations"`
	Tombstones           int                            `json:"tombstones"`
	Notifications        uint64                         `json:"notifications"`
	NotificationReads    int                            `json:"notificationReads"`
	ReadsPerNotification float64                        `json:"readsPerNotification"`
	Reconnects           uint64                         `json:"reconnects"`
	FailedReads          uint64                         `json:"failedReads"`
	// DegradedMs is the time the session was not up (lost, healing or
	// failed), summed over every loss.
	DegradedMs int64 `json:"degradedMs"`
}

func (s watchSummary) String() string {
	how := "ended"
	if s.Interrupted {
		how = "interrupted"
	}
	return fmt.Sprintf(`summary      %s after %v, %d subscription(s)
  versions accepted   %d (unchanged %d, tombstone pending %d)
  outbox              %d invalidation(s), %d tombstone(s)
  stale receipts      %s
  reads/notification  %s
  session             %d reconnect(s), %d failed read(s), degraded %v`,
		how, (time.Duration(s.ElapsedMs) * time.Millisecond).String(), s.Subscriptions,
		s.VersionsAccepted, s.Unchanged, s.TombstonesPending, s.Invalidations, s.Tombstones,
		reasons(s.StaleByReason), s.perNotification(), s.Reconnects, s.FailedReads,
		(time.Duration(s.DegradedMs) * time.Millisecond).String())
}

func (s watchSummary) perNotification() string {
	if s.Notifications == 0 {
		return fmt.Sprintf("- (no notifications; %d read(s) triggered by one)", s.NotificationReads)
	}
	return fmt.Sprintf("%.2f (%d fenced reads for %d notifications)", s.ReadsPerNotification, s.NotificationReads, s.Notifications)
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var uris uriList
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	c.register(fs)
	c.registerLedger(fs)
	fs.Var(&uris, "uri", "URI to subscribe (repeatable)")
	all := fs.Bool("all", false, "scan resources and subscribe every listed URI, and what later scans list")
	rescan := fs.Duration("rescan", 0, "interval of the kept scan of resources: bounds how late a new or deleted resource is found, "+
		"not how late changed content is seen (--poll) (0: the library's, half of its 5m staleness bound)")
	deletion := fs.String("deletion", "", "evidence that confirms a deletion: proven (a snapshot-proven listing), corroborated (also a clean listing and a second not-found read) or unlisted (also absence from the kept scans for two --rescan intervals, for servers whose reads never say not found); empty: the library's default, corroborated where the server cannot prove")
	duration := fs.Duration("duration", 0, "how long to watch; 0 means until interrupted")
	revalidate := fs.Duration("revalidate", 0, "revalidation read interval of every subscription (0: the library's 5m)")
	poll := fs.Duration("poll", 0, "read interval where the server cannot subscribe: bounds how late changed content is seen there; "+
		"new and deleted resources are found by --rescan (0: the library's 30s)")
	var kinds eventKinds
	fs.Var(&kinds, "events", "comma list of the kinds of event to print: "+strings.Join(watchKinds, ",")+
		" (default: every kind; text leaves state out)")
	pingEvery := fs.Duration("ping-every", 0, "heartbeat interval that finds a dead or hung server (0: the library's 15s)")
	attempts := fs.Int("reconnect-attempts", 0, "failed reconnect attempts after which watch gives up (0: no limit)")
	maxElapsed := fs.Duration("reconnect-max-elapsed", 0, "time after a loss at which watch gives up reconnecting (0: no limit)")
	positional, err := parse(fs, &c, args)
	if err != nil {
		return helpOrUsage(err, fs, "watch [flags] [URI...] [--all] (--url URL | -- command args...)", stdout)
	}
	// URIs are arguments, as read takes its one; --uri says the same. Each
	// must be a URI, and two spellings of one (one key) are one
	// subscription.
	for _, u := range positional {
		if err := uris.Set(u); err != nil {
			return usagef("watch: %v", err)
		}
	}
	seen := map[string]bool{}
	var unique uriList
	for _, u := range uris {
		key, err := mcpsync.NormalizeURI(u)
		if err != nil {
			return usagef("watch: %v", err)
		}
		if !seen[key] {
			seen[key] = true
			unique = append(unique, u)
		}
	}
	uris = unique
	switch {
	case len(uris) == 0 && !*all:
		return usagef("watch needs URIs (arguments or --uri U) or --all")
	case *duration < 0 || *revalidate < 0 || *poll < 0 || *pingEvery < 0 || *attempts < 0 || *maxElapsed < 0 || *rescan < 0:
		return usagef("--duration, --revalidate, --poll, --ping-every, --rescan and the --reconnect flags must not be negative")
	}
	policy := mcpsync.DeletionPolicy(*deletion)
	switch policy {
	case mcpsync.DeletionDefault, mcpsync.DeletionProvenOnly, mcpsync.DeletionCorroborated, mcpsync.DeletionUnlisted:
	default:
		return usagef("watch: --deletion %q: want proven, corroborated or unlisted", *deletion)
	}
	if err := c.validate(true); err != nil {
		return err
	}
	w := &watcher{c: &c, p: newPrinter(c.json, stdout, stderr), all: *all, duration: *duration, rescan: *rescan}
	w.p.kinds = kinds
	if kinds == nil && !c.json {
		// State transitions are most of the lines and the version, stale
		// and delete lines tell their story; text leaves them out.
		w.p.kinds = eventKinds{}
		for _, k := range watchKinds {
			w.p.kinds[k] = k != "state"
		}
	}
	return w.run(ctx, uris, mcpsync.ClientOptions{
		RevalidateEvery: *revalidate, PollEvery: *poll, PingEvery: *pingEvery,
		// A ping gets the heartbeat interval to answer, at most --timeout.
		PingTimeout: min(*pingEvery, c.timeout),
		Reconnect:   mcpsync.ReconnectPolicy{MaxAttempts: *attempts, MaxElapsed: *maxElapsed},
		Deletion:    policy,
		// Absent from the kept scans for two of their intervals.
		UnlistedFor: 2 * *rescan,
	})
}

type watcher struct {
	c        *common
	p        *printer
	all      bool
	duration time.Duration
	rescan   time.Duration // KeepScanOptions.Every

	conn   *connection
	engine *mcpsync.Engine

	// fatal receives the one failure that ends the watch: reconnecting gave
	// up, or a framing violation ends every session the server gives.
	fatal chan error

	// Written by the watch loop only (observe).
	health        mcpsync.Health
	notifications map[string]notificationCount

	mu   sync.Mutex // protects subs and the counters below
	subs []string   // URIs watch subscribed, in order
	outcomeCounts
	invalidations int
	tombstones    int
	outbox        uint64 // last outbox entry shown
	// framingLosses counts sessions in a row ended by a framing violation
	// with no read accepted between them.
	framingLosses int
}

// notificationCount is what watch has seen of one URI's notifications: the
// engine counts per subscription generation and starts again at 0 with each
// new one, so the counts of generations gone are carried.
type notificationCount struct {
	gen, seq, carried uint64
}

// framingLossesToGiveUp is how many sessions in a row a framing violation
// may end before watch calls it a server that cannot heal: a reconnect
// gets a fresh session, and if that one breaks the same way, more will.
const framingLossesToGiveUp = 3

func (w *watcher) onOutcome(out mcpsync.Outcome) {
	w.mu.Lock()
	w.add(out)
	if out.Accepted {
		w.framingLosses = 0
	}
	w.mu.Unlock()
	w.p.emit(outcomeEvent(out))
}

// onError reports every failure the client heals on its own as an event,
// and ends the watch on those it cannot.
func (w *watcher) onError(err error) {
	w.p.emit(newErrorEvent(err), newErrorEvent(err).String())
	var conn *mcpsync.ConnectionError
	switch {
	case errors.Is(err, mcpsync.ErrReconnectGaveUp):
		w.fail(err)
	case errors.As(err, &conn) && errors.Is(err, mcpsync.ErrFramingViolation):
		w.mu.Lock()
		w.framingLosses++
		n := w.framingLosses
		w.mu.Unlock()
		if n >= framingLossesToGiveUp {
			w.fail(wrapf(err, "%d sessions in a row ended on the server's framing", n))
		}
	}
}

func (w *watcher) fail(err error) {
	select {
	case w.fatal <- err:
	default: // the first failure is the one reported
	}
}

// observe follows the client's health and the subscriptions' notification
// counts; it prints a session event for every healed loss.
func (w *watcher) observe() {
	client := w.conn.client
	h, prev := client.Health(), w.health
	w.health = h
	if h.State == mcpsync.ConnectionUp && h.SessionGeneration != prev.SessionGeneration {
		ses := newSessionEvent(client.Capabilities(), h.Reconnects, "reconnected")
		w.p.emit(ses, ses.String())
	}
	for sub, err := range w.engine.Subscriptions() {
		if err != nil {
			continue
		}
		n := w.notifications[sub.URI]
		if sub.SubscriptionGeneration != n.gen {
			n.carried += n.seq
			n.gen, n.seq = sub.SubscriptionGeneration, 0
		}
		n.seq = max(n.seq, sub.LastNotificationSeq)
		w.notifications[sub.URI] = n
	}
}

// degradedFor is the time the session was not up, the current loss
// included.
func (w *watcher) degradedFor() time.Duration {
	return w.conn.client.Health().Degraded
}

func (w *watcher) onTransition(t mcpsync.Transition) {
	ev := newStateEvent(t)
	text := ev.String()
	if ev.readStep() {
		text = ""
	}
	w.p.emit(ev, text)
}

func (w *watcher) run(ctx context.Context, uris []string, opts mcpsync.ClientOptions) (err error) {
	started := time.Now()
	engine, closeLedger, err := w.c.newEngine(ctx, mcpsync.EngineOptions{OnTransition: w.onTransition})
	if err != nil {
		return err
	}
	// The ledger closes last: the final outbox pull and the summary read it.
	defer func() {
		if cerr := closeLedger(); err == nil {
			err = cerr
		}
	}()
	w.engine = engine
	if w.c.ledger != "" {
		// What earlier runs appended is for the ledger's consumers; watch
		// shows what this run appends.
		st, err := engine.OutboxState(ctx)
		if err != nil {
			return wrapf(err, "ledger %s", w.c.ledger)
		}
		w.outbox = st.Last
	}
	w.fatal = make(chan error, 1)
	w.notifications = make(map[string]notificationCount)
	opts.Engine, opts.OnOutcome, opts.OnError = engine, w.onOutcome, w.onError
	// On a shared ledger the shard decides what this worker watches.
	opts.NoResume = w.c.shared != nil
	// Close ends a stdio server within --timeout, however it takes its end.
	opts.CloseTimeout = w.c.timeout
	listen := false
	w.conn, err = w.c.open(ctx, opts, &listen)
	if err != nil {
		return err
	}
	client := w.conn.client
	note := ""
	caps := client.Capabilities()
	if w.c.url != "" && w.c.protocol == "auto" && mcpsync.EraOf(caps.ProtocolVersion) == mcpsync.EraLegacy {
		// A legacy session over streamable HTTP notifies on the standalone
		// GET stream only, which mcp-go opens with continuous listening:
		// reconnect with it before anything is subscribed.
		listen = true
		if err := w.conn.bounded(ctx, w.c.timeout, "reconnect", client.Reconnect); err != nil {
			_ = w.conn.close()
			return err
		}
		caps = client.Capabilities()
		note = "legacy revision over streamable HTTP: reconnected with the standalone GET stream for notifications"
	}
	ses := newSessionEvent(caps, 0, note)
	w.p.emit(ses, ses.String())
	w.health = client.Health()

	interrupted, err := w.watch(ctx, uris)
	w.observe()
	// Ctrl-C cancelled ctx; unsubscribing still gets --timeout of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.c.timeout)
	defer cancel()
	subs := w.subscribed()
	w.p.progress("unsubscribing %d URI(s)…", len(subs))
	for _, uri := range subs {
		if _, uerr := client.Unsubscribe(sctx, uri); uerr != nil {
			w.p.emit(newErrorEvent(uerr), newErrorEvent(uerr).String())
		}
	}
	closeErr := w.conn.close()
	if closeErr != nil && !errors.Is(closeErr, context.Canceled) {
		// Reported, not a failure of the watch: a stdio server that
		// ignores its stdin closing is ended by a signal, and its exit
		// status says so (server-everything 2025.9.25 does this).
		ev := newErrorEvent(wrapf(closeErr, "close"))
		w.p.emit(ev, ev.String())
	}
	w.pullOutbox()
	w.p.done()
	sum := w.summary(time.Since(started), interrupted)
	w.p.emit(sum, sum.String())
	return err
}

// watch subscribes and streams events until the duration ends or ctx is
// cancelled; it reports whether it was interrupted. A kept scan of the
// server's resources runs all along (when the server lists any): it
// confirms deletions, and with --all subscribes what appears.
func (w *watcher) watch(ctx context.Context, uris []string) (bool, error) {
	client := w.conn.client
	var next time.Time
	if w.all {
		cat, err := w.scan(ctx)
		if ctx.Err() != nil {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for d := range cat.Items() {
			uris = append(uris, d.URI)
		}
		next = cat.NextReviewAt
		if w.rescan > 0 {
			next = cat.MeasuredAt.Add(w.rescan)
		}
	}
	if w.c.shared != nil {
		stop, err := w.shard(ctx, uris)
		if err != nil {
			return false, err
		}
		defer stop()
	} else if err := w.subscribe(ctx, uris); ctx.Err() != nil {
		return true, nil
	} else if err != nil {
		return false, err
	}
	if client.Capabilities().Resources {
		stop, err := client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: w.all && w.c.shared == nil, After: next, Every: w.rescan, OnScan: w.onScan})
		if err != nil {
			return false, err
		}
		defer stop()
	}
	var end <-chan time.Time
	if w.duration > 0 {
		timer := time.NewTimer(w.duration)
		defer timer.Stop()
		end = timer.C
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-end:
			return false, nil
		case err := <-w.fatal:
			return false, err
		case <-tick.C:
		}
		w.observe()
		w.pullOutbox()
		w.mu.Lock()
		accepted, stale, n := w.accepted, 0, len(w.subs)
		w.mu.Unlock()
		for _, n := range w.engine.StaleCounts() {
			stale += int(n)
		}
		w.p.progress("watching %d URI(s): %d versions accepted, %d stale receipts", n, accepted, stale)
	}
}

// shard splits the URIs (with --all, every URI the server lists, scanned
// again each minute) between the workers sharing the PostgreSQL ledger, and
// keeps this worker's share subscribed until stop, which lets it go.
func (w *watcher) shard(ctx context.Context, uris []string) (stop func(), err error) {
	list := func(ctx context.Context) ([]string, error) {
		if !w.all {
			return uris, nil
		}
		cat, err := w.conn.client.Scan(ctx, mcpsync.KindResources)
		if err != nil {
			return nil, err
		}
		var out []string
		for d := range cat.Items() {
			out = append(out, d.URI)
		}
		return out, nil
	}
	s, err := pgledger.NewShard(w.c.shared, w.conn.client, &pgledger.ShardOptions{
		URIs:    list,
		OnError: w.onError,
		OnChange: func(uri string, owned bool) {
			ev := shardEvent{Event: "released", URI: uri, Worker: w.c.shared.Worker().String()}
			if owned {
				ev.Event = "took"
			}
			w.p.emit(ev, fmt.Sprintf("%-12s %s  worker %s", ev.Event, uri, ev.Worker))
		},
	})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(sctx)
	}()
	return func() { cancel(); <-done }, nil
}

// shardEvent says this worker took a URI's lease or let it go.
type shardEvent struct {
	Event  string `json:"event"`
	URI    string `json:"uri"`
	Worker string `json:"worker"`
}

// onScan reports what a kept scan found and did; its failures reach
// onError as well, where they are reported.
func (w *watcher) onScan(rep mcpsync.ScanReport) {
	if rep.Catalog.Schema != "" {
		ev := newScanEvent(rep.Catalog)
		w.p.emit(ev, ev.summaryLine())
	}
	rec := rep.Reconciliation
	if w.p.wants("scan") && len(rec.Present)+len(rec.Tombstoned)+len(rec.Corroborating)+len(rec.Missing)+len(rec.Deferred) > 0 {
		w.p.text("reconcile    present %v  tombstoned %v  corroborating %v  missing %v  deferred %v",
			rec.Present, rec.Tombstoned, rec.Corroborating, rec.Missing, rec.Deferred)
	}
	for _, sub := range rep.Subscribed {
		w.subscribed1(sub)
	}
}

func (w *watcher) scan(ctx context.Context) (mcpsync.Catalog, error) {
	w.p.progress("scanning resources…")
	cat, err := w.conn.client.Scan(ctx, mcpsync.KindResources)
	if cat.Schema != "" {
		ev := newScanEvent(cat)
		w.p.emit(ev, ev.summaryLine())
	}
	if err != nil {
		return cat, wrapf(err, "scan")
	}
	return cat, nil
}

// subscribe opens a subscription for each URI not yet watched. A URI the
// server refuses is reported and skipped; watch fails only if none is left.
func (w *watcher) subscribe(ctx context.Context, uris []string) error {
	var failed []error
	for _, uri := range uris {
		if slices.Contains(w.subscribed(), uri) {
			continue
		}
		sub, err := w.conn.client.Subscribe(ctx, uri)
		if err != nil {
			err = wrapf(err, "subscribe %s", uri)
			w.p.emit(newErrorEvent(err), newErrorEvent(err).String())
			if !errors.Is(err, mcpsync.ErrNotFound) {
				failed = append(failed, err)
				continue
			}
			// Not there yet: subscribed all the same, and read once it is.
		}
		w.subscribed1(sub)
	}
	if len(w.subscribed()) == 0 && len(failed) > 0 {
		return errors.Join(failed...)
	}
	return nil
}

// subscribed returns the URIs watch subscribed.
func (w *watcher) subscribed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.subs)
}

// subscribed1 records and reports one subscription watch opened.
func (w *watcher) subscribed1(sub mcpsync.Subscription) {
	uri := sub.URI
	if sub.RawURI != "" {
		uri = sub.RawURI
	}
	w.mu.Lock()
	w.subs = append(w.subs, uri)
	w.mu.Unlock()
	bound := time.Duration(sub.StalenessBoundMs) * time.Millisecond
	w.p.emit(subscribedEvent{"subscribed", sub.URI, sub.Mode, sub.SubscriptionGeneration, sub.StalenessBoundMs},
		fmt.Sprintf("subscribed   %s  %s  generation %d  staleness bound %v", sub.URI, sub.Mode, sub.SubscriptionGeneration, bound))
}

// pullOutbox emits the outbox entries appended since the last pull. In
// memory, watch is the outbox's one consumer and acknowledges them, so the
// outbox does not grow. On a --ledger file it only shows them: they are
// for the ledger's consumers, and an acknowledgement by watch would let the
// ledger discard them before a consumer that registers later saw them.
func (w *watcher) pullOutbox() {
	w.mu.Lock()
	after := w.outbox
	w.mu.Unlock()
	entries, err := w.engine.PullOutbox(after, 0)
	if gap, ok := errors.AsType[*ledger.OutboxGapError](err); ok {
		// The retention bound overtook the watch: say so once and go on
		// after the entries lost, or every tick would say it again.
		w.p.emit(newErrorEvent(err), newErrorEvent(err).String())
		after = gap.Through
		w.mu.Lock()
		w.outbox = after
		w.mu.Unlock()
		entries, err = w.engine.PullOutbox(after, 0)
	}
	if err != nil {
		w.p.emit(newErrorEvent(err), newErrorEvent(err).String())
		return
	}
	if len(entries) == 0 {
		return
	}
	for _, e := range entries {
		ev := newOutboxEvent(e)
		w.p.emit(ev, ev.String())
	}
	last := entries[len(entries)-1].Seq
	if w.c.ledger == "" {
		if err := w.engine.Acknowledge(context.Background(), mcpsync.DefaultConsumer, last); err != nil {
			w.p.emit(newErrorEvent(err), newErrorEvent(err).String())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outbox = last
	for _, e := range entries {
		if e.Reason == ledger.InvalidateTombstoned {
			w.tombstones++
		} else {
			w.invalidations++
		}
	}
}

func (w *watcher) summary(elapsed time.Duration, interrupted bool) watchSummary {
	s := watchSummary{
		Event: "summary", ElapsedMs: elapsed.Milliseconds(), Interrupted: interrupted,
		Subscriptions: len(w.subscribed()), StaleByReason: w.engine.StaleCounts(),
	}
	for _, n := range w.notifications {
		s.Notifications += n.carried + n.seq
	}
	h := w.conn.client.Health()
	s.Reconnects, s.FailedReads, s.DegradedMs = h.Reconnects, h.FailedReads, w.degradedFor().Milliseconds()
	w.mu.Lock()
	s.VersionsAccepted, s.Unchanged, s.TombstonesPending = w.accepted, w.unchanged, w.pending
	s.Invalidations, s.Tombstones, s.NotificationReads = w.invalidations, w.tombstones, w.notificationReads
	w.mu.Unlock()
	if s.Notifications > 0 {
		s.ReadsPerNotification = float64(s.NotificationReads) / float64(s.Notifications)
	}
	return s
}
