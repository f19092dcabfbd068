package mcpsync_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Corroborate on a pending tombstone whose URI has a queued read in flight
// (sent after the read that said not found) returns no read: the queue is
// to issue the second read when the one in flight ends. But the read in
// flight was sent before the not-found passed, so its answer finds the
// subscription TOMBSTONE_PENDING and is refused NOT_ACTIVE, and that
// refusal ends the corroboration. The second read the queue then issues,
// after the scan, not found again, only makes the tombstone pending once
// more: the deletion waits for another scan although every step the
// corroboration asks for happened, with no sign of the resource between.
func TestCorroborationSurvivesTheReadInFlight(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	_, err := e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerInitial), text(docURI, "v1"))
	require.NoError(t, err)

	// A read outside the queue (Client.Read), then a pulse's queued read.
	direct := issue(t, e, mcpsync.TriggerRevalidate)
	queued, ok, err := e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok)
	out, err := e.AcceptResourceVersion(direct, mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Decision())

	_, ok, err = e.Corroborate(docURI, scanAfter(clock))
	require.NoError(t, err)
	require.False(t, ok, "the queued read is in flight: the queue issues the second read after it")
	require.NotNil(t, state(t, e).Corroboration)

	// The read in flight, sent before the scan: not found either.
	out, _ = e.FinishRead(queued, mcpsync.NotFoundResult())
	require.NotNil(t, out.FollowUp, "the second read")
	second := *out.FollowUp
	assert.NotNil(t, state(t, e).Corroboration, "an answer older than the scan, not found, says nothing the scan did not know")

	out, err = e.FinishRead(second, mcpsync.NotFoundResult())
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionTombstoned, out.Decision(), "the second not-found, issued after the scan, confirms the deletion")
	assert.NotNil(t, out.Tombstone)
	assert.Equal(t, mcpsync.StateTombstoned, state(t, e).State)
}
