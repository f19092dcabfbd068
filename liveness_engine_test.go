package mcpsync_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// The tests in this file are the engine's half of the liveness findings:
// each names the finding it guards, and each failed before its fix. The
// progress they check is the counterpart of a safety rule: a pulse or a
// request is never lost, a caller's mistake never wedges a URI.

// resubscribe closes docURI's generation (ack kept) and opens the next one.
func resubscribe(t *testing.T, e *mcpsync.Engine) {
	t.Helper()
	_, err := e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.FinishClose(docURI, true)
	require.NoError(t, err)
	_, err = e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
}

// A queued, unsent read of an old generation or session must not
// cover the new generation's read; coalescing merges pulses of one
// (session, subscription generation, URI) only.
func TestLivenessQueueKeyedByGeneration(t *testing.T) {
	newSession := func(t *testing.T, e *mcpsync.Engine) {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
		_, err = e.Subscribe(docURI, alice)
		require.NoError(t, err)
		_, err = e.Activate(docURI, ledger.ModePush)
		require.NoError(t, err)
	}
	for name, renew := range map[string]func(*testing.T, *mcpsync.Engine){
		"unsubscribe then subscribe": resubscribe,
		"new session":                newSession,
	} {
		t.Run(name, func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{ConfirmSends: true})
			old, ok, err := e.RequestRead(docURI, ledger.TriggerInitial)
			require.NoError(t, err)
			require.True(t, ok)
			renew(t, e)

			fresh, ok, err := e.RequestRead(docURI, ledger.TriggerInitial)
			require.NoError(t, err)
			require.True(t, ok, "the old generation's queued read covered the new generation's")
			assert.Greater(t, fresh.SubscriptionGeneration, old.SubscriptionGeneration)

			// The old read ends as it may: it never stands in for the new one.
			_, err = e.FinishRead(old, text(docURI, "old"))
			require.Error(t, err)
			out, err := e.FinishRead(fresh, text(docURI, "new"))
			require.NoError(t, err)
			assert.True(t, out.Accepted)
			assert.Equal(t, "new", served(t, e))
		})
	}
}

// A pulse that arrives while the URI is at its read cap is
// remembered (one dirty bit) and read once a read settles.
func TestLivenessPulseAtReadCapIsKept(t *testing.T) {
	e := activeEngine(t, &mcpsync.EngineOptions{MaxReadsInFlight: 2})
	a, b := issue(t, e, ledger.TriggerRevalidate), issue(t, e, ledger.TriggerRevalidate)

	_, ok, err := e.Notify(docURI)
	require.NoError(t, err, "a pulse at the read cap must be kept, not refused")
	require.False(t, ok, "no room for a read yet")

	out, err := e.FinishRead(a, text(docURI, "v1"))
	require.NoError(t, err)
	require.NotNil(t, out.FollowUp, "the kept pulse earns a read once there is room")
	assert.Equal(t, ledger.TriggerNotification, out.FollowUp.Trigger)
	_, err = e.FinishRead(b, text(docURI, "v1"))
	require.NoError(t, err)
	_, err = e.FinishRead(*out.FollowUp, text(docURI, "v2"))
	require.NoError(t, err)
	assert.Equal(t, "v2", served(t, e))
}

// Observers run outside every lock, so an observer may call back
// into the engine.
func TestLivenessObserverMayCallTheEngine(t *testing.T) {
	var e *mcpsync.Engine
	revoked := false
	e = activeEngine(t, &mcpsync.EngineOptions{OnTransition: func(tr mcpsync.Transition) {
		if tr.Event == "accept" && !revoked {
			revoked = true
			_, err := e.RevokeSubject(bob)
			assert.NoError(t, err)
		}
	}})
	done := make(chan error, 1)
	go func() {
		tk, err := e.IssueTicket(docURI, ledger.TriggerInitial)
		if err == nil {
			_, err = e.AcceptResourceVersion(tk, text(docURI, "v1"))
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("an observer calling RevokeSubject deadlocked AcceptResourceVersion")
	}
	assert.True(t, revoked)
	assert.Equal(t, "v1", served(t, e))
}

// notFound takes docURI to TOMBSTONE_PENDING after accepting body.
func notFound(t *testing.T, e *mcpsync.Engine, body string) {
	t.Helper()
	_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerInitial), text(docURI, body))
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerNotification), mcpsync.NotFoundResult())
	require.NoError(t, err)
	require.Equal(t, mcpsync.DecisionTombstonePending, out.Version.Decision)
}

// A deleted-and-recreated resource that is still subscribed comes
// back; a catalog confirms only a not-found it postdates.
func TestLivenessRecreatedResourceComesBack(t *testing.T) {
	t.Run("pulse while tombstone pending", func(t *testing.T) {
		e := activeEngine(t, nil)
		notFound(t, e, "v1")
		tk, ok, err := e.Notify(docURI)
		require.NoError(t, err, "a pulse during TOMBSTONE_PENDING must trigger a read")
		require.True(t, ok)
		_, err = e.FinishRead(tk, text(docURI, "recreated"))
		require.NoError(t, err)
		assert.Equal(t, "recreated", served(t, e))
	})
	t.Run("catalog older than the not-found", func(t *testing.T) {
		clock := newClock()
		e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
		measured := clock.t
		clock.t = clock.t.Add(time.Second)
		notFound(t, e, "v1")
		_, _, err := e.ApplyListing(docURI, false, measured)
		require.ErrorIs(t, err, mcpsync.ErrEvidenceTooOld)
		sub, err := e.Subscription(docURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateTombstonePending, sub.State, "a catalog measured before the not-found confirmed it")

		_, _, err = e.ApplyListing(docURI, false, clock.t)
		require.NoError(t, err)
		sub, err = e.Subscription(docURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateTombstoned, sub.State)
	})
	t.Run("tombstoned and still subscribed", func(t *testing.T) {
		clock := newClock()
		e := activeEngine(t, &mcpsync.EngineOptions{Now: clock.now})
		notFound(t, e, "v1")
		_, _, err := e.ApplyListing(docURI, false, clock.t)
		require.NoError(t, err)
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrTombstoned)

		// Still absent: the tombstone stands and is not announced twice.
		tk, ok, err := e.RequestRead(docURI, ledger.TriggerRevalidate)
		require.NoError(t, err, "a tombstoned subscription must still be revalidated")
		require.True(t, ok)
		_, err = e.FinishRead(tk, mcpsync.NotFoundResult())
		require.NoError(t, err)
		_, err = e.Lookup(alice, docURI)
		require.ErrorIs(t, err, mcpsync.ErrTombstoned)
		entries := outbox(t, e)
		require.Len(t, entries, 2)

		tk, ok, err = e.Notify(docURI)
		require.NoError(t, err, "a pulse for a tombstoned, subscribed URI must trigger a read")
		require.True(t, ok)
		_, err = e.FinishRead(tk, text(docURI, "recreated"))
		require.NoError(t, err)
		assert.Equal(t, "recreated", served(t, e))
		entries = outbox(t, e)
		require.Len(t, entries, 3)
		assert.Equal(t, ledger.InvalidateUpdated, entries[2].Reason)
	})
}

// A ticket is a value a caller may store; its JSON round trip
// does not change what the fence or the queue does with it.
func TestLivenessQueuedTicketSurvivesJSON(t *testing.T) {
	e := activeEngine(t, nil)
	tk, ok, err := e.RequestRead(docURI, ledger.TriggerInitial)
	require.NoError(t, err)
	require.True(t, ok)
	raw, err := json.Marshal(tk)
	require.NoError(t, err)
	var back ledger.Ticket
	require.NoError(t, json.Unmarshal(raw, &back))
	_, err = e.FinishRead(back, text(docURI, "v1"))
	require.NoError(t, err)

	_, ok, err = e.Notify(docURI)
	require.NoError(t, err)
	assert.True(t, ok, "the round-tripped ticket left the URI processing forever")
}

// A panicking content guard is a refusal (quarantine with the
// reason), never a crash or a stuck URI.
func TestLivenessGuardPanicQuarantines(t *testing.T) {
	e := activeEngine(t, &mcpsync.EngineOptions{Guard: func(uri string, contents []mcpsync.Content) error {
		if contents[0].Text == "boom" {
			panic("guard bug")
		}
		return nil
	}})
	tk, ok, err := e.RequestRead(docURI, ledger.TriggerInitial)
	require.NoError(t, err)
	require.True(t, ok)
	out, err := e.FinishRead(tk, text(docURI, "boom"))
	require.NoError(t, err)
	assert.Equal(t, mcpsync.DecisionQuarantined, out.Version.Decision)
	assert.Contains(t, out.Version.GuardReason, "guard bug")
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrQuarantined)

	tk, ok, err = e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok, "the URI must still be read after a guard panic")
	_, err = e.FinishRead(tk, text(docURI, "fine"))
	require.NoError(t, err)
	assert.Equal(t, "fine", served(t, e))
}

// A zero ReadResult is refused as EMPTY_CONTENTS, as documented.
func TestLivenessZeroReadResultIsEmptyContents(t *testing.T) {
	e := activeEngine(t, nil)
	_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerInitial), mcpsync.ReadResult{})
	require.ErrorIs(t, err, mcpsync.ErrEmptyContents)
	_, err = e.AcceptResourceVersion(issue(t, e, ledger.TriggerInitial), text(docURI, "v1"))
	require.NoError(t, err)
}

// The fence compares every identity field of a ticket with what
// it recorded at issue, and a derived artifact names the subject that read
// its version.
func TestLivenessTicketIdentityIsChecked(t *testing.T) {
	e := activeEngine(t, nil)
	tk := issue(t, e, ledger.TriggerInitial)
	forged := tk
	forged.Subject = bob
	_, err := e.AcceptResourceVersion(forged, text(docURI, "v1"))
	require.ErrorIs(t, err, mcpsync.ErrUnknownRequest)
	out, err := e.AcceptResourceVersion(tk, text(docURI, "v1"))
	require.NoError(t, err)

	v := out.Version.Version
	v.Subject = bob
	err = e.RecordDerived(ledger.DerivedArtifact{Index: "idx", ArtifactID: "a1", Version: v})
	require.ErrorIs(t, err, mcpsync.ErrUnknownVersion, "an artifact recorded under another subject escapes its revocation")
}

// A late result of a closed generation says STALE_AFTER_CLOSE, as the
// design says, even once a new generation opened.
func TestLivenessLateResultOfClosedGenerationSaysAfterClose(t *testing.T) {
	e := activeEngine(t, nil)
	late := issue(t, e, ledger.TriggerNotification)
	resubscribe(t, e)
	for _, r := range []mcpsync.ReadResult{text(docURI, "late"), mcpsync.NotFoundResult()} {
		_, err := e.AcceptResourceVersion(late, r)
		require.ErrorIs(t, err, mcpsync.ErrStaleAfterClose)
	}
}

// Subscribe racing Reconnect, the engine's half: a subscription of a session that ended can
// be neither activated nor given a staleness bound, so it never looks live.
func TestLivenessActivateChecksTheSession(t *testing.T) {
	e := newEngine(t, nil)
	_, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.ErrorIs(t, err, mcpsync.ErrIllegalTransition)

	e = activeEngine(t, nil)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.PublishStalenessBound(docURI, time.Minute)
	require.ErrorIs(t, err, mcpsync.ErrIllegalTransition)
}

// A refusal says its text once: the reason, the detail and the cause, each
// a single time (the command printed it two or three times).
func TestRefusalSaysItsTextOnce(t *testing.T) {
	e := activeEngine(t, nil)
	_, err := e.AcceptResourceVersion(issue(t, e, ledger.TriggerInitial),
		mcpsync.NewReadResult([]mcpsync.Content{{URI: "no scheme", Text: "x"}}))
	require.ErrorIs(t, err, mcpsync.ErrInvalidContent)
	msg := err.Error()
	assert.Equal(t, 1, strings.Count(msg, "refused"), msg)
	assert.Equal(t, 1, strings.Count(msg, "content 0"), msg)
}
