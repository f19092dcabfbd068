package boltledger_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// A read costs the file one commit: its ticket, and a pulse or an
// abandoned read before it, are refused after any crash anyway, so they are
// written with the accept of its answer, which is durable before it
// returns, with everything written before it.
func TestAReadCostsOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc = "file:///docs/a.md"
	_, err = e.Subscribe(doc, "user:alice")
	require.NoError(t, err)
	_, err = e.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(doc, ledger.TriggerInitial) // reserves the block of request ids
	require.NoError(t, err)
	require.NoError(t, e.AbandonRead(tk))

	before := boltledger.Commits(l)
	pulsed, ok, err := e.Notify(doc)
	require.NoError(t, err)
	require.True(t, ok, "the pulse issued a read")
	_, err = e.Fail(pulsed)
	require.NoError(t, err)
	tk, err = e.IssueTicket(doc, ledger.TriggerNotification)
	require.NoError(t, err)
	assert.Equal(t, before, boltledger.Commits(l), "a pulse, tickets and an abandoned read commit nothing")
	out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: doc, MIMEType: "text/plain", Text: "v1"}}))
	require.NoError(t, err)
	require.True(t, out.Changed())
	assert.Equal(t, before+1, boltledger.Commits(l), "the accept is one commit")
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, tk.ReadOrdinal, r.Watermark)
	assert.Equal(t, uint64(3), r.LastIssued, "every ticket before the accept is on disk with it")
	assert.Equal(t, uint64(1), r.LastNotificationSeq, "and the pulse")
	assert.Empty(t, r.Tickets)
}

// Opening and activating a subscription generation are deferred when a
// crash that lost them would leave a generation a restart resumes for the
// same subject, server and spelling (a worker resuming after a restart),
// and durable otherwise (a URI subscribed for the first time, or for
// another subject): a Client's Subscribe that returned is resumed after a
// crash either way.
func TestSubscribeIsDurableUnlessARestartResumesItAnyway(t *testing.T) {
	l := openWith(t, nil).(*boltledger.Ledger)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc, other = "file:///docs/a.md", "file:///docs/b.md"

	before := boltledger.Commits(l)
	_, err = e.Subscribe(doc, "user:alice")
	require.NoError(t, err)
	assert.Equal(t, before+1, boltledger.Commits(l), "a first subscription is durable")
	_, err = e.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	assert.Equal(t, before+1, boltledger.Commits(l), "its activation is resumed anyway")
	_, err = e.Subscribe(other, "user:alice")
	require.NoError(t, err)
	_, err = e.Activate(other, ledger.ModePush)
	require.NoError(t, err)

	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	before = boltledger.Commits(l)
	sub, err := e.Subscribe(doc, "user:alice")
	require.NoError(t, err)
	require.Equal(t, ledger.StateSubscribing, sub.State)
	_, err = e.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	assert.Equal(t, before, boltledger.Commits(l), "a restart resumes the same subject's generation anyway")
	_, err = e.Subscribe(other, "user:bob")
	require.NoError(t, err)
	assert.Equal(t, before+1, boltledger.Commits(l), "another subject's is not resumed by a restart: durable")
}

// Subscribing many URIs at once, one goroutine each, shares commits:
// sixty-four first subscriptions, each durable, reach the file in a few
// transactions, not one each; their activations (resumed anyway) and
// first tickets in none.
func TestSubscribingManyURIsSharesCommits(t *testing.T) {
	l := openWith(t, nil).(*boltledger.Ledger)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	uris := make([]string, 64)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///docs/many/%02d.md", i)
	}
	errs := make([]error, len(uris))
	atOnce := func(step func(i int) error) {
		var wg sync.WaitGroup
		for i := range uris {
			wg.Go(func() { errs[i] = step(i) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}

	before := boltledger.Commits(l)
	atOnce(func(i int) error {
		_, err := e.Subscribe(uris[i], "user:alice")
		return err
	})
	subscribed := boltledger.Commits(l) - before
	assert.Less(t, subscribed, uint64(len(uris)/4), "%d durable subscriptions in %d commits", len(uris), subscribed)
	atOnce(func(i int) error {
		_, err := e.Activate(uris[i], ledger.ModePush)
		return err
	})
	atOnce(func(i int) error {
		_, send, err := e.RequestRead(uris[i], ledger.TriggerInitial)
		if err == nil && !send {
			err = fmt.Errorf("%s: no read to send", uris[i])
		}
		return err
	})
	// The first ticket reserves a block of 64 request ids, and the one
	// that takes the middle of it the next block.
	assert.Equal(t, before+subscribed+2, boltledger.Commits(l), "activations and tickets: none but the request ids' two")
}

// Writes handed over in one call share one commit (CompareAndSwapAll):
// three hundred first records, as SubscribeAll opens them, in one
// transaction. A write bbolt refuses among them (an empty key) fails alone,
// and the others commit without it.
func TestABatchOfWritesSharesOneCommit(t *testing.T) {
	l := openWith(t, nil).(*boltledger.Ledger)
	swaps := make([]ledger.Swap, 300)
	for i := range swaps {
		key := fmt.Sprintf("file:///docs/batch/%03d.md", i)
		swaps[i] = ledger.Swap{Key: key, Next: &ledger.Record{Revision: 1, State: ledger.StateSubscribing}}
	}
	swaps[100].Key = ""
	before := boltledger.Commits(l)
	results := l.CompareAndSwapAll(ctx, swaps)
	assert.Equal(t, before+1, boltledger.Commits(l), "one commit")
	for i, r := range results {
		if i == 100 {
			assert.Error(t, r.Err, "a key bbolt refuses")
			assert.False(t, r.OK)
			continue
		}
		require.NoError(t, r.Err, swaps[i].Key)
		require.True(t, r.OK, swaps[i].Key)
	}
	l = reopen(t, l).(*boltledger.Ledger)
	for i, s := range swaps {
		if i == 100 {
			continue
		}
		got, err := l.Load(ctx, s.Key)
		require.NoError(t, err)
		require.NotNil(t, got, "%s is on disk", s.Key)
	}
}

// A write that fails in a group fails alone: its error (here a counter that
// would wrap) rolls back the writes grouped with it, which the committer
// runs again without it. Every other writer's outcome, its outbox number and
// what the ledger caches are those of the run that committed.
func TestAWriteThatFailsInAGroupFailsAlone(t *testing.T) {
	l := openWith(t, nil)
	_, err := l.Next(ctx, ledger.CounterRequest, math.MaxUint64-1)
	require.NoError(t, err)
	const rounds, writers = 20, 8
	for round := range rounds {
		key := fmt.Sprintf("file:///contended/%d", round)
		type outcome struct {
			first uint64
			ok    bool
		}
		outcomes := make([]outcome, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				rec := &ledger.Record{Revision: 1, LastAcceptedDigest: fmt.Sprintf("writer %d", w)}
				e := ledger.OutboxEntry{Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated, Subject: fmt.Sprintf("writer %d", w)}
				first, ok, err := l.CompareAndSwap(ctx, key, 0, rec, []ledger.OutboxEntry{e})
				assert.NoError(t, err)
				outcomes[w] = outcome{first, ok}
			})
		}
		wg.Go(func() {
			<-start
			_, err := l.Next(ctx, ledger.CounterRequest, 2)
			assert.ErrorIs(t, err, ledger.ErrCounterExhausted)
		})
		close(start)
		wg.Wait()

		winners := 0
		var won outcome
		var winner int
		for w, o := range outcomes {
			if o.ok {
				winners, won, winner = winners+1, o, w
			}
		}
		require.Equal(t, 1, winners, "round %d: one writer wins", round)
		snap, err := l.Export(ctx)
		require.NoError(t, err)
		want := fmt.Sprintf("writer %d", winner)
		require.Equal(t, want, snap.Records[key].LastAcceptedDigest, "round %d: the winner's record is stored", round)
		cached, err := l.Load(ctx, key)
		require.NoError(t, err)
		require.Equal(t, want, cached.LastAcceptedDigest, "round %d: the cache holds what is stored", round)
		entries, err := l.Outbox(ctx, won.first-1, 1)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.Equal(t, want, entries[0].Subject, "round %d: the winner's entry is numbered as it was told", round)
	}
}
