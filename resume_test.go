package mcpsync_test

// A worker restarted on its ledger: Connect resumes the subscriptions the
// earlier process left open, reads them in a new generation, and a deletion
// that happened while nothing watched reaches the outbox.

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

const (
	// keptRaw is spelled the way its server spells it; its key is not.
	keptRaw    = "FILE:///docs/kept.md"
	changedURI = "file:///docs/changed.md"
	goneURI    = "file:///docs/gone.md"
)

// engineOn is a new engine on ledger, as a restarted process builds it.
func engineOn(t *testing.T, store ledger.Ledger) *mcpsync.Engine {
	t.Helper()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: store})
	require.NoError(t, err)
	return e
}

// firstRun subscribes uris through a client on a new engine over ledger,
// waits for their first versions and closes it, as a worker that stops.
func firstRun(t *testing.T, srv *mcpsynctest.Server, w wiring, store ledger.Ledger, uris ...string) {
	t.Helper()
	r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: engineOn(t, store)}})
	r.watch(uris...)
	require.NoError(t, r.c.WaitForSync(t.Context()))
	require.NoError(t, r.c.Close())
}

// tombstoneOf waits for the outbox entry that tombstones uri.
func tombstoneOf(t *testing.T, e *mcpsync.Engine, uri string) mcpsync.OutboxEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	for entry, err := range e.Consume(ctx, "index") {
		require.NoError(t, err, "no tombstone of %s reached the outbox", uri)
		if entry.URI == uri && entry.Reason == ledger.InvalidateTombstoned {
			return entry
		}
	}
	t.Fatalf("the outbox ended without a tombstone of %s", uri)
	return mcpsync.OutboxEntry{}
}

func TestConnectResumesSubscriptionsOfTheLedger(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: true})
		for _, u := range []string{keptRaw, changedURI, goneURI} {
			srv.Set(u, "text/markdown", "v1")
		}
		store := ledger.NewMemory(nil)
		firstRun(t, srv, w, store, keptRaw, changedURI, goneURI)

		// While no process watches: one resource changes, one goes.
		srv.Set(changedURI, "text/markdown", "v2")
		srv.Delete(goneURI)
		readsBefore := srv.Reads(keptRaw)

		e := engineOn(t, store)
		r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: e}})
		require.NoError(t, r.c.WaitForSync(t.Context()))

		gen := e.SessionGeneration()
		for _, u := range []string{keptRaw, changedURI} {
			sub, err := e.Subscription(u)
			require.NoError(t, err)
			assert.Equal(t, gen, sub.SessionGeneration, "%s is open in the new session", u)
			assert.Equal(t, ledger.StateActive, sub.State, u)
		}
		assert.Greater(t, srv.Reads(keptRaw), readsBefore, "resumed URIs are read again, as their server spells them")
		text, err := r.text(changedURI)
		require.NoError(t, err)
		assert.Equal(t, "v2", text, "a change made during the downtime is read")
		text, err = r.text(keptRaw)
		require.NoError(t, err)
		assert.Equal(t, "v1", text)

		tomb := tombstoneOf(t, e, goneURI)
		assert.Equal(t, goneURI, tomb.URI)
		sub, err := e.Subscription(goneURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateTombstoned, sub.State, "a deletion during the downtime is confirmed")
	})
}

// Resuming is the ledger's intent for this client only: NoResume leaves
// everything closed, and another principal's subscriptions are not opened
// for this one.
func TestConnectResumesOnlyItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := eras[0]
		srv := mcpsynctest.NewServer(nil)
		srv.Set(changedURI, "text/markdown", "v1")
		store := ledger.NewMemory(nil)
		firstRun(t, srv, w, store, changedURI)

		for _, tc := range []struct {
			name      string
			principal string
			noResume  bool
		}{
			{"NoResume", alice, true},
			{"another principal", bob, false},
		} {
			e := engineOn(t, store)
			reads := srv.Reads(changedURI)
			c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Engine: e, Subject: tc.principal, ProtocolVersion: w.version, NoResume: tc.noResume})
			require.NoError(t, err)
			quiesce()
			require.NoError(t, c.WaitForSync(t.Context()), tc.name)
			sub, err := e.Subscription(changedURI)
			require.NoError(t, err)
			assert.NotEqual(t, e.SessionGeneration(), sub.SessionGeneration, "%s: not opened in the new session", tc.name)
			assert.Equal(t, reads, srv.Reads(changedURI), "%s: not read", tc.name)
			require.NoError(t, c.Close())
		}
	})
}

// An Unsubscribe called as soon as Connect returns wins over the resume
// under way: the URI ends closed, and the server keeps no subscription.
func TestUnsubscribeRacingResumeWins(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(changedURI, "text/markdown", "v1")
		store := ledger.NewMemory(nil)
		firstRun(t, srv, w, store, changedURI)

		e := engineOn(t, store)
		r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: e}})
		_, err := r.c.Unsubscribe(t.Context(), changedURI)
		require.NoError(t, err)
		quiesce()
		time.Sleep(time.Hour)
		quiesce()

		sub, err := e.Subscription(changedURI)
		require.NoError(t, err)
		assert.NotEqual(t, ledger.StateActive, sub.State, "the Unsubscribe stands")
		assert.False(t, srv.Subscribed(changedURI), "the server keeps no subscription")
		require.NoError(t, r.c.WaitForSync(t.Context()))
	})
}

// Two deployments of one server product (the same name) behind one shared
// ledger: each worker resumes only the subscriptions it opened on its own
// server. Resuming the other's would read them where they do not exist,
// and tombstone resources that are alive on the server that has them.
func TestResumeOnlyTheSubscriptionsOfItsOwnServer(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const east, west = "file:///east/a.md", "file:///west/b.md"
		servers := map[string]*mcpsynctest.Server{}
		for id, uri := range map[string]string{"east": east, "west": west} {
			srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: true})
			srv.Set(uri, "text/markdown", "v1 "+id)
			servers[id] = srv
		}
		store := ledger.NewMemory(nil)
		run := func() map[string]*rig {
			rigs := map[string]*rig{}
			for _, id := range []string{"east", "west"} {
				rigs[id] = buildRig(t, w, rigConfig{srv: servers[id],
					opts: mcpsync.ClientOptions{Engine: engineOn(t, store), ServerID: id}})
			}
			return rigs
		}
		first := run()
		for id, uri := range map[string]string{"east": east, "west": west} {
			_, err := first[id].c.Subscribe(t.Context(), uri)
			require.NoError(t, err)
			require.NoError(t, first[id].c.WaitForSync(t.Context()))
		}
		for _, r := range first {
			require.NoError(t, r.c.Close())
		}

		second := run()
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		for id, r := range second {
			require.NoError(t, r.c.WaitForSync(ctx), "the %s worker syncs", id)
		}
		quiesce()
		time.Sleep(time.Hour) // every resume's reconcile rounds end
		quiesce()
		for id, uri := range map[string]string{"east": east, "west": west} {
			sub, err := second[id].c.Engine().Subscription(uri)
			require.NoError(t, err)
			assert.Equal(t, ledger.StateActive, sub.State, "%s stays alive: its server has it", uri)
			assert.Equal(t, id, sub.Capabilities.ServerID, "%s is resumed by the worker of its server", uri)
			text, err := second[id].text(uri)
			require.NoError(t, err)
			assert.Equal(t, "v1 "+id, text)
		}
	})
}

// Two engines on one ledger in one process, each with a Client for the same
// principal and the same server (two replicas of one deployment, or a
// blue/green handover where the new client connects before the old one
// closes). Client B never subscribes anything, and its Connect resumes only
// its own subscriptions: a day later client A's subscription keeps its
// generation (the two do not trade it back and forth, one subscribe and
// one extra read per revalidation tick), and B never read the URI.
func TestSecondClientOnTheLedgerLeavesALiveClientsSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc = "file:///docs/shared.md"
		srvA, srvB := mcpsynctest.NewServer(nil), mcpsynctest.NewServer(nil) // same name: one deployment
		srvA.Set(doc, "text/markdown", "v1")
		srvB.Set(doc, "text/markdown", "v1")
		store := ledger.NewMemory(nil)
		connect := func(srv *mcpsynctest.Server) (*mcpsync.Client, *mcpsync.Engine) {
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: store})
			require.NoError(t, err)
			c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Engine: e, Subject: alice})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			return c, e
		}
		a, ea := connect(srvA)
		_, err := a.Subscribe(t.Context(), doc)
		require.NoError(t, err)
		before, err := ea.Subscription(doc)
		require.NoError(t, err)
		require.Equal(t, ea.SessionGeneration(), before.SessionGeneration)

		_, eb := connect(srvB) // subscribes nothing
		quiesce()
		time.Sleep(24 * time.Hour)
		quiesce()

		after, err := ea.Subscription(doc)
		require.NoError(t, err)
		t.Logf("after a day: subscription generation %d (was %d), in session %d (A's %d, B's %d); server reads A %d, B %d",
			after.SubscriptionGeneration, before.SubscriptionGeneration, after.SessionGeneration,
			ea.SessionGeneration(), eb.SessionGeneration(), srvA.Reads(doc), srvB.Reads(doc))
		assert.Equal(t, before.SubscriptionGeneration, after.SubscriptionGeneration,
			"a client that never subscribed took a live client's subscription, and they trade it back and forth")
		assert.Zero(t, srvB.Reads(doc), "client B read a URI it never subscribed to")
	})
}

// What a caller gave up before Close stays given up after a restart: a
// Subscribe that returned its context's error left nothing watched, and an
// Unsubscribe is final (its context bounds the wait, not the close), so
// the next process on the ledger resumes neither, and its server notifies
// neither.
func TestRestartResumesNothingTheCallerGaveUpBeforeClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		// giveUp leaves changedURI given up by the caller while the key's
		// pass is parked at the server, and returns what releases it.
		giveUp func(t *testing.T, r *rig) func()
	}{
		{"a Subscribe whose context ended", func(t *testing.T, r *rig) func() {
			h := r.faults().HoldNext(string(mcp.MethodResourcesSubscribe), changedURI)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := r.c.Subscribe(ctx, changedURI)
			require.ErrorIs(t, err, context.DeadlineExceeded, "the subscribe is parked at the server")
			return h.Release
		}},
		{"an Unsubscribe whose context ended", func(t *testing.T, r *rig) func() {
			_, err := r.c.Subscribe(t.Context(), changedURI)
			require.NoError(t, err)
			quiesce()
			// The Reconnect's resubscribe is parked at the server: the
			// key's pass is busy when the Unsubscribe comes.
			holds := make(chan *mcpsynctest.Hold, 1)
			r.setOnDial(func(_ int, kit *mcpsynctest.Transport) {
				holds <- kit.HoldNext(string(mcp.MethodResourcesSubscribe), changedURI)
			})
			go func() { _ = r.c.Reconnect(context.Background()) }()
			h := <-holds
			<-h.Arrived()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err = r.c.Unsubscribe(ctx, changedURI)
			require.ErrorIs(t, err, context.DeadlineExceeded, "the key's pass is parked at the server")
			return h.Release
		}},
		{"a first Subscribe given up as Close begins", func(t *testing.T, r *rig) func() {
			// A program interrupted while it subscribes ends the
			// Subscribe's context and closes its client at once.
			h := r.faults().HoldNext(string(mcp.MethodResourcesSubscribe), changedURI)
			ctx, cancel := context.WithCancel(t.Context())
			done := goCall(ctx, r.c.Subscribe, changedURI)
			<-h.Arrived()
			cancel()
			require.NoError(t, r.c.Close())
			require.ErrorIs(t, (<-done).err, context.Canceled, "the subscribe is parked at the server")
			return h.Release
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := eras[0]
				srv := mcpsynctest.NewServer(nil)
				srv.Set(changedURI, "text/markdown", "v1")
				path := filepath.Join(t.TempDir(), "ledger.db")
				l, err := boltledger.Open(path, nil)
				require.NoError(t, err)
				r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: engineOn(t, l)}})
				release := tc.giveUp(t, r)
				require.NoError(t, r.c.Close())
				release()
				quiesce()
				require.NoError(t, l.Close())

				l, err = boltledger.Open(path, nil)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				requireResumesNone(t, w, srv, l, changedURI)
			})
		})
	}
}

// A SubscribeAll that Close ends while its first subscriptions are being
// written fails with ErrClientClosed for each URI, and what the caller
// never got stays given up: a Client that opens the ledger next resumes
// none of them, nor has the server notify them.
func TestRestartResumesNothingOfASubscribeAllThatCloseEnded(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		uris := numbered("file:///docs/cut/%d.md", 4)
		srv := mcpsynctest.NewServer(nil)
		for _, u := range uris {
			srv.Set(u, "text/markdown", "v1")
		}
		store := &batchLedger{Ledger: ledger.NewMemory(nil)}
		r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: engineOn(t, store)}})
		var once sync.Once
		closed := make(chan error, 1)
		store.during = func() { // Close, on another goroutine, as the batch is written
			once.Do(func() {
				go func() { closed <- r.c.Close() }()
				synctest.Wait()
			})
		}
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.ErrorIs(t, err, mcpsync.ErrClientClosed)
		require.NoError(t, <-closed)
		quiesce()

		requireResumesNone(t, w, srv, store.Ledger, uris...)
	})
}

// requireResumesNone restarts on store: a Client of a new engine over it,
// an hour later, has none of uris open and the server notifies none.
func requireResumesNone(t *testing.T, w wiring, srv *mcpsynctest.Server, store ledger.Ledger, uris ...string) {
	t.Helper()
	e := engineOn(t, store)
	r := buildRig(t, w, rigConfig{srv: srv, opts: mcpsync.ClientOptions{Engine: e}})
	require.NoError(t, r.c.WaitForSync(t.Context()))
	time.Sleep(time.Hour)
	quiesce()
	for _, u := range uris {
		sub, err := e.Subscription(u)
		require.NoError(t, err)
		assert.False(t, openIn(sub, e.SessionGeneration()), "the restart brought back a URI the caller gave up: %s", r.describe(u))
		assert.False(t, srv.Subscribed(u), "the server notifies %s, which nobody watches", u)
	}
}
