package boltledger_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest/ledgertest"
)

var ctx = context.Background()

func open(t *testing.T, opts *ledger.Options) ledger.Ledger {
	return openWith(t, &boltledger.Options{Ledger: opts})
}

func reopen(t *testing.T, l ledger.Ledger) ledger.Ledger {
	return reopenWith(t, l, nil)
}

func openWith(t *testing.T, opts *boltledger.Options) ledger.Ledger {
	t.Helper()
	l, err := boltledger.Open(filepath.Join(t.TempDir(), "ledger.db"), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func reopenWith(t *testing.T, l ledger.Ledger, opts *boltledger.Options) ledger.Ledger {
	t.Helper()
	bl := l.(*boltledger.Ledger)
	path := bl.Path()
	require.NoError(t, bl.Close())
	again, err := boltledger.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, again.Close()) })
	return again
}

func TestConformance(t *testing.T) {
	ledgertest.RunDurable(t, open, reopen)
}

// A worker restarted on its file: the fence, the counters and the
// revocations are where they were, and a read issued before the restart is
// refused.
func TestEngineRestartsOnTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc = "file:///docs/a.md"
	for _, uri := range []string{doc, "file:///docs/b.md"} {
		_, err = e.Subscribe(uri, "user:alice")
		require.NoError(t, err)
		_, err = e.Activate(uri, ledger.ModePush)
		require.NoError(t, err)
	}
	content := func(body string) mcpsync.ReadResult {
		return mcpsync.NewReadResult([]ledger.Content{{URI: doc, MIMEType: "text/plain", Text: body}})
	}
	tk, err := e.IssueTicket(doc, ledger.TriggerInitial)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, content("v1"))
	require.NoError(t, err)
	inFlight, err := e.IssueTicket(doc, ledger.TriggerNotification)
	require.NoError(t, err)
	_, err = e.RevokeSubject("user:bob")
	require.NoError(t, err)
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = n.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	assert.Greater(t, n.SessionGeneration(), e.SessionGeneration())
	_, err = n.AcceptResourceVersion(inFlight, content("late"))
	require.ErrorIs(t, err, mcpsync.ErrRefused, "a read from before the restart")
	entry, err := n.Lookup("user:alice", doc)
	require.NoError(t, err)
	assert.Equal(t, "v1", entry.Contents[0].Text)
	assert.Equal(t, out.Version.Version, entry.Version)

	_, err = n.Subscribe(doc, "user:bob")
	require.NoError(t, err)
	_, err = n.Activate(doc, ledger.ModePush)
	require.NoError(t, err)
	tk, err = n.IssueTicket(doc, ledger.TriggerReconnect)
	require.NoError(t, err)
	assert.Greater(t, tk.RequestID, inFlight.RequestID)
	_, err = n.AcceptResourceVersion(tk, content("bob's"))
	require.ErrorIs(t, err, mcpsync.ErrSubjectRevoked, "the revocation survived the restart")

	entries, err := n.PullOutbox(0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, e.ID(), entries[0].Engine)
}

// The suite starts goroutines (waiters, concurrent writers): none outlives
// the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The outbox is only ever appended to, so the pages it splits are filled
// whole: a backlog of entries appended a few at a time, commit after
// commit, takes about as many pages as its bytes need, not twice as many.
func TestTheOutboxFillsThePagesItSplits(t *testing.T) {
	l := openWith(t, nil).(*boltledger.Ledger)
	for round := range 50 {
		swaps := make([]ledger.Swap, 20)
		for i := range swaps {
			key := fmt.Sprintf("file:///docs/fill/%02d-%02d.md", round, i)
			swaps[i] = ledger.Swap{
				Key: key, Next: &ledger.Record{Revision: 1, State: ledger.StateActive},
				Entries: []ledger.OutboxEntry{{Schema: ledger.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated, Subject: "user:alice"}},
			}
		}
		for _, r := range l.CompareAndSwapAll(ctx, swaps) {
			require.NoError(t, r.Err)
			require.True(t, r.OK)
		}
	}
	path := l.Path()
	require.NoError(t, l.Close())
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket([]byte("outbox")).Stats()
		require.Equal(t, 1000, st.KeyN)
		assert.Greater(t, float64(st.LeafInuse)/float64(st.LeafAlloc), 0.85,
			"%d bytes of entries in %d pages of %d", st.LeafInuse, st.LeafPageN, st.LeafAlloc/st.LeafPageN)
		return nil
	}))
}
