package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

func subscribeAllClient(t *testing.T, srv *mcpsynctest.Server, version string) *mcpsync.Client {
	t.Helper()
	c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: version, NoResume: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// serverOfMany returns a server holding n resources, and their URIs: each
// has text "v1 of" its URI.
func serverOfMany(n int) (*mcpsynctest.Server, []string) {
	srv := mcpsynctest.NewServer(nil)
	uris := numbered("file:///all/%03d.md", n)
	for _, u := range uris {
		srv.Set(u, "text/markdown", "v1 of "+u)
	}
	return srv, uris
}

// SubscribeAll opens every URI with its first version, in order; from
// 2026-07-28 on one listen stream carries them all, and before it each has
// its own resources/subscribe.
func TestSubscribeAll(t *testing.T) {
	eachEra(t, func(t *testing.T, era wiring) {
		srv, uris := serverOfMany(200)
		c := subscribeAllClient(t, srv, era.version)
		subs, err := c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		require.Len(t, subs, len(uris))
		for i, sub := range subs {
			assert.Equal(t, uris[i], sub.URI)
			assert.Equal(t, ledger.ModePush, sub.Mode, uris[i])
			entry, err := c.Lookup(uris[i])
			require.NoError(t, err)
			assert.Equal(t, "v1 of "+uris[i], entry.Contents[0].Text)
		}
		if era.version == "2026-07-28" {
			assert.Equal(t, 1, srv.SubscribeCalls(), "one listen stream for every URI")
		} else {
			assert.Equal(t, len(uris), srv.SubscribeCalls())
		}
		for _, uri := range uris {
			assert.True(t, srv.Subscribed(uri), uri)
		}

		// They are notified like any subscription.
		srv.Set(uris[7], "text/markdown", "v2")
		quiesce()
		entry, err := c.Lookup(uris[7])
		require.NoError(t, err)
		assert.Equal(t, "v2", entry.Contents[0].Text)
	})
}

// A URI that fails fails alone, named in the error; the others open. One
// that never got watched is not left on the listen stream.
func TestSubscribeAllFailures(t *testing.T) {
	eachEra(t, func(t *testing.T, era wiring) {
		srv := mcpsynctest.NewServer(nil)
		const a, b, gone, bad = "file:///all/a.md", "file:///all/b.md", "file:///all/gone.md", "::not a uri"
		srv.Set(a, "text/markdown", "a")
		srv.Set(b, "text/markdown", "b")
		c := subscribeAllClient(t, srv, era.version)
		subs, err := c.SubscribeAll(t.Context(), []string{a, bad, gone, b})
		require.Error(t, err)
		assert.ErrorIs(t, err, mcpsync.ErrInvalidURI)
		assert.ErrorIs(t, err, mcpsync.ErrNotFound)
		assert.Contains(t, err.Error(), gone)
		assert.Equal(t, mcpsync.Subscription{}, subs[1], "the URI that is none")
		for _, i := range []int{0, 3} {
			entry, err := c.Lookup(subs[i].URI)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, subs[i].Mode)
			assert.NotEmpty(t, entry.Contents)
		}
		// A resource not found stays subscribed, as with Subscribe:
		// it is read when the server says it exists.
		assert.Equal(t, ledger.StateTombstonePending, subs[2].State)
		srv.Set(gone, "text/markdown", "back")
		quiesce()
		entry, err := c.Lookup(gone)
		require.NoError(t, err)
		assert.Equal(t, "back", entry.Contents[0].Text)
	})
}

// A URI whose Subscribe fails before it is watched (here: the subject was
// revoked, so nothing is subscribed) is taken back from the listen stream
// SubscribeAll had it wanted on: the next stream does not carry it.
func TestSubscribeAllTakesBackWhatItDidNotOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		const a, b = "file:///all/a.md", "file:///all/b.md"
		srv.Set(a, "text/markdown", "a")
		srv.Set(b, "text/markdown", "b")
		c := subscribeAllClient(t, srv, "2026-07-28")
		_, err := c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		_, err = c.Engine().RevokeSubject(alice)
		require.NoError(t, err)
		_, err = c.SubscribeAll(t.Context(), []string{b})
		require.ErrorIs(t, err, mcpsync.ErrRevoked)

		// The next replacement of the stream (a's close) carries nothing
		// SubscribeAll wanted.
		_, err = c.Unsubscribe(t.Context(), a)
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(b), "b, never subscribed, is on the listen stream")
		assert.False(t, srv.Subscribed(a))
	})
}

// A cancelled context ends SubscribeAll: every URI it had not started is
// told so.
func TestSubscribeAllCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set("file:///all/a.md", "text/markdown", "a")
		c := subscribeAllClient(t, srv, "2026-07-28")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		uris := numbered("file:///all/%03d.md", 300)
		subs, err := c.SubscribeAll(ctx, uris)
		require.ErrorIs(t, err, context.Canceled)
		assert.Len(t, subs, len(uris))
		var joined interface{ Unwrap() []error }
		require.True(t, errors.As(err, &joined))
		assert.Len(t, joined.Unwrap(), len(uris), "every URI says why it is not open")
		for sub, err := range c.Engine().Subscriptions() {
			require.NoError(t, err)
			t.Errorf("%s opened", sub.URI)
		}
	})
}

// 2026-07-28. A caller unsubscribes x while another subscribes it again,
// with Subscribe or with SubscribeAll, while a third URI's stream
// replacement waits for its acknowledgement. Whichever call subscribes it
// again, the two serialize on x: the Unsubscribe's close is decided (CLOSED,
// not UNSUBSCRIBE_UNKNOWN, for an acknowledgement nobody lost), and x is
// then open again in a newer generation, in push mode, notified by the
// listen stream.
func TestUnsubscribeRacingASubscribeAllClosesItsGeneration(t *testing.T) {
	eachCase(t, []bool{false, true}, named("Subscribe", "SubscribeAll"), func(t *testing.T, all bool) {
		const z = "file:///b35/race/z.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(z, "text/markdown", "z")
		r.subscribe()

		// A replacement is under way (z's) and waits for its
		// acknowledgement; the Unsubscribe of x queues behind it.
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		zDone := goCall(t.Context(), r.c.Subscribe, z)
		synctest.Wait()
		<-hold.Arrived()

		unsub := goCall(t.Context(), r.c.Unsubscribe, faultURI)
		synctest.Wait()
		resub := make(chan error, 1)
		go func() {
			if all {
				_, err := r.c.SubscribeAll(t.Context(), []string{faultURI})
				resub <- err
				return
			}
			_, err := r.c.Subscribe(t.Context(), faultURI)
			resub <- err
		}()
		synctest.Wait()
		hold.Release()

		require.NoError(t, (<-zDone).err)
		u := <-unsub
		require.NoError(t, u.err)
		require.NoError(t, <-resub)
		quiesce()

		assert.Equal(t, ledger.StateClosed, u.val.State,
			"the Unsubscribe that was answered left its generation %s", u.val.State)
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.ModePush, sub.Mode)
		assert.True(t, r.srv.Subscribed(faultURI))
		assert.Greater(t, sub.SubscriptionGeneration, u.val.SubscriptionGeneration)
	})
}

// SubscribeAll of 200 URIs while the server fails every 7th subscribe,
// listen and unsubscribe request; then half of them are Unsubscribed
// concurrently, a third of those with a context that ends a moment in, and
// a Reconnect comes in the middle (or not). Faults then stop. Once settled,
// every URI is where its caller left it, and the server agrees: a watched
// URI is open in the current session and serves current content, pushed
// with the server notifying it or polled with a reason; an unsubscribed one
// is not open and not notified. Both eras.
func TestEveryURIEndsWhereItsCallerLeftItUnderFaults(t *testing.T) {
	eachEraAnd(t, []bool{false, true}, func(reconnect bool) string { return fmt.Sprintf("reconnect=%v", reconnect) }, func(t *testing.T, w wiring, reconnect bool) {
		const n = 200
		uris := numbered("file:///b42/scale/%03d.md", n)
		r := buildRig(t, w, rigConfig{uris: uris})
		faulty := func(method, _ string, k int) bool {
			switch method {
			case string(mcp.MethodResourcesSubscribe), string(mcp.MethodResourcesUnsubscribe), string(mcp.MethodSubscriptionsListen):
				return k%7 == 0
			}
			return false
		}
		r.wire.refuseWhen(faulty)
		_, err := r.c.SubscribeAll(t.Context(), uris)
		t.Logf("SubscribeAll: %v", err != nil)
		quiesce()

		mustOpen, mustClosed := map[string]bool{}, map[string]bool{}
		var mu sync.Mutex
		unsubErrs := map[string]error{}
		var wg sync.WaitGroup
		for i, u := range uris {
			if i%2 == 0 {
				mustOpen[u] = true
				continue
			}
			ctx, cancel := context.WithCancel(t.Context())
			if i%3 == 0 {
				time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
			}
			wg.Go(func() {
				defer cancel()
				sub, err := r.c.Unsubscribe(ctx, u)
				mu.Lock()
				if err == nil {
					mustClosed[u] = true
				} else {
					unsubErrs[u] = fmt.Errorf("%w (returned %s)", err, sub.State)
				}
				mu.Unlock()
			})
		}
		if reconnect {
			wg.Go(func() {
				time.Sleep(2 * time.Millisecond)
				_ = r.c.Reconnect(t.Context())
			})
		}
		wg.Wait()
		t.Logf("%d Unsubscribes returned nil", len(mustClosed))
		quiesce()
		time.Sleep(10 * time.Minute)
		quiesce()
		r.wire.refuseWhen(nil)
		minutes(30)
		defer func() {
			if t.Failed() {
				for u, err := range unsubErrs {
					t.Logf("Unsubscribe(%s): %v", u, err)
				}
			}
		}()
		r.requireWhereLeft(uris, mustOpen, mustClosed)
	})
}

// batchLedger is a ledger (the memory ledger, or a fault ledger) taking
// many writes in one call (ledger.Batching), as a durable ledger with group
// commit does. It keeps the keys of each call, and those whose first
// record a CompareAndSwap of its own wrote. Its hooks make a batch misbehave.
type batchLedger struct {
	ledger.Ledger
	mu      sync.Mutex // protects every field below
	batches [][]string
	alone   []string
	// fail, if set, picks the swaps of a batch that fail, each alone, with
	// the error of a ledger that is down.
	fail func(key string) bool
	// answer, if set, rewrites the results of each batch, as a ledger
	// that breaks the contract of ledger.Batching would answer.
	answer func(results []ledger.SwapResult) []ledger.SwapResult
	// during, if set, runs in each batch before its writes.
	during func()
	// loads, if set, rewrites what each LoadAll answers.
	loads func(records []*ledger.Record) []*ledger.Record
}

func (l *batchLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []ledger.OutboxEntry) (uint64, bool, error) {
	if prev == 0 {
		l.mu.Lock()
		l.alone = append(l.alone, key)
		l.mu.Unlock()
	}
	return l.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
}

func (l *batchLedger) CompareAndSwapAll(ctx context.Context, swaps []ledger.Swap) []ledger.SwapResult {
	l.mu.Lock()
	fail, answer, during := l.fail, l.answer, l.during
	l.mu.Unlock()
	if during != nil {
		during()
	}
	keys := make([]string, len(swaps))
	results := make([]ledger.SwapResult, len(swaps))
	for i, s := range swaps {
		keys[i] = s.Key
		r := &results[i]
		if fail != nil && fail(s.Key) {
			r.Err = errLedgerDown
			continue
		}
		r.FirstSeq, r.OK, r.Err = l.Ledger.CompareAndSwap(ctx, s.Key, s.Prev, s.Next, s.Entries)
	}
	l.mu.Lock()
	l.batches = append(l.batches, keys)
	l.mu.Unlock()
	if answer != nil {
		results = answer(results)
	}
	return results
}

func (l *batchLedger) LoadAll(ctx context.Context, keys []string) ([]*ledger.Record, error) {
	records, err := ledger.LoadEach(ctx, l, keys)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	loads := l.loads
	l.mu.Unlock()
	if loads != nil {
		records = loads(records)
	}
	return records, nil
}

// set changes l's hooks under its lock.
func (l *batchLedger) set(f func(l *batchLedger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// written returns the keys of every batch so far.
func (l *batchLedger) written() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches)
}

// senders wraps each transport of dial so that sent is told of every
// subscribe request (resources/subscribe, subscriptions/listen) before it
// leaves, with the URIs it names.
func senders(dial mcpsync.Dialer, sent func(uris []string)) mcpsync.Dialer {
	return func(ctx context.Context) (transport.Interface, error) {
		t, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return &sender{Interface: t, sent: sent}, nil
	}
}

type sender struct {
	transport.Interface
	sent func(uris []string)
}

func (s *sender) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	switch req.Method {
	case string(mcp.MethodResourcesSubscribe):
		s.sent([]string{requestURI(req.Params)})
	case string(mcp.MethodSubscriptionsListen):
		s.sent(listenURIs(req.Params))
	}
	return s.Interface.SendRequest(ctx, req)
}

// On a ledger that takes many writes in one call, SubscribeAll writes the
// first subscriptions of the URIs the ledger has never seen in a few
// calls of many each, each before the request that subscribes any of its
// URIs leaves (each must be durable by then), instead of one at a time in
// their passes; URIs it knows already are left to their passes.
func TestSubscribeAllWritesItsNewURIsInBatchesBeforeTheirRequestsLeave(t *testing.T) {
	eachEra(t, func(t *testing.T, era wiring) {
		srv, uris := serverOfMany(300)
		l := &batchLedger{Ledger: ledger.NewMemory(nil)}
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		var early []string // URIs asked for before their record was written
		var mu sync.Mutex
		dial := senders(srv.Dialer(), func(asked []string) {
			for _, uri := range asked {
				if r, err := l.Load(context.Background(), uri); err != nil || r == nil || r.Sub == nil {
					mu.Lock()
					early = append(early, uri)
					mu.Unlock()
				}
			}
		})
		c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: e, Subject: alice, ProtocolVersion: era.version, NoResume: true})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		_, err = c.Subscribe(t.Context(), uris[0])
		require.NoError(t, err)
		subs, err := c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		for i, sub := range subs {
			assert.Equal(t, ledger.ModePush, sub.Mode, uris[i])
			entry, err := c.Lookup(uris[i])
			require.NoError(t, err)
			assert.Equal(t, "v1 of "+uris[i], entry.Contents[0].Text)
		}
		_, err = c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)

		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, early, "subscribed before their first subscription was written")
		l.mu.Lock()
		defer l.mu.Unlock()
		// The Subscribe's alone, by its pass: a batch of one shares
		// nothing.
		assert.Equal(t, []string{uris[0]}, l.alone, "first records written one at a time")
		// SubscribeAll's: every URI but the one known, in order; none
		// for the URIs all known. A listen stream carries every URI,
		// so all are written before it leaves.
		assert.Equal(t, uris[1:], slices.Concat(l.batches...))
		if era.version == "2026-07-28" {
			assert.Len(t, l.batches, 1)
		}
	})
}

// namedUnwritten has every subscribe and listen request of r checked as it
// leaves: each URI it names must have an open subscription in l. It returns the URIs
// named before their subscription was written.
func namedUnwritten(r *rig, l ledger.Ledger) func() []string {
	var mu sync.Mutex
	var early []string
	r.wire.set(func(w *faultWire) {
		w.park = func(req wireRequest) <-chan struct{} {
			uris := req.uris
			if req.method == string(mcp.MethodResourcesSubscribe) {
				uris = []string{req.uri}
			}
			for _, uri := range uris {
				rec, err := l.Load(context.Background(), uri)
				if err != nil || rec == nil || rec.Sub == nil || rec.CloseEpoch != 0 {
					mu.Lock()
					early = append(early, uri)
					mu.Unlock()
				}
			}
			return nil
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(early)
	}
}

// 2026-07-28. A listen stream names a URI only once its subscription is
// written (durable, on a durable ledger): every request that asks the
// server to notify a URI leaves after it, whichever way the URI was asked
// for and whatever the batch that was to write it did. Here x's opening
// write is held while y, asked for with it, gets its stream: that stream
// does not carry x, which a later one does once x is written. Every way a
// first subscription is left to its URI's own pass: its write failed in
// the batch, the ledger takes no batch (SubscribeAll, or Subscribe beside
// another), or the ledger had x, closed.
func TestAListenStreamNamesOnlyURIsWhoseSubscriptionIsWritten(t *testing.T) {
	const x, y = "file:///written/x.md", "file:///written/y.md"
	for _, tc := range []struct {
		name     string
		batching bool
		fail     bool // x's first subscription fails in its batch
		closed   bool // x was subscribed and unsubscribed before
		apart    bool // asked for by two Subscribes, not one SubscribeAll
	}{
		{name: "failed-in-its-batch", batching: true, fail: true},
		{name: "ledger-without-batches"},
		{name: "subscribes-on-a-ledger-without-batches", apart: true},
		{name: "closed-before", batching: true, closed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fl := newFaultLedger()
				var l ledger.Ledger = fl
				if tc.batching {
					bl := &batchLedger{Ledger: fl}
					if tc.fail {
						bl.fail = func(key string) bool { return key == x }
					}
					l = bl
				}
				e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
				require.NoError(t, err)
				r := buildRig(t, eras[1], rigConfig{uris: []string{x, y}, opts: mcpsync.ClientOptions{Engine: e}})
				early := namedUnwritten(r, l)
				r.subscribe()
				if tc.closed {
					r.watch(x)
					_, err = r.c.Unsubscribe(t.Context(), x)
					require.NoError(t, err)
					quiesce()
				}

				opening, slow := fl.slowWrite(writeOf(x, ledger.StateSubscribing))
				done := make(chan error, 2)
				if tc.apart {
					go func() { _, err := r.c.Subscribe(t.Context(), x); done <- err }()
					<-opening
					go func() { _, err := r.c.Subscribe(t.Context(), y); done <- err }()
				} else {
					go func() { _, err := r.c.SubscribeAll(t.Context(), []string{x, y}); done <- err; done <- nil }()
					<-opening
				}
				quiesce() // y's stream goes out while x's write is held
				assert.Empty(t, early(), "named on a listen stream before its subscription was written")
				close(slow)
				require.NoError(t, <-done)
				require.NoError(t, <-done)
				quiesce()
				assert.Empty(t, early(), "named on a listen stream before its subscription was written")
				r.requireWhereLeft([]string{faultURI, x, y}, map[string]bool{faultURI: true, x: true, y: true}, nil)
			})
		})
	}
}

// A ledger that takes batches but answers one with too many results, too
// few, or out of order (here: the write of the last swap failed, and the
// results come reversed) is not trusted: SubscribeAll neither panics nor
// takes a write for made that was not, OnError is told an error matching
// ledger.ErrLedgerCorrupt, and every URI is opened by its own pass, pushed,
// with its first read. Both eras.
func TestABatchTheLedgerMisanswersIsToldAndEveryURIStillOpens(t *testing.T) {
	uris := numbered("file:///misanswered/%02d.md", 8)
	for _, tc := range []struct {
		name   string
		fail   func(key string) bool
		answer func([]ledger.SwapResult) []ledger.SwapResult
		loads  func([]*ledger.Record) []*ledger.Record
	}{
		{name: "one-result-too-many", answer: func(rs []ledger.SwapResult) []ledger.SwapResult {
			return append(rs, ledger.SwapResult{OK: true})
		}},
		{name: "one-result-too-few", answer: func(rs []ledger.SwapResult) []ledger.SwapResult {
			return rs[:len(rs)-1]
		}},
		{name: "one-record-too-few", loads: func(rs []*ledger.Record) []*ledger.Record {
			return rs[:len(rs)-1]
		}},
		{name: "out-of-order", fail: func(key string) bool { return key == uris[len(uris)-1] },
			answer: func(rs []ledger.SwapResult) []ledger.SwapResult {
				slices.Reverse(rs)
				return rs
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachEra(t, func(t *testing.T, w wiring) {
				l := &batchLedger{Ledger: ledger.NewMemory(nil), fail: tc.fail, answer: tc.answer, loads: tc.loads}
				e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
				require.NoError(t, err)
				r := buildRig(t, w, rigConfig{uris: uris, opts: mcpsync.ClientOptions{Engine: e}})
				early := namedUnwritten(r, l)
				subs, err := r.c.SubscribeAll(t.Context(), uris)
				require.NoError(t, err)
				for i, sub := range subs {
					assert.Equal(t, ledger.ModePush, sub.Mode, uris[i])
					entry, err := r.c.Lookup(uris[i])
					require.NoError(t, err, uris[i])
					assert.Equal(t, "v1", entry.Contents[0].Text)
				}
				quiesce()
				assert.Empty(t, early(), "named on a listen stream before its subscription was written")
				told := slices.ContainsFunc(r.errs.list(), func(err error) bool { return errors.Is(err, ledger.ErrLedgerCorrupt) })
				assert.True(t, told, "OnError told of the batch the ledger misanswered: %v", r.errs.list())
			})
		})
	}
}

// Before 2026-07-28 SubscribeAll writes its new URIs' first subscriptions a
// batch at a time. A caller that gives up (its context ends) or a Close
// while a batch is written stops it there: no later batch is written, so
// no URI it had not started is opened, none in a session the Client no
// longer drives (the engine is free for another Client once Close
// returned), and every URI says why it is not open.
func TestSubscribeAllWritesNoBatchOnceCancelledOrClosed(t *testing.T) {
	eachCase(t, []bool{false, true}, named("cancelled", "closed"), func(t *testing.T, closing bool) {
		uris := numbered("file:///stopped/%03d.md", 600) // three batches
		l := &batchLedger{Ledger: ledger.NewMemory(nil)}
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		r := buildRig(t, eras[0], rigConfig{uris: uris, opts: mcpsync.ClientOptions{Engine: e}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var once sync.Once
		closed := make(chan error, 1)
		l.set(func(l *batchLedger) {
			l.during = func() {
				once.Do(func() {
					if closing {
						// On another goroutine, as a program closes: Close
						// waits for the batch under way.
						go func() { closed <- r.c.Close() }()
						synctest.Wait()
					} else {
						cancel()
					}
				})
			}
		})
		_, err = r.c.SubscribeAll(ctx, uris)
		if closing {
			require.ErrorIs(t, err, mcpsync.ErrClientClosed)
			require.NoError(t, <-closed)
		} else {
			require.ErrorIs(t, err, context.Canceled)
		}
		quiesce()
		assert.Len(t, l.written(), 1, "batches written: the one under way, and no later one")
		for _, uri := range uris[256:] {
			_, err := e.Subscription(uri)
			assert.ErrorIs(t, err, mcpsync.ErrUnknownURI, "%s, never started, was opened", uri)
		}
	})
}
