package pgledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// workers opens n ledgers on one schema, each with its own pool, as n
// worker processes would.
func workers(t *testing.T, n int) []*pgledger.Ledger {
	t.Helper()
	conn, schema := pgtest.Schema(t)
	out := make([]*pgledger.Ledger, n)
	for i := range out {
		out[i] = openIn(t, conn, schema, nil)
	}
	return out
}

func record(key string, rev uint64) *ledger.Record {
	return &ledger.Record{
		Revision: rev, State: ledger.StateActive, Watermark: rev, LastIssued: rev,
		LastAcceptedDigest: fmt.Sprintf("%s@%d", key, rev),
	}
}

func entry(key string, rev uint64) ledger.OutboxEntry {
	return ledger.OutboxEntry{
		Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated,
		Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, URI: key, ReadOrdinal: rev},
	}
}

// requireNumbered checks that the outbox holds entries 1..n, each once.
func requireNumbered(t *testing.T, l *pgledger.Ledger, n int) []ledger.OutboxEntry {
	t.Helper()
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, n)
	for i, e := range entries {
		require.Equal(t, uint64(i+1), e.Seq, "numbered consecutively, none twice")
	}
	return entries
}

// Two workers race for every revision of one key: exactly one wins each,
// and only the winner's entry is appended.
func TestWorkersRaceOnOneKey(t *testing.T) {
	ls := workers(t, 2)
	const key, revisions = "file:///shared", 40
	var mu sync.Mutex
	won := map[uint64][]int{} // revision -> the workers that stored it
	var wg sync.WaitGroup
	for w, l := range ls {
		for range 2 {
			wg.Go(func() {
				for {
					cur, err := l.Load(ctx, key)
					if !assert.NoError(t, err) {
						return
					}
					var rev uint64
					if cur != nil {
						rev = cur.Revision
					}
					if rev >= revisions {
						return
					}
					_, ok, err := l.CompareAndSwap(ctx, key, rev, record(key, rev+1), []ledger.OutboxEntry{entry(key, rev+1)})
					if !assert.NoError(t, err) {
						return
					}
					if ok {
						mu.Lock()
						won[rev+1] = append(won[rev+1], w)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for rev := uint64(1); rev <= revisions; rev++ {
		require.Len(t, won[rev], 1, "revision %d stored once", rev)
	}
	entries := requireNumbered(t, ls[1], revisions)
	for i, e := range entries {
		assert.Equal(t, uint64(i+1), e.Version.ReadOrdinal, "the entries of the winners, in order")
	}
}

// Writers in two workers append at once: one numbering, no gap, no repeat,
// and each CompareAndSwap's first number is its own.
func TestWorkersNumberOneOutbox(t *testing.T) {
	ls := workers(t, 2)
	const writers, each = 3, 20
	var mu sync.Mutex
	firsts := map[uint64]bool{}
	var wg sync.WaitGroup
	for w, l := range ls {
		for g := range writers {
			wg.Go(func() {
				key := fmt.Sprintf("file:///w%d/g%d", w, g)
				for rev := uint64(1); rev <= each; rev++ {
					first, ok, err := l.CompareAndSwap(ctx, key, rev-1, record(key, rev), []ledger.OutboxEntry{entry(key, rev), entry(key, rev)})
					if !assert.NoError(t, err) || !assert.True(t, ok) {
						return
					}
					mu.Lock()
					assert.False(t, firsts[first] || firsts[first+1], "%d handed out twice", first)
					firsts[first], firsts[first+1] = true, true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	entries := requireNumbered(t, ls[0], 2*len(ls)*writers*each)
	for _, e := range entries {
		require.True(t, firsts[e.Seq])
	}
	st, err := ls[1].OutboxState(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(entries)), st.Last)
}

// A waiter in one worker wakes on an append by another; a wait begun after
// the append returns at once.
func TestWorkersWakeEachOther(t *testing.T) {
	ls := workers(t, 2)
	waiting, writing := ls[0], ls[1]
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	woke := make(chan error, 1)
	go func() { woke <- waiting.WaitOutbox(wctx, 0) }()
	_, ok, err := writing.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), []ledger.OutboxEntry{entry("file:///a", 1)})
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case err := <-woke:
		require.NoError(t, err, "the other worker's append woke the waiter")
	case <-wctx.Done():
		t.Fatal("WaitOutbox did not wake on another worker's append")
	}
	require.NoError(t, waiting.WaitOutbox(wctx, 0), "already appended")

	// Many waiters, each for the next entry, all woken by one append.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { assert.NoError(t, waiting.WaitOutbox(wctx, 1)) })
	}
	_, ok, err = writing.CompareAndSwap(ctx, "file:///a", 1, record("file:///a", 2), []ledger.OutboxEntry{entry("file:///a", 2)})
	require.NoError(t, err)
	require.True(t, ok)
	wg.Wait()
}

// A revocation through one worker is seen by the other the moment Revoke
// returns: RevokedGeneration moved and Revoked holds the subject.
func TestWorkersSeeRevocations(t *testing.T) {
	ls := workers(t, 2)
	revoking, checking := ls[0], ls[1]
	gen, err := checking.RevokedGeneration(ctx)
	require.NoError(t, err)
	for i := range 10 {
		subject := fmt.Sprintf("user:%d", i)
		require.NoError(t, revoking.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject}))
		moved, err := checking.RevokedGeneration(ctx)
		require.NoError(t, err)
		require.Greater(t, moved, gen, "revocation of %s seen by the other worker", subject)
		gen = moved
		revoked, err := checking.Revoked(ctx)
		require.NoError(t, err)
		require.Len(t, revoked, i+1)
	}
}

// Two workers draw from the same counters: no value twice.
func TestWorkersShareCounters(t *testing.T) {
	ls := workers(t, 2)
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	for w, l := range ls {
		for g := range 3 {
			wg.Go(func() {
				for i := range 30 {
					n := uint64(1 + (w+g+i)%4)
					first, err := l.Next(ctx, ledger.CounterRequest, n)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					for v := first; v < first+n; v++ {
						seen[v]++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for v, n := range seen {
		require.Equal(t, 1, n, "value %d handed out %d times", v, n)
	}
	next, err := ls[0].Next(ctx, ledger.CounterRequest, 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(seen)+1), next, "and none skipped")
}

// Two engines, as two workers on one schema: a subject revoked through one
// is refused by the other's fence at once.
func TestEnginesShareRevocations(t *testing.T) {
	ls := workers(t, 2)
	engine := func(l ledger.Ledger) *mcpsync.Engine {
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		_, err = e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
		return e
	}
	a, b := engine(ls[0]), engine(ls[1])
	assert.NotEqual(t, a.SessionGeneration(), b.SessionGeneration(), "generations come from the shared ledger")
	const doc = "file:///docs/bob.md"
	_, err := b.Subscribe(doc, "user:bob")
	require.NoError(t, err)
	_, err = b.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	tk, err := b.IssueTicket(doc, ledger.TriggerInitial)
	require.NoError(t, err)

	_, err = a.RevokeSubject("user:bob")
	require.NoError(t, err)
	_, err = b.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: doc, MIMEType: "text/plain", Text: "bob's"}}))
	require.ErrorIs(t, err, mcpsync.ErrSubjectRevoked, "revoked through the other worker")
}

// admin connects to the test server outside any ledger.
func admin(t *testing.T, l *pgledger.Ledger) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, l.Pool().Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitForBackend returns the pid of the first backend query finds, asking
// again until one shows or ten seconds pass.
func waitForBackend(t *testing.T, conn *pgx.Conn, query string, args ...any) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := conn.QueryRow(ctx, query, args...).Scan(&pid)
		if err == nil {
			return pid
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
	}
	t.Fatalf("no backend for %s", query)
	return 0
}

// waitLockWaiters waits until at least n backends wait on a lock in a
// statement that names schema and contains part.
func waitLockWaiters(t *testing.T, conn *pgx.Conn, schema, part string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var c int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 AND strpos(query, $2) > 0`, schema, part).Scan(&c))
		if c >= n {
			return
		}
	}
	var states []string
	rows, err := conn.Query(ctx, "SELECT coalesce(wait_event_type, '') || ' ' || left(query, 120) FROM pg_stat_activity WHERE strpos(query, $1) > 0", schema)
	if err == nil {
		states, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	t.Fatalf("fewer than %d statements with %q wait on a lock: %q", n, part, states)
}

// A connection killed while its CompareAndSwap waits inside the
// transaction - the record already updated, the outbox numbering locked by
// another session - leaves no trace of it, and the next call works on a
// new connection.
func TestKilledMidTransaction(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	const key = "file:///a"
	_, ok, err := l.CompareAndSwap(ctx, key, 0, record(key, 1), []ledger.OutboxEntry{entry(key, 1)})
	require.NoError(t, err)
	require.True(t, ok)

	holder, killer := admin(t, l), admin(t, l)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT FROM "+pgx.Identifier{schema, "outbox_meta"}.Sanitize()+" FOR UPDATE")
	require.NoError(t, err)
	var holderPID int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holderPID))

	done := make(chan error, 1)
	go func() {
		_, _, err := l.CompareAndSwap(ctx, key, 1, record(key, 2), []ledger.OutboxEntry{entry(key, 2)})
		done <- err
	}()
	victim := waitForBackend(t, killer, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", holderPID)
	var killed bool
	require.NoError(t, killer.QueryRow(ctx, "SELECT pg_terminate_backend($1)", victim).Scan(&killed))
	require.True(t, killed)
	select {
	case err := <-done:
		require.Error(t, err, "the write's connection died under it")
	case <-time.After(20 * time.Second):
		t.Fatal("CompareAndSwap did not return after its connection was killed")
	}
	require.NoError(t, tx.Rollback(ctx))

	got, err := l.Load(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), got.Revision, "the record's update was rolled back with the rest")
	requireNumbered(t, l, 1)
	first, ok, err := l.CompareAndSwap(ctx, key, 1, record(key, 2), []ledger.OutboxEntry{entry(key, 2)})
	require.NoError(t, err, "the ledger works on a new connection")
	require.True(t, ok)
	assert.Equal(t, uint64(2), first, "numbering goes on without a gap")
}

// A waiter survives the death of the connection it listens on: the ledger
// listens again, reads what it missed, and wakes on the next append.
func TestListenerKilled(t *testing.T) {
	ls := workers(t, 2)
	waiting, writing := ls[0], ls[1]
	killer := admin(t, waiting)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	woke := make(chan error, 1)
	go func() { woke <- waiting.WaitOutbox(wctx, 0) }()
	listener := waitForBackend(t, killer, "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND state = 'idle' AND datname = current_database() AND query LIKE '%' || $1 || '%'",
		pgledger.Channel(waiting.Schema()))
	var killed bool
	require.NoError(t, killer.QueryRow(ctx, "SELECT pg_terminate_backend($1)", listener).Scan(&killed))
	require.True(t, killed)

	_, ok, err := writing.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), []ledger.OutboxEntry{entry("file:///a", 1)})
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-wctx.Done():
		t.Fatal("WaitOutbox did not wake after its listening connection was killed")
	}
}

func schemaTable(schema, table string) string { return pgx.Identifier{schema, table}.Sanitize() }

// A pool whose connections are made by a BeforeConnect hook (rotating
// credentials, IAM tokens, a proxy address chosen at connect time) works
// for every query, WaitOutbox's listening included: an entry appended
// before the wait began is found at once (or the wait fails), rather than
// the consumer sleeping until its deadline on a listening connection that
// never comes up.
func TestWaitOutboxReturnsOnEntriesThatExistWhenListeningFails(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(conn)
	require.NoError(t, err)
	realPort := cfg.ConnConfig.Port
	cfg.ConnConfig.Port = 1 // the hook knows where the server is
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Port = realPort
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	l, err := pgledger.New(ctx, pool, &pgledger.Options{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	_, ok, err := l.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), []ledger.OutboxEntry{entry("file:///a", 1)})
	require.NoError(t, err)
	require.True(t, ok)

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, l.WaitOutbox(wctx, 0), "entry 1 was appended before the wait: WaitOutbox must return at once (or fail), not sleep")
}

// A subject that read nothing anywhere is revoked on a ledger shared by two
// workers, the other of which holds and has written its own URI. Updates
// that write nothing (a sweep of a record that holds nothing of the
// subject) are not refused for a lease held elsewhere: the receipt lists
// nothing as left to another worker, and the revocation is marked swept,
// so engines opened on the ledger do not sweep it again for ever.
func TestRevocationOfNothingIsSweptWhateverOtherWorkersHold(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	// Worker b holds its URI and has written it; the revoked subject never
	// read it.
	const theirs = "file:///b"
	_, err := b.Acquire(ctx, theirs)
	require.NoError(t, err)
	_, ok, err := write(b, theirs, 1)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: a})
	require.NoError(t, err)
	rc, err := e.RevokeSubject("user:gone")
	require.NoError(t, err)
	revoked, err := a.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	require.True(t, len(rc.Elsewhere) == 0 && revoked[0].Swept,
		"a subject that read nothing anywhere is revoked, yet the receipt says %v is left to another worker and the "+
			"revocation is not swept (swept: %v): every engine opened on the ledger sweeps it again for ever",
		rc.Elsewhere, revoked[0].Swept)
}

// ForgetDerived: "Forgetting an unknown artifact is not an error." On a
// fenced ledger that holds for every URI, one held by another worker
// included: an outbox consumer (which runs on any worker) that forgets
// what it never recorded gets no ErrNotLeaseholder.
func TestForgetUnknownArtifactOnAnotherWorkersKeyIsNoError(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	a, b := fenced(t, conn, schema, time.Hour), fenced(t, conn, schema, time.Hour)
	const theirs = "file:///b"
	_, err := b.Acquire(ctx, theirs)
	require.NoError(t, err)
	_, ok, err := write(b, theirs, 1)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: a})
	require.NoError(t, err)
	require.NoError(t, e.ForgetDerived(theirs, "index", "never-recorded"),
		"forgetting an artifact that was never recorded changes nothing and is not an error")
}
