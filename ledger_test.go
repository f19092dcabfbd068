package mcpsync_test

import (
	"context"
	"encoding/json"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// restored returns an engine on a copy of e's ledger, taken through JSON the
// way a rollback carries it, with clock as its clock.
func restored(t *testing.T, e *mcpsync.Engine, clock func() time.Time) *mcpsync.Engine {
	t.Helper()
	snap, err := ledger.Export(context.Background(), e.Ledger())
	require.NoError(t, err)
	raw, err := json.Marshal(snap)
	require.NoError(t, err)
	var decoded ledger.Snapshot
	require.NoError(t, json.Unmarshal(raw, &decoded))
	l, err := ledger.NewMemoryFrom(decoded)
	require.NoError(t, err)
	r, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, Now: clock})
	require.NoError(t, err)
	return r
}

// reopened returns a new engine on e's own ledger, as a restarted process
// would open it.
func reopened(t *testing.T, e *mcpsync.Engine, clock func() time.Time) *mcpsync.Engine {
	t.Helper()
	r, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: e.Ledger(), Now: clock})
	require.NoError(t, err)
	return r
}

func beginSession(t *testing.T, e *mcpsync.Engine) {
	t.Helper()
	_, err := e.BeginSession(mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{
		Server: ledger.Implementation{Name: "test-server", Version: "1.0.0"}, Resources: true, Subscribe: true,
	}})
	require.NoError(t, err)
}

func subscribeActive(t *testing.T, e *mcpsync.Engine, uri, principal string) {
	t.Helper()
	_, err := e.Subscribe(uri, principal)
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
}

// Rollback: the engine an export was taken from goes on living. Both it and
// the engine restored from the export then open a session, subscribe and
// issue a read. Their session generations differ (the restored ledger
// resumes its counters past RestoreCounterGap) while subscription
// generation and ordinal coincide; the restored engine refuses the live
// engine's read and accepts its own.
func TestRestoredEngineRefusesTheLiveEnginesReads(t *testing.T) {
	clock := newClock()
	live := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	acceptRead(t, live, ledger.TriggerInitial, "v1")

	back := restored(t, live, clock.now)
	for _, e := range []*mcpsync.Engine{live, back} {
		beginSession(t, e)
		subscribeActive(t, e, docURI, alice)
	}
	// The restored engine spends as many request ids as the live one did
	// before the export, so that only the engine tells the tickets apart.
	subscribeActive(t, back, "file:///docs/other.md", alice)
	_, err := back.IssueTicket("file:///docs/other.md", ledger.TriggerInitial)
	require.NoError(t, err)

	liveRead := issue(t, live, ledger.TriggerNotification)
	ownRead := issue(t, back, ledger.TriggerNotification)
	require.Greater(t, ownRead.SessionGeneration, liveRead.SessionGeneration+ledger.RestoreCounterGap-1,
		"the restored ledger never hands out a generation the live one may have used")
	require.Equal(t, liveRead.SubscriptionGeneration, ownRead.SubscriptionGeneration)
	require.Equal(t, liveRead.ReadOrdinal, ownRead.ReadOrdinal)

	_, err = back.AcceptResourceVersion(liveRead, text(docURI, "from the live engine"))
	require.ErrorIs(t, err, mcpsync.ErrGenerationMismatch, "a read the restored engine never issued")
	_, err = back.AcceptResourceVersion(ownRead, text(docURI, "fresh"))
	require.NoError(t, err, "the restored engine's own read is not shadowed")
	entry, err := back.Lookup(alice, docURI)
	require.NoError(t, err)
	assert.Equal(t, "fresh", entry.Contents[0].Text)
}

// Request ids and close epochs come from the ledger: a restored or restarted
// engine never hands out one an earlier engine used, even when no record
// still mentions it.
func TestIdentitiesAreNeverHandedOutTwice(t *testing.T) {
	const other = "file:///docs/closing.md"
	for name, next := range map[string]func(*testing.T, *mcpsync.Engine, func() time.Time) *mcpsync.Engine{
		"restored": restored, "reopened": reopened,
	} {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
			first := issue(t, e, ledger.TriggerInitial)
			_, err := e.AcceptResourceVersion(first, text(docURI, "v1"))
			require.NoError(t, err)
			subscribeActive(t, e, other, alice)
			closed, err := e.BeginClose(other)
			require.NoError(t, err)
			_, err = e.FinishClose(other, true)
			require.NoError(t, err)
			// A new generation starts a new fence: no record names the
			// first close epoch any more.
			subscribeActive(t, e, other, alice)

			n := next(t, e, clock.now)
			beginSession(t, n)
			subscribeActive(t, n, docURI, alice)
			again := issue(t, n, ledger.TriggerReconnect)
			assert.Greater(t, again.RequestID, first.RequestID, "request id %d was handed out before", first.RequestID)
			rc, err := n.BeginClose(other)
			require.NoError(t, err)
			assert.Greater(t, rc.CloseEpoch, closed.CloseEpoch, "close epoch %d was handed out before", closed.CloseEpoch)
			assert.Greater(t, n.SessionGeneration(), e.SessionGeneration())
		})
	}
}

// A catalog proves completeness only in the session that measured it. A
// session in which nothing was subscribed leaves no trace in any record, and
// its generation must still never come back.
func TestCatalogOfAnEarlierEngineIsNotComplete(t *testing.T) {
	clock := newClock()
	e := newEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	cat := mcpsync.Catalog{
		Schema: mcpsync.SchemaCatalog, Kind: mcpsync.KindResources, Status: mcpsync.CatalogSnapshotProven,
		SessionGeneration: e.SessionGeneration(), MeasuredAt: clock.now(), StaleAfter: clock.now().Add(time.Hour),
	}
	_, err := cat.Proven(clock.now(), e.SessionGeneration())
	require.NoError(t, err, "complete in the session that measured it")

	n := reopened(t, e, clock.now)
	beginSession(t, n)
	_, err = cat.Proven(clock.now(), n.SessionGeneration())
	var ce *mcpsync.CatalogError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, mcpsync.CatalogReasonOtherSession, ce.Reason)
}

// Revocation is ledger state: after a restart the subject's reads are still
// refused and nothing of it is served.
func TestRevocationSurvivesRestart(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	acceptRead(t, e, ledger.TriggerInitial, "alice's")
	_, err := e.RevokeSubject(alice)
	require.NoError(t, err)

	n := reopened(t, e, clock.now)
	beginSession(t, n)
	subscribeActive(t, n, docURI, alice)
	_, err = n.AcceptResourceVersion(issue(t, n, ledger.TriggerReconnect), text(docURI, "alice's again"))
	require.ErrorIs(t, err, mcpsync.ErrSubjectRevoked)
	_, err = n.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrRevoked)
	require.ErrorIs(t, n.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "a",
		Version: mcpsync.ResourceVersion{URI: docURI, Subject: alice}}), mcpsync.ErrRevoked)
}

// A crash between recording a revocation and sweeping it: the next engine
// finishes the sweep, so every version and artifact is still announced.
func TestUnsweptRevocationIsFinishedOnOpen(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	out := acceptRead(t, e, ledger.TriggerInitial, "alice's")
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "i", ArtifactID: "a", Version: out.Version.Version}))
	ctx := context.Background()
	require.NoError(t, e.Ledger().Revoke(ctx, ledger.RevokedSubject{
		Schema: ledger.SchemaRevokedSubject, Subject: alice, At: clock.now(), Engine: e.ID(),
	}))

	n := reopened(t, e, clock.now)
	_, err := n.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrRevoked)
	entries, err := n.PullOutbox(out.Version.OutboxSeq, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2, "the version and its artifact")
	for _, en := range entries {
		assert.Equal(t, ledger.InvalidateRevoked, en.Reason)
		assert.Equal(t, n.ID(), en.Engine)
	}
	revoked, err := n.Ledger().Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	assert.True(t, revoked[0].Swept)
}

// An old snapshot, from before ledgers allocated identities, still restores
// with the fence intact.
func TestVersionOneSnapshotRestores(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	inFlight := issue(t, e, ledger.TriggerInitial)
	snap, err := ledger.Export(context.Background(), e.Ledger())
	require.NoError(t, err)
	v1 := ledger.Snapshot{Schema: ledger.SchemaSnapshotV1, Records: snap.Records}
	l, err := ledger.NewMemoryFrom(v1)
	require.NoError(t, err)
	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l, Now: clock.now})
	require.NoError(t, err)
	beginSession(t, n)
	assert.Greater(t, n.SessionGeneration(), inFlight.SessionGeneration)
	subscribeActive(t, n, docURI, alice)
	assert.Greater(t, issue(t, n, ledger.TriggerReconnect).RequestID, inFlight.RequestID)

	_, err = ledger.NewMemoryFrom(ledger.Snapshot{Schema: "ledgerSnapshot.v9"})
	require.ErrorIs(t, err, ledger.ErrLedgerSchema)
}

// Consume blocks until an entry is appended, without polling, and each
// consumer has its own position.
func TestConsumeWakesOnAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := activeEngine(t, nil)
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan mcpsync.OutboxEntry)
		done := make(chan error, 1)
		go func() {
			for en, err := range e.Consume(ctx, "index") {
				if err != nil {
					done <- err
					return
				}
				got <- en
			}
		}()
		synctest.Wait() // the consumer is waiting for an entry
		acceptRead(t, e, ledger.TriggerInitial, "v1")
		en := <-got
		assert.Equal(t, uint64(1), en.Seq)
		assert.Equal(t, e.ID(), en.Engine)
		require.NoError(t, e.Acknowledge(ctx, "index", en.Seq))

		st, err := e.OutboxState(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]uint64{"index": 1}, st.Consumers)
		pending, err := e.PullOutbox(0, 0)
		require.NoError(t, err)
		assert.Empty(t, pending, "the only consumer passed it")

		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

// A consumer the retention bound overtook is told which entries it lost.
func TestConsumeReportsWhatTheBoundDropped(t *testing.T) {
	l := ledger.NewMemory(&ledger.Options{OutboxRetention: 2})
	e := activeEngine(t, &mcpsync.EngineOptions{Ledger: l})
	ctx := context.Background()
	require.NoError(t, e.Acknowledge(ctx, "slow", 0))
	for _, body := range []string{"v1", "v2", "v3", "v4", "v5"} {
		_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), text(docURI, body))
		require.NoError(t, err)
	}
	for _, err := range e.Consume(ctx, "slow") {
		var gap *ledger.OutboxGapError
		require.ErrorAs(t, err, &gap)
		require.ErrorIs(t, err, mcpsync.ErrOutboxGap)
		assert.Equal(t, ledger.OutboxGapError{Consumer: "slow", From: 1, Through: 3}, *gap)
		break
	}
	st, err := e.OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), st.Dropped)
}

// Acknowledged entries give their memory back: the outbox of a cache that
// consumed everything does not keep its peak.
func TestOutboxFreesWhatEveryConsumerPassed(t *testing.T) {
	const n = 50_000
	ctx := context.Background()
	l := ledger.NewMemory(&ledger.Options{OutboxRetention: n})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	for i := uint64(1); i <= n; i++ {
		_, ok, err := l.CompareAndSwap(ctx, docURI, i-1, &ledger.Record{Revision: i}, []mcpsync.OutboxEntry{{
			Schema: mcpsync.SchemaInvalidation, URI: docURI, Reason: ledger.InvalidateUpdated, Subject: alice,
		}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	peak := heap()
	require.NoError(t, l.Ack(ctx, mcpsync.DefaultConsumer, n))
	after := heap()
	runtime.KeepAlive(l) // the ledger itself must stay: only what it discarded may go
	t.Logf("heap above base: %d KiB at the peak, %d KiB once acknowledged", (int64(peak)-int64(base))/1024, (int64(after)-int64(base))/1024)
	assert.Less(t, after-min(after, base), (peak-base)/10, "acknowledged entries are freed")
}

// A restarted worker learns from the ledger which subscriptions to open
// again: the open ones, not those that were closing or closed, nor URIs that
// were only discovered.
func TestResumableSubscriptions(t *testing.T) {
	clock := newClock()
	e := newEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	subscribeActive(t, e, "file:///docs/a.md", alice)
	subscribeActive(t, e, "file:///docs/b.md", bob)
	subscribeActive(t, e, "file:///docs/closed.md", alice)
	_, err := e.BeginClose("file:///docs/closed.md")
	require.NoError(t, err)
	require.NoError(t, e.Discover("file:///docs/seen.md"))

	n := reopened(t, e, clock.now)
	beginSession(t, n)
	var got []string
	for sub, err := range n.ResumableSubscriptions() {
		require.NoError(t, err)
		got = append(got, sub.URI+" "+sub.Subject)
	}
	assert.Equal(t, []string{"file:///docs/a.md " + alice, "file:///docs/b.md " + bob}, got)

	subscribeActive(t, n, "file:///docs/a.md", alice)
	for sub, err := range n.ResumableSubscriptions() {
		require.NoError(t, err)
		assert.NotEqual(t, "file:///docs/a.md", sub.URI, "resumed in this session")
	}
}

// Next promises no value is ever returned twice. A reservation that runs
// past the top of the counter is refused, or, if granted, the counter does
// not wrap round: neither 0 nor a value already handed out comes next.
func TestMemoryLedgerNextNeverWrapsAround(t *testing.T) {
	ctx := context.Background()
	l := ledger.NewMemory(nil)
	first, err := l.Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	_, err = l.Next(ctx, ledger.CounterRequest, math.MaxUint64)
	if err != nil {
		return // refused: fine
	}
	again, err := l.Next(ctx, ledger.CounterRequest, 1)
	if err == nil {
		assert.NotEqual(t, uint64(1), again, "request id 1 handed out twice")
		assert.NotZero(t, again, "0 handed out, which no ticket may carry")
	}
}
