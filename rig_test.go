package mcpsync_test

// The shared rig of the Client's tests: a Client synced to an mcpsynctest
// server, each connection through the fault kit (one-off network faults,
// r.faults()) and the rig's fault wire (a server that steadily refuses,
// parks or answers oddly, r.wire), optionally over a fault ledger (a
// ledger that refuses chosen writes, r.ledger).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

const faultURI = "file:///docs/handbook.md"

// wiring is a way to reach the server: a protocol revision over a transport.
type wiring struct {
	name    string
	version string
	http    bool
}

var eras = []wiring{{"legacy", "2025-11-25", false}, {"modern", "2026-07-28", false}}

// eachCase runs test once per case, in a subtest named name(c) (fmt.Sprint
// of the case when name is nil) and a testing/synctest bubble of its own.
func eachCase[C any](t *testing.T, cases []C, name func(C) string, test func(t *testing.T, c C)) {
	if name == nil {
		name = func(c C) string { return fmt.Sprint(c) }
	}
	for _, c := range cases {
		t.Run(name(c), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { test(t, c) })
		})
	}
}

// named names the two cases of a bool: falseName and trueName.
func named(falseName, trueName string) func(bool) string {
	return func(b bool) string {
		if b {
			return trueName
		}
		return falseName
	}
}

// eachEra runs test once per protocol era, in a subtest named for the era
// and a testing/synctest bubble of its own.
func eachEra(t *testing.T, test func(t *testing.T, w wiring)) {
	eachCase(t, eras, func(w wiring) string { return w.name }, test)
}

// eachEraAnd runs test once per protocol era and case, in a subtest named
// for both ("legacy/" and the case's name; fmt.Sprint of the case when
// name is nil) and a testing/synctest bubble of its own.
func eachEraAnd[C any](t *testing.T, cases []C, name func(C) string, test func(t *testing.T, w wiring, c C)) {
	if name == nil {
		name = func(c C) string { return fmt.Sprint(c) }
	}
	for _, w := range eras {
		eachCase(t, cases, func(c C) string { return w.name + "/" + name(c) }, func(t *testing.T, c C) { test(t, w, c) })
	}
}

// withHTTP adds streamable HTTP (2025-11-25: the stateful streamable HTTP
// server of mcp-go speaks the legacy revision).
var withHTTP = append(eras[:len(eras):len(eras)], wiring{"legacy-http", "2025-11-25", true})

// subscribeMethod is the request that asks the server to notify a URI in
// the era of version.
func subscribeMethod(version string) string {
	if mcpsync.EraOf(version) == mcpsync.EraModern {
		return string(mcp.MethodSubscriptionsListen)
	}
	return string(mcp.MethodResourcesSubscribe)
}

// rigConfig says how a rig is built; the zero value is newRig's.
type rigConfig struct {
	// opts are the client's options; Subject and ProtocolVersion are the
	// rig's, Seed is 1 unless set, and OnOutcome and OnError are called
	// after the rig's own.
	opts mcpsync.ClientOptions
	// server are the mcpsynctest server's options.
	server *mcpsynctest.ServerOptions
	// srv, if set, is the server, as the test prepared it (it may outlive
	// the rig, as a server does a worker's restart); server, uris and
	// faultURI are then not applied.
	srv *mcpsynctest.Server
	// ledger puts the client's engine on a fault ledger (r.ledger).
	ledger bool
	// store, if set, is where the fault ledger keeps its records.
	store ledger.Ledger
	// uris are resources the server holds, with text "v1", beside faultURI.
	uris []string
	// wire, if set, sets the fault wire's hooks before the client connects.
	wire func(w *faultWire)
	// dial, if set, reaches a server of the test's own instead of the
	// rig's (a stdio process, say); the rig's server (r.srv) is then
	// unused.
	dial mcpsync.Dialer
	// kitSeed seeds the fault kits: connection n's with kitSeed+n.
	kitSeed int64
}

// rig is a Client synced to an mcpsynctest server. Every connection is
// kit(wire(transport)): the connection's fault kit between the client and
// the rig's fault wire, which stands for the server's side. Outcomes go to
// outcomes as long as it has room, and every one is kept (outcomesSoFar):
// the client never waits for a test. Every failure OnError is told is in
// errs.
type rig struct {
	t        *testing.T // nil in a rig of a rapid property (connectRig)
	srv      *mcpsynctest.Server
	c        *mcpsync.Client
	version  string
	outcomes chan mcpsync.Outcome
	wire     *faultWire
	ledger   *faultLedger // nil unless the config asked for one
	errs     errorLog
	hs       *httptest.Server // the HTTP server of an HTTP wiring

	mu   sync.Mutex // protects kit, kits, down and onDial
	kit  *mcpsynctest.Transport
	kits []*mcpsynctest.Transport
	// down makes every dial fail, as a server that is down for a moment.
	down bool
	// onDial, if set, is called with each later connection's kit before
	// the connection sends anything.
	onDial func(conn int, kit *mcpsynctest.Transport)

	keptMu sync.Mutex // protects kept
	kept   []mcpsync.Outcome
}

// newRig connects a client of faultURI's server over w. The client is
// closed when the test ends, and must close cleanly.
func newRig(t *testing.T, w wiring, opts *mcpsync.ClientOptions) *rig {
	t.Helper()
	var cfg rigConfig
	if opts != nil {
		cfg.opts = *opts
	}
	return buildRig(t, w, cfg)
}

// newLedgerRig is newRig over an engine whose ledger is a fault ledger, with
// the server holding uris too.
func newLedgerRig(t *testing.T, w wiring, uris ...string) *rig {
	t.Helper()
	return buildRig(t, w, rigConfig{ledger: true, uris: uris})
}

// newLedgerRigWatching is newLedgerRig (2026-07-28) with faultURI, then
// other (on the server with text "v1"), watched on one listen stream.
func newLedgerRigWatching(t *testing.T, other string) *rig {
	t.Helper()
	r := newLedgerRig(t, eras[1], other)
	r.subscribe()
	r.watch(other)
	quiesce()
	return r
}

// buildRig connects a client over w as cfg says. The client is closed when
// the test ends, and must close cleanly.
func buildRig(t *testing.T, w wiring, cfg rigConfig) *rig {
	t.Helper()
	r, err := connectRig(t.Context(), w, cfg)
	require.NoError(t, err)
	r.t = t
	t.Cleanup(func() { require.NoError(t, r.close()) })
	return r
}

// connectRig is buildRig for a caller without a *testing.T (a rapid
// property): it returns what failed, and the caller closes the rig.
func connectRig(ctx context.Context, w wiring, cfg rigConfig) (*rig, error) {
	r := &rig{srv: cfg.srv, version: w.version, outcomes: make(chan mcpsync.Outcome, 1024), wire: newFaultWire()}
	if cfg.wire != nil {
		r.wire.set(cfg.wire)
	}
	if r.srv == nil {
		r.srv = mcpsynctest.NewServer(cfg.server)
		r.srv.Set(faultURI, "text/markdown", "v1")
		for _, u := range cfg.uris {
			r.srv.Set(u, "text/markdown", "v1")
		}
	}
	inner := r.srv.Dialer()
	if cfg.dial != nil {
		inner = cfg.dial
	}
	o := cfg.opts
	if cfg.ledger {
		r.ledger = newFaultLedger()
		if cfg.store != nil {
			r.ledger.Ledger = cfg.store
		}
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: r.ledger})
		if err != nil {
			return nil, err
		}
		o.Engine = e
		if o.RetryInitial == 0 {
			// A pass a refused write failed is retried minutes later, as a
			// revalidation tick would: a check made right after the fault
			// sees what a caller sees while it lasts, and the tests that
			// wait for healing wait long enough for the retry.
			o.RetryInitial, o.RetryMax = 2*time.Minute, 5*time.Minute
		}
	}
	if w.http {
		hs := httptest.NewServer(server.NewStreamableHTTPServer(r.srv.MCPServer()))
		r.hs = hs
		inner = func(context.Context) (transport.Interface, error) {
			return transport.NewStreamableHTTP(hs.URL, transport.WithContinuousListening())
		}
	}
	o.Subject, o.ProtocolVersion = alice, w.version
	if o.Seed == 0 {
		o.Seed = 1
	}
	if then := o.OnOutcome; then != nil {
		o.OnOutcome = func(out mcpsync.Outcome) {
			r.keepOutcome(out)
			then(out)
		}
	} else {
		o.OnOutcome = r.keepOutcome
	}
	if then := o.OnError; then != nil {
		r.errs.then = then
	}
	o.OnError = r.errs.add
	c, err := mcpsync.Connect(ctx, r.dialer(inner, cfg.kitSeed), &o)
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	r.c = c
	if got := c.Capabilities().ProtocolVersion; got != w.version {
		return nil, errors.Join(fmt.Errorf("connected at protocol version %s, not %s", got, w.version), r.close())
	}
	return r, nil
}

// dialer dials inner for the client, through the rig: each connection
// fails while the rig is down, or goes through the fault wire and a fault
// kit of its own, seeded with kitSeed and its number.
func (r *rig) dialer(inner mcpsync.Dialer, kitSeed int64) mcpsync.Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down {
			return nil, errors.New("dial: connection refused (server down)")
		}
		tr, err := inner(ctx)
		if err != nil {
			return nil, err
		}
		conn := len(r.kits) + 1
		kit := mcpsynctest.NewTransport(r.wire.connect(conn, tr), kitSeed+int64(conn))
		if r.onDial != nil {
			r.onDial(conn, kit)
		}
		r.kit = kit
		r.kits = append(r.kits, kit)
		return kit, nil
	}
}

// keepOutcome is the client's OnOutcome: it keeps out, and hands it to
// outcomes if there is room.
func (r *rig) keepOutcome(out mcpsync.Outcome) {
	r.keptMu.Lock()
	r.kept = append(r.kept, out)
	r.keptMu.Unlock()
	select {
	case r.outcomes <- out:
	default:
	}
}

// outcomesSoFar returns every outcome the client reported so far.
func (r *rig) outcomesSoFar() []mcpsync.Outcome {
	r.keptMu.Lock()
	defer r.keptMu.Unlock()
	return slices.Clone(r.kept)
}

// close closes the client, then the HTTP server of an HTTP wiring.
func (r *rig) close() error {
	var err error
	if r.c != nil {
		err = r.c.Close()
	}
	if r.hs != nil {
		r.hs.Close()
	}
	return err
}

// faults returns the fault kit of the current connection.
func (r *rig) faults() *mcpsynctest.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kit
}

// requests counts the requests of method the client sent, on every
// connection, whatever became of them.
func (r *rig) requests(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, kit := range r.kits {
		n += kit.Requests(method)
	}
	return n
}

// listens counts the subscriptions/listen requests the client sent.
func (r *rig) listens() int { return r.requests(string(mcp.MethodSubscriptionsListen)) }

// setDown makes every later dial fail (down) or succeed again.
func (r *rig) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// loseSession loses the client's session with the server down: every dial
// fails until setDown(false).
func (r *rig) loseSession() {
	r.setDown(true)
	r.faults().DropSession()
}

// setOnDial installs f, called with each later connection's kit before the
// connection sends anything.
func (r *rig) setOnDial(f func(conn int, kit *mcpsynctest.Transport)) {
	r.mu.Lock()
	r.onDial = f
	r.mu.Unlock()
}

// subscribe subscribes faultURI and waits for the initial read to pass.
func (r *rig) subscribe() mcpsync.Subscription {
	r.t.Helper()
	sub, err := r.c.Subscribe(r.t.Context(), faultURI)
	require.NoError(r.t, err)
	require.Equal(r.t, ledger.ModePush, sub.Mode)
	require.True(r.t, next(r.t, r.outcomes).Accepted)
	return sub
}

// served returns the text Lookup serves for faultURI.
func (r *rig) served() string {
	r.t.Helper()
	entry, err := r.c.Lookup(faultURI)
	require.NoError(r.t, err)
	return entry.Contents[0].Text
}

// subscribeMethod is the request that subscribes in the rig's era.
func (r *rig) subscribeMethod() string { return subscribeMethod(r.version) }

// text returns what Lookup serves for uri: the text of its first content.
func (r *rig) text(uri string) (string, error) {
	e, err := r.c.Lookup(uri)
	if err != nil {
		return "", err
	}
	if len(e.Contents) == 0 {
		return "", errors.New("a version without contents")
	}
	return e.Contents[0].Text, nil
}

// entryText is the text of e's first content, "" when Lookup gave no
// content (err is not nil).
func entryText(e mcpsync.Entry, err error) string {
	if err != nil || len(e.Contents) == 0 {
		return ""
	}
	return e.Contents[0].Text
}

// describe says everything a liveness failure needs about uri: the ledger
// row, what Lookup serves and what the server holds.
func (r *rig) describe(uri string) string {
	e := r.c.Engine()
	sub, err := e.Subscription(uri)
	text, lerr := r.text(uri)
	want, exists := r.srv.Text(uri)
	return fmt.Sprintf("%s: state %s, session %d (current %d), subscription generation %d, mode %q, last issued %d, watermark %d, staleness bound %d ms, close epoch %d (row err %v); Lookup = %q, err %v; server text %q (exists %v, subscribed on the server %v)",
		uri, sub.State, sub.SessionGeneration, e.SessionGeneration(), sub.SubscriptionGeneration, sub.Mode,
		sub.LastIssuedOrdinal, sub.Watermark, sub.StalenessBoundMs, sub.CloseEpoch, err,
		text, lerr, want, exists, r.srv.Subscribed(uri))
}

// watch subscribes each of uris in turn, each Subscribe required to
// return nil.
func (r *rig) watch(uris ...string) {
	r.t.Helper()
	for _, u := range uris {
		_, err := r.c.Subscribe(r.t.Context(), u)
		require.NoError(r.t, err)
	}
}

// subscribeSettled subscribes uri and waits until its first read passed.
func (r *rig) subscribeSettled(uri string) mcpsync.Subscription {
	r.t.Helper()
	sub, err := r.c.Subscribe(r.t.Context(), uri)
	require.NoError(r.t, err)
	time.Sleep(5 * time.Second) // longer than any coalescing window of these tests
	quiesce()
	text, err := r.text(uri)
	require.NoError(r.t, err, r.describe(uri))
	want, _ := r.srv.Text(uri)
	require.Equal(r.t, want, text, r.describe(uri))
	return sub
}

// requireConverged checks the progress property for one subscribed URI:
// open in the current session, and Lookup serves exactly the server's text.
func (r *rig) requireConverged(uri, finding string) {
	r.t.Helper()
	e := r.c.Engine()
	sub, err := e.Subscription(uri)
	require.NoError(r.t, err)
	want, _ := r.srv.Text(uri)
	text, lerr := r.text(uri)
	switch {
	case !openState(sub.State) || sub.SessionGeneration != e.SessionGeneration():
		r.t.Fatalf("%s: stuck, not open in the current session: %s", finding, r.describe(uri))
	case lerr == nil && text != want:
		r.t.Fatalf("%s: silently stale, old text served with no error: %s", finding, r.describe(uri))
	case lerr != nil:
		r.t.Fatalf("%s: stuck, no version served: %s", finding, r.describe(uri))
	}
}

func (r *rig) outbox() []mcpsync.OutboxEntry {
	r.t.Helper()
	entries, err := r.c.Engine().PullOutbox(0, 0)
	require.NoError(r.t, err)
	return entries
}

// state describes uri as a caller sees it, and returns the text Lookup
// serves.
func (r *rig) state(uri string) (text string, desc string) {
	sub, err := r.c.Engine().Subscription(uri)
	require.NoError(r.t, err)
	e, err := r.c.Lookup(uri)
	return entryText(e, err), fmt.Sprintf("%s %s (%q), degraded %q, server subscribed %v, lookup err %v",
		sub.State, sub.Mode, sub.ModeReason, e.Degraded, r.srv.Subscribed(uri), err)
}

// look returns uri's subscription and what Lookup serves for it, both
// required, and a line that describes them in the current session.
func (r *rig) look(uri string) (mcpsync.Subscription, mcpsync.Entry, string) {
	r.t.Helper()
	gen := r.c.Health().SessionGeneration
	s, err := r.c.Engine().Subscription(uri)
	require.NoError(r.t, err)
	e, err := r.c.Lookup(uri)
	require.NoError(r.t, err)
	text := entryText(e, err)
	return s, e, fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q",
		uri, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(uri), text, e.Degraded)
}

// pushed counts the URIs of uris open in push mode, and describes each.
func (r *rig) pushed(uris []string) (push int, lines []string) {
	for _, u := range uris {
		sub, _ := r.c.Engine().Subscription(u)
		if sub.Mode == ledger.ModePush {
			push++
		}
		_, d := r.state(u)
		lines = append(lines, u+": "+d)
	}
	return push, lines
}

// sixRevalidations gives the client six revalidation periods (5 min and
// 20% jitter each) to catch up.
func (r *rig) sixRevalidations() {
	for range 6 {
		time.Sleep(6 * time.Minute)
		quiesce()
	}
}

// minutes lets n minutes pass, one at a time.
func minutes(n int) {
	for range n {
		time.Sleep(time.Minute)
		quiesce()
	}
}

// returned is what a call made on a goroutine of its own returned.
type returned[T any] struct {
	val T
	err error
}

// goCall makes call(ctx, arg) (a client's Subscribe, say) on a goroutine
// of its own; what it returned arrives on the channel, which has room for
// it, so a test that stops listening leaves nothing blocked.
func goCall[A, T any](ctx context.Context, call func(context.Context, A) (T, error), arg A) <-chan returned[T] {
	done := make(chan returned[T], 1)
	go func() {
		v, err := call(ctx, arg)
		done <- returned[T]{v, err}
	}()
	return done
}

// cancelWhileHeld makes call(ctx, arg) with a context that ends once hold
// has the call's request (the server has not seen it), and returns what
// call returned and how long the request took to be held; the request
// stays held. The call must not return before its request is held.
func cancelWhileHeld[A, T any](t *testing.T, hold *mcpsynctest.Hold, call func(context.Context, A) (T, error), arg A) (returned[T], time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	start := time.Now()
	done := goCall(ctx, call, arg)
	select {
	case <-hold.Arrived():
	case res := <-done:
		t.Fatalf("the call returned (%v) before its request was held", res.err)
	}
	took := time.Since(start)
	cancel()
	return <-done, took
}

// arrived reports whether hold has a request.
func arrived(h *mcpsynctest.Hold) bool {
	select {
	case <-h.Arrived():
		return true
	default:
		return false
	}
}

// releasedIfWaiting returns what the call of done returned, releasing hold
// first if the call still waits.
func releasedIfWaiting[T any](done <-chan returned[T], hold *mcpsynctest.Hold) returned[T] {
	select {
	case res := <-done:
		return res
	default:
		hold.Release()
		return <-done
	}
}

// requireActivated checks what a Subscribe returned: no error, and its
// subscription activated (push or poll) and open.
func requireActivated(t *testing.T, res returned[mcpsync.Subscription]) {
	t.Helper()
	require.NoError(t, res.err)
	assert.Contains(t, []ledger.SubscriptionMode{ledger.ModePush, ledger.ModePoll}, res.val.Mode,
		"Subscribe returned nil with a subscription never activated: %s session %d", res.val.State, res.val.SessionGeneration)
	assert.True(t, openState(res.val.State), "Subscribe returned nil with a subscription not open: %s", res.val.State)
}

// numbered returns n URIs, the i-th spelled by format with i.
func numbered(format string, n int) []string {
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf(format, i)
	}
	return uris
}

// requireToldReopen checks that a failed reopen of uri was visible when it
// happened: OnError was told a *ReopenError naming uri, and Lookup says the
// copy is degraded.
func (r *rig) requireToldReopen(uri string) {
	r.t.Helper()
	require.True(r.t, r.toldReopen(uri), "OnError was told no *ReopenError for %s: %v", uri, r.errs.list())
	entry, err := r.c.Lookup(uri)
	require.NoError(r.t, err)
	require.NotEmpty(r.t, entry.Degraded, "Lookup serves the copy of a URI no subscription keeps fresh without saying so")
}

// toldReopen reports whether OnError was told a *ReopenError naming uri.
func (r *rig) toldReopen(uri string) bool { return r.reopenErrorsOf(uri) > 0 }

// reopenErrors counts the *ReopenError OnError was told.
func (r *rig) reopenErrors() int { return r.reopenErrorsOf("") }

// reopenErrorsOf counts the *ReopenError OnError was told naming uri (""
// counts every one).
func (r *rig) reopenErrorsOf(uri string) int {
	n := 0
	for _, err := range r.errs.list() {
		if re, ok := errors.AsType[*mcpsync.ReopenError](err); ok && (uri == "" || re.URI == uri) {
			n++
		}
	}
	return n
}

// requireOldGenerationOpen checks that uri is still open in its generation
// gen: the reopen that failed left it there.
func (r *rig) requireOldGenerationOpen(uri string, gen uint64) {
	r.t.Helper()
	sub, err := r.c.Engine().Subscription(uri)
	require.NoError(r.t, err)
	require.True(r.t, sub.State.Open() && sub.SubscriptionGeneration == gen,
		"the failed reopen leaves the old generation open: %s, generation %d", sub.State, sub.SubscriptionGeneration)
}

// requireHealed checks, after a fault cleared and uri was given time to
// heal, that it came back: an open subscription of the client's session,
// the server's current content want served, and nothing degraded. It
// fails with what a caller sees otherwise.
func (r *rig) requireHealed(uri, want string) {
	r.t.Helper()
	c := r.c
	sub, err := c.Engine().Subscription(uri)
	require.NoError(r.t, err)
	entry, lerr := c.Lookup(uri)
	served := entryText(entry, lerr)
	healed := served == want && entry.Degraded == "" && sub.SessionGeneration == c.Health().SessionGeneration &&
		(sub.State == ledger.StateActive || sub.State == ledger.StateVersionAccepted)
	if !healed {
		r.t.Fatalf("the watched URI never came back: subscription %s (session %d, generation %d; client session %d), "+
			"Lookup serves %q (server has %q) with Degraded %q (error %v), health %s",
			sub.State, sub.SessionGeneration, sub.SubscriptionGeneration, c.Health().SessionGeneration,
			served, want, entry.Degraded, lerr, c.Health().State)
	}
}

// requireHealsAfterAChange has the server's content of uri move on to
// "v2", gives the client six revalidation periods, and checks that uri came
// back with it (requireHealed).
func (r *rig) requireHealsAfterAChange(uri string) {
	r.t.Helper()
	r.srv.Set(uri, "text/markdown", "v2")
	r.sixRevalidations()
	r.requireHealed(uri, "v2")
}

// reestablish has the server end every listen stream, and waits out the
// client's backoff before it reopens the URIs they carried.
func (r *rig) reestablish() {
	r.faults().EndListenStreams()
	time.Sleep(2 * time.Second) // the client's backoff before reopening
	quiesce()
}

// reestablishRefusingOnce is reestablish with the ledger refusing, once,
// the write of the reopen that match picks; it checks that the reopen met
// that refusal.
func (r *rig) reestablishRefusingOnce(match func(key string, next *ledger.Record) bool) {
	r.t.Helper()
	r.ledger.failWrites(1, match)
	r.reestablish()
	require.Equal(r.t, 1, r.ledger.failures(), "the reopen's write was refused once")
}

// requireResumedOnItsLedger checks what a restart finds after the rig's
// ledger stopped (crashAfter): the rig's client is closed, a fresh engine
// and client are started on what the ledger holds, as a restarted process
// does, and uri is resumed: open in the new session, serving want.
func (r *rig) requireResumedOnItsLedger(uri, want string) {
	t := r.t
	t.Helper()
	require.True(t, r.ledger.crashed(), "the ledger never stopped: the reopen made fewer writes")
	version := r.c.Capabilities().ProtocolVersion
	require.NoError(t, r.c.Close())
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: r.ledger.Ledger})
	require.NoError(t, err)
	c, err := mcpsync.Connect(t.Context(), r.srv.Dialer(), &mcpsync.ClientOptions{Engine: e, Subject: alice, ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	require.NoError(t, c.WaitForSync(t.Context()))
	sub, err := e.Subscription(uri)
	require.NoError(t, err)
	require.Equal(t, e.SessionGeneration(), sub.SessionGeneration,
		"%s is not resumed: the ledger holds its generation %d %s (close epoch %d)", uri, sub.SubscriptionGeneration, sub.State, sub.CloseEpoch)
	require.True(t, sub.State.Open(), "%s is %s in the new session", uri, sub.State)
	entry, err := c.Lookup(uri)
	require.NoError(t, err)
	require.Equal(t, want, entry.Contents[0].Text)
}

// reopenOf picks the first write of the reopen of uri's generation gen: the
// one that begins its close, or opens a newer generation.
func reopenOf(uri string, gen uint64) func(string, *ledger.Record) bool {
	return func(key string, next *ledger.Record) bool {
		return key == uri && next.Sub != nil && (next.CloseEpoch != 0 || next.Sub.Generation > gen)
	}
}

// requirePushed checks that a change of faultURI on the server is read
// within a second, which only a notification does (revalidation is minutes
// away).
func (r *rig) requirePushed() {
	r.t.Helper()
	sub, err := r.c.Engine().Subscription(faultURI)
	require.NoError(r.t, err)
	require.Equal(r.t, ledger.ModePush, sub.Mode, sub.ModeReason)
	r.srv.Set(faultURI, "text/markdown", "pushed")
	time.Sleep(time.Second)
	quiesce()
	require.Equal(r.t, "pushed", r.served(), "the change was not notified to the repaired subscription")
}

// requireServerMatchesPush checks, once things settled, that the server
// notifies exactly the URIs of uris whose subscription is open in push mode.
func (r *rig) requireServerMatchesPush(uris []string) {
	r.t.Helper()
	c := r.c
	var bad []string
	for _, u := range uris {
		sub, err := c.Engine().Subscription(u)
		open := err == nil && openIn(sub, c.Health().SessionGeneration)
		push := open && sub.Mode == ledger.ModePush
		if push != r.srv.Subscribed(u) {
			bad = append(bad, fmt.Sprintf("%s: state %s mode %s (err %v), server subscribed %v", u, sub.State, sub.Mode, err, r.srv.Subscribed(u)))
		}
	}
	require.Empty(r.t, bad, "server subscriptions that do not match the client's")
}

// requireWhereLeft checks, after things settled, every URI of uris: one
// that must be watched (mustOpen) is open in the current session, in push
// mode with the server notifying it, or polling with a reason, and serves
// the server's current content; one that must not (mustClosed) is not
// open; one that is not open is not subscribed on the server.
func (r *rig) requireWhereLeft(uris []string, mustOpen, mustClosed map[string]bool) {
	t := r.t
	t.Helper()
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v2")
	}
	minutes(7)
	gen := r.c.Health().SessionGeneration
	var bad []string
	opened := 0
	for _, u := range uris {
		sub, err := r.c.Engine().Subscription(u)
		open := err == nil && openIn(sub, gen)
		e, lerr := r.c.Lookup(u)
		text := entryText(e, lerr)
		desc := fmt.Sprintf("%s: %s %s (%q) session %d/%d, serves %q (err %v) degraded %q, server subscribed %v",
			u, sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, gen, text, lerr, e.Degraded, r.srv.Subscribed(u))
		switch {
		case mustOpen[u] && !open:
			bad = append(bad, "watched but not open: "+desc)
		case mustClosed[u] && open:
			bad = append(bad, "unsubscribed but open: "+desc)
		case open && text != "v2":
			bad = append(bad, "open but stale: "+desc)
		case open && sub.Mode == ledger.ModePush && !r.srv.Subscribed(u):
			bad = append(bad, "push but not notified: "+desc)
		case open && sub.Mode == ledger.ModePoll && sub.ModeReason == "":
			bad = append(bad, "polled without a reason: "+desc)
		case !open && r.srv.Subscribed(u):
			bad = append(bad, "not open but notified: "+desc)
		}
		if open {
			opened++
		}
	}
	t.Logf("%d of %d open after settling", opened, len(uris))
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
	}
	require.Empty(t, bad)
}

// parkedReconnect is a Reconnect whose first two requests of a method are
// parked (reconnectParked).
type parkedReconnect struct {
	first    string        // the URI of the first request parked
	h1, h2   chan struct{} // closing one lets the first or the second go
	arrived2 chan string   // the URI of the second, once it is parked
	done     chan error    // what Reconnect returned
}

// reconnectParked starts a Reconnect, parking the first two requests of
// method on the second connection (the one the Reconnect opens): each, as
// it arrives, names its URI (first, arrived2) and waits until h1 or h2 is
// closed. It returns once the first is parked. With second set, the second
// one parked is the first after the first that names it: a Reconnect
// re-subscribes its URIs side by side, and a test that parks a caller's
// own request beside the Reconnect's names it.
func (r *rig) reconnectParked(method string, second ...string) *parkedReconnect {
	p := &parkedReconnect{h1: make(chan struct{}), h2: make(chan struct{}), arrived2: make(chan string, 1), done: make(chan error, 1)}
	arrived1 := make(chan string, 1)
	var mu sync.Mutex // protects seen
	seen := 0
	r.wire.set(func(w *faultWire) {
		w.park = func(req wireRequest) <-chan struct{} {
			if req.conn != 2 || req.method != method {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if seen == 1 && len(second) > 0 && req.uri != second[0] {
				return nil
			}
			seen++
			switch seen {
			case 1:
				arrived1 <- req.uri
				return p.h1
			case 2:
				p.arrived2 <- req.uri
				return p.h2
			}
			return nil
		}
	})
	go func() { p.done <- r.c.Reconnect(context.Background()) }()
	p.first = <-arrived1
	return p
}

// openState reports whether s is ACTIVE or one of its read sub-states.
func openState(s ledger.SubscriptionState) bool {
	switch s {
	case ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending, ledger.StateVersionAccepted:
		return true
	}
	return false
}

// generationOpen reports whether s is an open generation's state: ACTIVE,
// one of its read sub-states (a read may be queued or out at the moment
// of any check: a poll or revalidation falls due at its own time), or a
// not-found awaiting its evidence.
func generationOpen(s ledger.SubscriptionState) bool {
	return openState(s) || s == ledger.StateTombstonePending
}

// openIn reports whether sub is an open generation (generationOpen) of
// session gen.
func openIn(sub mcpsync.Subscription, gen uint64) bool {
	return sub.SessionGeneration == gen && generationOpen(sub.State)
}

// errorLog keeps what OnError is told, and calls then after, if set.
type errorLog struct {
	mu   sync.Mutex // protects errs and then
	errs []error
	then func(error)
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	then := l.then
	l.mu.Unlock()
	if then != nil {
		then(err)
	}
}

func (l *errorLog) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// setThen has every later failure passed on to f.
func (l *errorLog) setThen(f func(error)) {
	l.mu.Lock()
	l.then = f
	l.mu.Unlock()
}

// wireRequest is one request as the fault wire sees it.
type wireRequest struct {
	conn   int      // the connection, counted from 1
	method string   //
	uri    string   // params.uri
	uris   []string // the resources a subscriptions/listen request names
	n      int      // requests of method on this connection so far, this one included
}

// faultWire stands for the server's side of every connection of a rig: it
// refuses, parks or answers what its hooks pick, and it can make a
// 2026-07-28 server's listen streams misbehave. It keeps what each listen
// request named, and counts what it refused.
// Every hook is read under mu when it applies, so a test may change one at
// any time (set); hooks run outside mu. A hook holds for every connection:
// a fault of one connection's server only is cleared in the rig's onDial.
type faultWire struct {
	mu sync.Mutex
	// refuse answers a request it picks with a JSON-RPC error the server
	// never sees.
	refuse func(req wireRequest) bool
	// park holds a request until the channel it returns (nil: none) is
	// closed, then sends it on; a caller who gave up meanwhile no longer
	// stops it (the request was on its way), a listen stream excepted,
	// which lives on the client's context.
	park func(req wireRequest) <-chan struct{}
	// answered runs once the server answered; an error it returns replaces
	// the answer, as a transport's does when the answer and the caller's
	// giving up cross.
	answered func(req wireRequest) error
	// closing runs as a connection's transport is closed, before it closes
	// (a server's graceful shutdown takes a while).
	closing func()
	// endAfterAck >= 0 ends each listen stream that long after its
	// acknowledgement reached the client, with an empty result once the
	// server is done with it, or, with cut, with an error and no answer
	// at once (the server learns of the end as its handler's context
	// ends).
	endAfterAck time.Duration
	cut         bool
	// ackFilter, if set, rewrites the URIs of every acknowledgement.
	ackFilter func(asked []string) []string
	// rewrite, if set, turns each notification the server sends into the
	// ones the client gets (none drops it).
	rewrite func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification
	// ackDelay > 0 delivers every acknowledgement that much later.
	ackDelay time.Duration

	refused map[string]int // refused requests by method
	filters [][]string     // the URIs of every listen request, in order
	ids     []string       // the JSON-RPC id of every listen request
}

func newFaultWire() *faultWire {
	return &faultWire{endAfterAck: -1, refused: map[string]int{}}
}

// set changes the wire's hooks under its lock.
func (w *faultWire) set(f func(w *faultWire)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

// refuseWhen answers every request match picks with a JSON-RPC error (nil
// stops refusing).
func (w *faultWire) refuseWhen(match func(method, uri string, n int) bool) {
	w.set(func(w *faultWire) {
		w.refuse = nil
		if match != nil {
			w.refuse = func(req wireRequest) bool { return match(req.method, req.uri, req.n) }
		}
	})
}

// refuseListens answers every subscriptions/listen request whose URIs match
// picks with a JSON-RPC error (nil stops refusing).
func (w *faultWire) refuseListens(match func(uris []string) bool) {
	w.set(func(w *faultWire) { w.refuse = listensWhere(match) })
}

// listensWhere picks the subscriptions/listen requests whose URIs match
// picks (nil picks none).
func listensWhere(match func(uris []string) bool) func(wireRequest) bool {
	if match == nil {
		return nil
	}
	return func(req wireRequest) bool {
		return req.method == string(mcp.MethodSubscriptionsListen) && match(req.uris)
	}
}

// anyURIs picks every listen request.
func anyURIs([]string) bool { return true }

// leaveOut makes the server stop taking uri on its listen streams: their
// acknowledgements leave it out and no resources/updated of it reaches the
// client ("" takes every URI again).
func (w *faultWire) leaveOut(uri string) {
	w.set(func(w *faultWire) {
		w.ackFilter, w.rewrite = nil, nil
		if uri == "" {
			return
		}
		w.ackFilter = func(asked []string) []string {
			return slices.DeleteFunc(slices.Clone(asked), func(u string) bool { return u == uri })
		}
		w.rewrite = func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification {
			if m.Method == string(mcp.MethodNotificationResourceUpdated) && m.Params.AdditionalFields["uri"] == uri {
				return nil
			}
			return []mcp.JSONRPCNotification{m}
		}
	})
}

// cancelAsAnswered arms the next request of method: the server answers it,
// then cancel runs and the request returns context.Canceled, as a
// transport's does when the answer and the caller's giving up cross.
func (w *faultWire) cancelAsAnswered(method string, cancel context.CancelFunc) {
	var once sync.Once
	w.set(func(w *faultWire) {
		w.answered = func(req wireRequest) error {
			if req.method != method {
				return nil
			}
			fired := false
			once.Do(func() { fired = true })
			if !fired {
				return nil
			}
			cancel()
			return context.Canceled
		}
	})
}

// refusals counts the requests of method the wire refused.
func (w *faultWire) refusals(method string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused[method]
}

// listenFilters returns the URIs each listen request named, in order.
func (w *faultWire) listenFilters() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.filters)
}

// listenIDs returns the JSON-RPC id of each listen request, in order.
func (w *faultWire) listenIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ids)
}

// connect returns connection conn's end of the wire, around inner.
func (w *faultWire) connect(conn int, inner transport.Interface) transport.Interface {
	return &wireConn{Interface: inner, w: w, conn: conn, n: map[string]int{}, acked: map[string]chan struct{}{}}
}

// wireConn is one connection's end of a fault wire.
type wireConn struct {
	transport.Interface
	w      *faultWire
	conn   int
	closed atomic.Bool // a closed transport refuses requests, as a real one does

	mu    sync.Mutex               // protects n and acked
	n     map[string]int           // requests by method
	acked map[string]chan struct{} // per listen id, closed once its acknowledgement passed
}

func (c *wireConn) ackChan(id string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.acked[id]
	if ch == nil {
		ch = make(chan struct{})
		c.acked[id] = ch
	}
	return ch
}

func (c *wireConn) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if c.closed.Load() {
		return nil, errors.New("transport closed")
	}
	listen := req.Method == string(mcp.MethodSubscriptionsListen)
	wr := wireRequest{conn: c.conn, method: req.Method, uri: requestURI(req.Params)}
	id := fmt.Sprint(req.ID.Value())
	if listen {
		wr.uris = listenURIs(req.Params)
	}
	c.mu.Lock()
	c.n[req.Method]++
	wr.n = c.n[req.Method]
	c.mu.Unlock()
	w := c.w
	w.mu.Lock()
	if listen {
		w.filters = append(w.filters, wr.uris)
		w.ids = append(w.ids, id)
	}
	refuse, park, answered, end, cut := w.refuse, w.park, w.answered, w.endAfterAck, w.cut
	w.mu.Unlock()
	if refuse != nil && refuse(wr) {
		w.mu.Lock()
		w.refused[req.Method]++
		w.mu.Unlock()
		return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID,
			Error: &mcp.JSONRPCErrorDetails{Code: mcp.INTERNAL_ERROR, Message: "refused by the fault wire"}}, nil
	}
	if park != nil {
		if ch := park(wr); ch != nil {
			<-ch
			if !listen {
				ctx = context.WithoutCancel(ctx)
			}
		}
	}
	var resp *transport.JSONRPCResponse
	var err error
	if listen && end >= 0 {
		resp, err = c.endAfterAck(ctx, req, id, end, cut)
	} else {
		resp, err = c.Interface.SendRequest(ctx, req)
	}
	if answered != nil {
		if aerr := answered(wr); aerr != nil {
			return nil, aerr
		}
	}
	return resp, err
}

// endAfterAck sends a listen request and ends the stream d after its
// acknowledgement passed: with an empty result, or cut, with
// mcpsynctest.ErrListenCut.
func (c *wireConn) endAfterAck(ctx context.Context, req transport.JSONRPCRequest, id string, d time.Duration, cut bool) (*transport.JSONRPCResponse, error) {
	ack := c.ackChan(id)
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		resp *transport.JSONRPCResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := c.Interface.SendRequest(ictx, req)
		answered <- answer{resp, err}
	}()
	select {
	case a := <-answered:
		return a.resp, a.err
	case <-ack:
	}
	time.Sleep(d)
	cancel()
	if cut {
		return nil, mcpsynctest.ErrListenCut
	}
	<-answered
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID, Result: json.RawMessage(`{}`)}, nil
}

func (c *wireConn) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	c.Interface.SetNotificationHandler(func(m mcp.JSONRPCNotification) {
		w := c.w
		w.mu.Lock()
		rewrite, ackFilter, delay := w.rewrite, w.ackFilter, w.ackDelay
		w.mu.Unlock()
		if m.Method == mcp.MethodNotificationSubscriptionsAcknowledged && delay > 0 {
			go func() {
				time.Sleep(delay)
				c.deliver(h, m, rewrite, ackFilter)
			}()
			return
		}
		c.deliver(h, m, rewrite, ackFilter)
	})
}

func (c *wireConn) deliver(h func(mcp.JSONRPCNotification), m mcp.JSONRPCNotification,
	rewrite func(mcp.JSONRPCNotification) []mcp.JSONRPCNotification, ackFilter func([]string) []string) {
	isAck := m.Method == mcp.MethodNotificationSubscriptionsAcknowledged
	id := streamID(m)
	if isAck && ackFilter != nil {
		m = withAck(m, ackFilter(ackURIs(m)))
	}
	out := []mcp.JSONRPCNotification{m}
	if rewrite != nil {
		out = rewrite(m)
	}
	for _, o := range out {
		h(o)
	}
	if isAck {
		ch := c.ackChan(id)
		c.mu.Lock()
		select {
		case <-ch:
		default:
			close(ch)
		}
		c.mu.Unlock()
	}
}

func (c *wireConn) Close() error {
	c.w.mu.Lock()
	closing := c.w.closing
	c.w.mu.Unlock()
	if closing != nil {
		closing()
	}
	c.closed.Store(true)
	return c.Interface.Close()
}

// Unwrap returns the transport the wire wraps.
func (c *wireConn) Unwrap() transport.Interface { return c.Interface }

// RequiresLegacyProtocol reports what the inner transport reports.
func (c *wireConn) RequiresLegacyProtocol() bool {
	l, ok := c.Interface.(interface{ RequiresLegacyProtocol() bool })
	return ok && l.RequiresLegacyProtocol()
}

// SetConnectionLostHandler forwards to the inner transport if it has one.
func (c *wireConn) SetConnectionLostHandler(handler func(error)) {
	if s, ok := c.Interface.(interface{ SetConnectionLostHandler(func(error)) }); ok {
		s.SetConnectionLostHandler(handler)
	}
}

// SetRequestHandler forwards to the inner transport if it takes requests.
func (c *wireConn) SetRequestHandler(handler transport.RequestHandler) {
	if b, ok := c.Interface.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(handler)
	}
}

// SetProtocolVersion forwards to the inner transport if it is HTTP.
func (c *wireConn) SetProtocolVersion(version string) {
	if h, ok := c.Interface.(transport.HTTPConnection); ok {
		h.SetProtocolVersion(version)
	}
}

// requestURI returns the uri of a request's params, if any.
func requestURI(params any) string {
	raw, _ := json.Marshal(params)
	var p struct {
		URI string `json:"uri"`
	}
	_ = json.Unmarshal(raw, &p)
	return p.URI
}

// listenURIs returns the resources a subscriptions/listen request names.
func listenURIs(params any) []string {
	raw, _ := json.Marshal(params)
	var p mcp.SubscriptionsListenParams
	_ = json.Unmarshal(raw, &p)
	return p.Notifications.ResourceSubscriptions
}

// streamID returns the listen stream a notification is tagged with.
func streamID(m mcp.JSONRPCNotification) string {
	if id, ok := m.Params.Meta[mcp.MetaKeySubscriptionID]; ok {
		return fmt.Sprint(id)
	}
	if meta, ok := m.Params.AdditionalFields["_meta"].(map[string]any); ok {
		if id, ok := meta[mcp.MetaKeySubscriptionID]; ok {
			return fmt.Sprint(id)
		}
	}
	return ""
}

// ackURIs returns the URIs an acknowledgement names.
func ackURIs(m mcp.JSONRPCNotification) []string {
	switch f := m.Params.AdditionalFields["notifications"].(type) {
	case mcp.SubscriptionFilter:
		return f.ResourceSubscriptions
	case map[string]any:
		var out []string
		for _, x := range f["resourceSubscriptions"].([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

// withAck returns m, an acknowledgement, naming uris instead.
func withAck(m mcp.JSONRPCNotification, uris []string) mcp.JSONRPCNotification {
	fields := maps.Clone(m.Params.AdditionalFields)
	fields["notifications"] = mcp.SubscriptionFilter{ResourceSubscriptions: uris}
	m.Params.AdditionalFields = fields
	return m
}

// withStreamID returns m tagged with stream id ("" removes the tag).
func withStreamID(m mcp.JSONRPCNotification, id string) mcp.JSONRPCNotification {
	meta := maps.Clone(m.Params.Meta)
	if meta == nil {
		meta = map[string]any{}
	}
	if id == "" {
		delete(meta, mcp.MetaKeySubscriptionID)
	} else {
		meta[mcp.MetaKeySubscriptionID] = id
	}
	m.Params.Meta = meta
	return m
}

// errLedgerDown is what a fault ledger answers a write it refuses.
var errLedgerDown = errors.New("ledger unavailable")

// faultLedger is a ledger (a memory one unless a test gives it another to
// keep its records in) that refuses the writes and counter reservations a
// test arms, runs a hook ahead of a chosen write, and stops as a process
// killed between two writes does.
type faultLedger struct {
	ledger.Ledger
	mu          sync.Mutex // protects every field below
	failCAS     func(key string, next *ledger.Record) bool
	nCAS        int
	failCounter ledger.Counter
	nNext       int
	failed      int
	before      func(key string, next *ledger.Record) bool
	hook        func()
	// crash picks the write from which crashAfter counts, crashKey is its
	// key once made, crashLeft the writes of that key still to be made,
	// and dead says the ledger takes no write any more.
	crash     func(key string, next *ledger.Record) bool
	crashKey  string
	crashLeft int
	dead      bool
}

func newFaultLedger() *faultLedger { return &faultLedger{Ledger: ledger.NewMemory(nil)} }

// crashAfter has the ledger stop as a process killed right after the nth
// write of a key counted from the first write match picks (that one is the
// first): that write is made, and every write and counter reservation
// after it fails. What the ledger then holds is what a restarted process
// finds.
func (l *faultLedger) crashAfter(n int, match func(key string, next *ledger.Record) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.crash, l.crashKey, l.crashLeft = match, "", n
}

// crashed reports whether the ledger stopped (crashAfter).
func (l *faultLedger) crashed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// made counts a write of key that was made, toward the crash armed.
func (l *faultLedger) made(key string, next *ledger.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crash == nil || l.dead {
		return
	}
	if l.crashKey == "" && l.crash(key, next) {
		l.crashKey = key
	}
	if key == l.crashKey {
		if l.crashLeft--; l.crashLeft <= 0 {
			l.dead = true
		}
	}
}

// failWrites makes the next n writes whose record match picks fail.
func (l *faultLedger) failWrites(n int, match func(key string, next *ledger.Record) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failCAS, l.nCAS = match, n
}

// failReservations makes the next n reservations of counter fail.
func (l *faultLedger) failReservations(n int, counter ledger.Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failCounter, l.nNext = counter, n
}

// beforeWrite runs hook, once, ahead of the first write match picks,
// whether that write is then refused (failWrites) or made.
func (l *faultLedger) beforeWrite(match func(key string, next *ledger.Record) bool, hook func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.before, l.hook = match, hook
}

// slowWrite makes the next write match picks wait until slow is closed;
// opening is closed once it waits.
func (l *faultLedger) slowWrite(match func(key string, next *ledger.Record) bool) (opening, slow chan struct{}) {
	opening, slow = make(chan struct{}), make(chan struct{})
	l.beforeWrite(match, func() {
		close(opening)
		<-slow
	})
	return opening, slow
}

// failures counts the writes and reservations refused so far.
func (l *faultLedger) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *faultLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []mcpsync.OutboxEntry) (uint64, bool, error) {
	l.mu.Lock()
	var hook func()
	if l.hook != nil && next != nil && l.before(key, next) {
		hook, l.hook = l.hook, nil
	}
	refuse := l.nCAS > 0 && l.failCAS != nil && next != nil && l.failCAS(key, next)
	if refuse {
		l.nCAS--
		l.failed++
	}
	dead := l.dead
	l.mu.Unlock()
	if dead {
		return 0, false, errLedgerDown
	}
	if hook != nil {
		hook()
	}
	if refuse {
		return 0, false, errLedgerDown
	}
	seq, ok, err := l.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
	if ok && err == nil {
		l.made(key, next)
	}
	return seq, ok, err
}

func (l *faultLedger) Next(ctx context.Context, counter ledger.Counter, n uint64) (uint64, error) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return 0, errLedgerDown
	}
	if l.nNext > 0 && counter == l.failCounter {
		l.nNext--
		l.failed++
		l.mu.Unlock()
		return 0, errLedgerDown
	}
	l.mu.Unlock()
	return l.Ledger.Next(ctx, counter, n)
}

// openingWrite picks the write that opens a generation after the first:
// the record goes to SUBSCRIBING with a new generation number. A reopen
// closes the generation before it in the same write.
func openingWrite(_ string, next *ledger.Record) bool {
	return next.State == ledger.StateSubscribing && next.Sub != nil && next.Sub.Generation >= 2
}

// activatingWrite picks the write that activates a generation after the
// first.
func activatingWrite(_ string, next *ledger.Record) bool {
	return next.State == ledger.StateActive && next.Sub != nil && next.Sub.Generation >= 2
}

// openingWriteOf picks the opening write (openingWrite) of uri's record.
func openingWriteOf(uri string) func(string, *ledger.Record) bool {
	return func(key string, next *ledger.Record) bool { return key == uri && openingWrite(key, next) }
}

// writeTo picks the writes whose record goes to state.
func writeTo(state ledger.SubscriptionState) func(string, *ledger.Record) bool {
	return func(_ string, next *ledger.Record) bool { return next.State == state }
}

// writeOf picks the writes of uri's record that go to state.
func writeOf(uri string, state ledger.SubscriptionState) func(string, *ledger.Record) bool {
	return func(key string, next *ledger.Record) bool { return key == uri && next.State == state }
}

// reopenWrite is a write of a reopen that can fail, and what picks it.
type reopenWrite struct {
	name  string
	match func(string, *ledger.Record) bool
}

// reopenWrites are the writes of a reopen that can fail: the one that
// closes the generation and opens the next, and the next one's activation.
var reopenWrites = []reopenWrite{
	{"open-next-generation", openingWrite},
	{"activate-next-generation", activatingWrite},
}
