package mcpsync_test

// Many workers on one ledger: a write to a URI another worker holds is
// refused by the ledger with ErrNotLeaseholder. The engine and the client
// must go on around such URIs, and their owner must finish what was left.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// leasedLedger refuses writes to the keys another worker holds, as a shared
// ledger with leases does.
type leasedLedger struct {
	ledger.Ledger
	mu      sync.Mutex // protects foreign
	foreign map[string]bool
}

func newLeasedLedger() *leasedLedger {
	return &leasedLedger{Ledger: ledger.NewMemory(nil), foreign: map[string]bool{}}
}

// leasedEngine is an engine on l.
func leasedEngine(t *testing.T, l *leasedLedger) *mcpsync.Engine {
	t.Helper()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	return e
}

func (l *leasedLedger) setForeign(key string, foreign bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.foreign[key] = foreign
}

func (l *leasedLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []mcpsync.OutboxEntry) (uint64, bool, error) {
	l.mu.Lock()
	foreign := l.foreign[key]
	l.mu.Unlock()
	if foreign {
		return 0, false, fmt.Errorf("leased ledger: %s: %w", key, mcpsync.ErrNotLeaseholder)
	}
	return l.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
}

// A revocation sweeps the URIs this worker holds and leaves the others to
// their owners, saying which; Lookup refuses the subject everywhere at once;
// the worker that opens such a URI next sweeps it; an engine opened on the
// ledger meanwhile is not stopped by the sweep it cannot finish.
func TestRevocationAcrossLeases(t *testing.T) {
	const other = "file:///docs/other.md"
	l := newLeasedLedger()
	clock := newClock()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, Now: clock.now})
	require.NoError(t, err)
	beginSession(t, e)
	for _, u := range []string{docURI, other} {
		subscribeActive(t, e, u, alice)
		tk, err := e.IssueTicket(u, ledger.TriggerNotification)
		require.NoError(t, err)
		_, err = e.AcceptResourceVersion(tk, text(u, "v1"))
		require.NoError(t, err)
	}
	l.setForeign(other, true) // another worker took it

	rc, err := e.RevokeSubject(alice)
	require.NoError(t, err, "a URI held elsewhere does not fail the revocation")
	assert.Equal(t, []string{other}, rc.Elsewhere)
	assert.Len(t, rc.Versions, 1, "the URI held here is swept")
	_, err = e.Lookup(alice, other)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "refused everywhere at once")

	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, Now: clock.now})
	require.NoError(t, err, "a sweep this worker cannot finish does not stop it from starting")
	beginSession(t, n)

	l.setForeign(other, false) // the URI comes to this worker
	_, err = n.Subscribe(other, bob)
	require.NoError(t, err)
	rec, err := l.Load(t.Context(), other)
	require.NoError(t, err)
	require.NotNil(t, rec.Current)
	assert.Equal(t, ledger.VersionRevoked, rec.Current.Status, "the new owner sweeps it as it opens it")
	entries, err := l.Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	revoked := 0
	for _, en := range entries {
		if en.Reason == ledger.InvalidateRevoked && en.URI == other {
			revoked++
		}
	}
	assert.Equal(t, 1, revoked, "its revocation is announced once")
}

// A worker that lost a URI's lease lets it go with Unsubscribe: no error,
// the server is told, nothing is written.
func TestUnsubscribeAfterTheLeaseMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeasedLedger()
		r := buildRig(t, eras[0], rigConfig{opts: mcpsync.ClientOptions{Engine: leasedEngine(t, l)}, uris: []string{docURI}})
		srv := r.srv
		r.subscribeSettled(docURI)
		require.True(t, srv.Subscribed(docURI))
		before, err := l.Load(t.Context(), docURI)
		require.NoError(t, err)

		l.setForeign(docURI, true)
		_, err = r.c.Unsubscribe(t.Context(), docURI)
		require.NoError(t, err)
		quiesce()
		assert.False(t, srv.Subscribed(docURI), "the server is told")
		after, err := l.Load(t.Context(), docURI)
		require.NoError(t, err)
		assert.Equal(t, before.Revision, after.Revision, "nothing is written to a row another worker holds")
		require.NoError(t, r.c.WaitForSync(t.Context()), "a URI let go is not waited for")
	})
}

// Workers share a ledger; another worker took docURI's lease, so
// Unsubscribe only lets the URI go and tells the server to stop. When that
// one request fails (a transient server error), the server is still put
// right once it answers, as for every other failed unsubscribe: half an
// hour later it does not notify a URI this client no longer watches, and
// still notifies the one it does. Both eras.
func TestUnsubscribeAfterTheLeaseMovedIsRetriedUntilTheServerAnswers(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		const y = "file:///b42/lease/y.md"
		l := newLeasedLedger()
		r := buildRig(t, w, rigConfig{opts: mcpsync.ClientOptions{Engine: leasedEngine(t, l)}, uris: []string{docURI, y}})
		srv := r.srv
		r.subscribeSettled(docURI)
		r.subscribeSettled(y) // keeps a 2026-07-28 stream open after docURI leaves it
		require.True(t, srv.Subscribed(docURI))

		l.setForeign(docURI, true)
		method := string(mcp.MethodResourcesUnsubscribe)
		if w.version == "2026-07-28" {
			method = string(mcp.MethodSubscriptionsListen)
		}
		r.faults().FailNext(method, "", mcp.INTERNAL_ERROR, "b42: try again")
		_, err := r.c.Unsubscribe(t.Context(), docURI)
		require.NoError(t, err)
		for range 6 {
			time.Sleep(5 * time.Minute)
			quiesce()
		}
		require.True(t, srv.Subscribed(y), "y is still watched")
		require.False(t, srv.Subscribed(docURI),
			"half an hour after Unsubscribe let go of a URI whose lease moved, the server still notifies it (unsubscribes sent %d)", srv.UnsubscribeCalls())
	})
}

// The same on 2026-07-28 with the caller giving up: an Unsubscribe of a
// URI whose lease moved waits behind the stream replacement a Subscribe(z)
// has under way (its listen request, slow to reach the server, naming the
// URI); the caller's context ends. The replacement goes out naming the
// URI, and with nothing else replacing it, half an hour later the stream
// no longer carries it, while z stays carried.
func TestCancelledUnsubscribeAfterTheLeaseMovedLeavesNoStreamCarryingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const z = "file:///b42/lease/z.md"
		l := newLeasedLedger()
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{Engine: leasedEngine(t, l)}, uris: []string{docURI, z}})
		srv := r.srv
		r.subscribeSettled(docURI)
		require.True(t, srv.Subscribed(docURI))

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		subDone := goCall(t.Context(), r.c.Subscribe, z)
		<-hold.Arrived()
		l.setForeign(docURI, true)
		ctx, cancel := context.WithCancel(t.Context())
		unsubDone := goCall(ctx, r.c.Unsubscribe, docURI)
		synctest.Wait()
		cancel()
		t.Logf("Unsubscribe: %v", (<-unsubDone).err)
		hold.Release()
		require.NoError(t, (<-subDone).err)
		for range 6 {
			time.Sleep(5 * time.Minute)
			quiesce()
		}
		require.True(t, srv.Subscribed(z), "z is still watched")
		require.False(t, srv.Subscribed(docURI),
			"half an hour after Unsubscribe let go of a URI whose lease moved, the listen stream still carries it")
	})
}

// (2026-07-28) A worker lets go of x, whose lease moved, while its listen
// stream carries x; the lease comes back and the caller subscribes x
// again before the stream was replaced. x is carried and pushed as before,
// and the stream is left alone: over the next minutes the client sends no
// more than a few listen requests, not a new stream every tick.
func TestResubscribeOnceTheLeaseCameBackDrawsNoListenStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///lease/back/x.md", "file:///lease/back/y.md"
		l := newLeasedLedger()
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{Engine: leasedEngine(t, l), CoalesceWindow: time.Second, RevalidateEvery: time.Hour}, uris: []string{x, y}})
		srv := r.srv
		r.subscribeSettled(x)
		r.watch(y)

		l.setForeign(x, true)
		_, err := r.c.Unsubscribe(t.Context(), x)
		require.NoError(t, err)
		l.setForeign(x, false)
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePush, sub.Mode, sub.ModeReason)
		before := r.faults().Requests(string(mcp.MethodSubscriptionsListen))
		minutes(2)
		sent := r.faults().Requests(string(mcp.MethodSubscriptionsListen)) - before
		assert.True(t, srv.Subscribed(x) && srv.Subscribed(y), "both watched URIs are carried")
		assert.LessOrEqual(t, sent, 3, "listen requests sent in two quiet minutes after x was subscribed again")
	})
}
