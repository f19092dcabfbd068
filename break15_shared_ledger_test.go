package mcpsync_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// "Revoked subjects ... are ledger state" (DESIGN.md, Identity lives in the
// ledger), yet an engine reads the revoked set from its ledger only once, in
// NewEngine. A second engine on the same ledger (a second Client for another
// server or principal set, a blue/green handover in one process) keeps
// accepting, serving and announcing the revoked subject's content after the
// first engine's RevokeSubject returned: the index fills back up with the
// revoked subject's chunks until that process restarts.
func TestBreak15RevocationIsNotEnforcedByAnotherEngineOnTheSameLedger(t *testing.T) {
	const doc = "file:///docs/a.md"
	l := mcpsync.NewMemoryLedger(nil)
	a, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	b, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)

	_, err = b.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = b.Subscribe(doc, "user:bob")
	require.NoError(t, err)
	_, err = b.Activate(doc, mcpsync.ModePush)
	require.NoError(t, err)
	inFlight, err := b.IssueTicket(doc, mcpsync.TriggerNotification)
	require.NoError(t, err)

	_, err = a.RevokeSubject("user:bob")
	require.NoError(t, err)
	revoked, err := l.Revoked(context.Background())
	require.NoError(t, err)
	require.Len(t, revoked, 1, "the revocation is in the ledger")

	out, err := b.AcceptResourceVersion(inFlight, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: "bob's secret"}}))
	assert.ErrorIs(t, err, mcpsync.ErrSubjectRevoked, "a read of a subject revoked in the ledger passed the fence")
	assert.False(t, out.Accepted)
	_, err = b.Lookup("user:bob", doc)
	assert.ErrorIs(t, err, mcpsync.ErrRevoked, "the revoked subject's new version is served")
	entries, err := b.PullOutbox(0, 0)
	require.NoError(t, err)
	for _, en := range entries {
		assert.NotEqual(t, mcpsync.InvalidateUpdated, en.Reason, "entry %d tells consumers to index the revoked subject's content", en.Seq)
	}
}

// Next promises no value is ever returned twice. A reservation that runs
// past the top of the counter wraps it round to zero instead of failing, and
// every value from 1 on is handed out again.
func TestBreak15MemoryLedgerNextWrapsAroundAndReusesValues(t *testing.T) {
	ctx := context.Background()
	l := mcpsync.NewMemoryLedger(nil)
	first, err := l.Next(ctx, mcpsync.CounterRequest, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	_, err = l.Next(ctx, mcpsync.CounterRequest, math.MaxUint64)
	if err != nil {
		return // refused: fine
	}
	again, err := l.Next(ctx, mcpsync.CounterRequest, 1)
	if err == nil {
		assert.NotEqual(t, uint64(1), again, "request id 1 handed out twice")
		assert.NotZero(t, again, "0 handed out, which no ticket may carry")
	}
}
