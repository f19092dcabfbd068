package mcpsync_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// recorder collects the transitions an engine reports.
type recorder struct{ seen []mcpsync.Transition }

func (r *recorder) observe(t mcpsync.Transition) { r.seen = append(r.seen, t) }

func (r *recorder) path() []string {
	var out []string
	for _, t := range r.seen {
		out = append(out, string(t.From)+">"+string(t.To))
	}
	return out
}

func TestStateMachineHappyPath(t *testing.T) {
	rec := &recorder{}
	e := newEngine(t, &mcpsync.EngineOptions{OnTransition: rec.observe})
	require.NoError(t, e.Discover(docURI))
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateDiscovered, sub.State)

	_, err = e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
	tk, ok, err := e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = e.FinishRead(tk, text(docURI, "v1"))
	require.NoError(t, err)
	_, err = e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.FinishClose(docURI, true)
	require.NoError(t, err)

	assert.Equal(t, []string{
		"DISCOVERED>SUBSCRIBING",
		"SUBSCRIBING>ACTIVE",
		"ACTIVE>UPDATE_SEEN",
		"UPDATE_SEEN>READ_PENDING",
		"READ_PENDING>VERSION_ACCEPTED",
		"VERSION_ACCEPTED>ACTIVE",
		"ACTIVE>UNSUBSCRIBING",
		"UNSUBSCRIBING>CLOSED",
	}, rec.path())
	for _, tr := range rec.seen {
		assert.Equal(t, uint64(1), tr.SubscriptionGeneration)
	}
}

// Every event is tried in every state; what the table does not allow must be
// a TransitionError that leaves the state unchanged.
func TestIllegalTransitionsAreErrors(t *testing.T) {
	type setup func(t *testing.T, e *mcpsync.Engine)
	subscribing := func(t *testing.T, e *mcpsync.Engine) {
		_, err := e.Subscribe(docURI, alice)
		require.NoError(t, err)
	}
	active := func(t *testing.T, e *mcpsync.Engine) {
		subscribing(t, e)
		_, err := e.Activate(docURI, ledger.ModePush)
		require.NoError(t, err)
	}
	closing := func(t *testing.T, e *mcpsync.Engine) {
		active(t, e)
		_, err := e.BeginClose(docURI)
		require.NoError(t, err)
	}
	closed := func(t *testing.T, e *mcpsync.Engine) {
		closing(t, e)
		_, err := e.FinishClose(docURI, true)
		require.NoError(t, err)
	}
	unknown := func(t *testing.T, e *mcpsync.Engine) {
		closing(t, e)
		_, err := e.FinishClose(docURI, false)
		require.NoError(t, err)
	}
	pending := func(t *testing.T, e *mcpsync.Engine) {
		active(t, e)
		tk := issue(t, e, ledger.TriggerInitial)
		_, err := e.AcceptResourceVersion(tk, mcpsync.NotFoundResult())
		require.NoError(t, err)
	}
	activate := func(e *mcpsync.Engine) error { _, err := e.Activate(docURI, ledger.ModePush); return err }
	finish := func(e *mcpsync.Engine) error { _, err := e.FinishClose(docURI, true); return err }
	resolve := func(e *mcpsync.Engine) error { _, err := e.ResolveUnsubscribe(docURI); return err }
	notify := func(e *mcpsync.Engine) error { _, _, err := e.Notify(docURI); return err }
	read := func(e *mcpsync.Engine) error { _, err := e.IssueTicket(docURI, ledger.TriggerPoll); return err }

	cases := []struct {
		name  string
		setup setup
		state ledger.SubscriptionState
		event func(*mcpsync.Engine) error
	}{
		{"activate twice", active, ledger.StateActive, activate},
		{"finish a close never begun", active, ledger.StateActive, finish},
		{"resolve a close that was acked", closed, ledger.StateClosed, resolve},
		{"reopen after close", closed, ledger.StateClosed, activate},
		{"reopen after lost ack", unknown, ledger.StateUnsubscribeUnknown, activate},
		{"read while subscribing", subscribing, ledger.StateSubscribing, read},
		{"read while closing", closing, ledger.StateUnsubscribing, read},
		{"activate while tombstone pending", pending, ledger.StateTombstonePending, activate},
		{"notify while closing", closing, ledger.StateUnsubscribing, notify},
		{"notify after lost ack", unknown, ledger.StateUnsubscribeUnknown, notify},
		{"activate while closing", closing, ledger.StateUnsubscribing, activate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, nil)
			tc.setup(t, e)
			err := tc.event(e)
			require.ErrorIs(t, err, mcpsync.ErrIllegalTransition)
			var te *mcpsync.TransitionError
			require.ErrorAs(t, err, &te)
			assert.Equal(t, tc.state, te.From)
			sub, err := e.Subscription(docURI)
			require.NoError(t, err)
			assert.Equal(t, tc.state, sub.State, "state unchanged")
		})
	}
}

func TestSubscribeIsIdempotentAndNewGenerationsStartAfresh(t *testing.T) {
	e := activeEngine(t, nil)
	first, err := e.Subscription(docURI)
	require.NoError(t, err)
	again, err := e.Subscribe("FILE:///docs/a.md", alice)
	require.NoError(t, err)
	assert.Equal(t, first.SubscriptionGeneration, again.SubscriptionGeneration)
	assert.Equal(t, ledger.StateActive, again.State)

	_, err = e.Subscribe(docURI, bob)
	require.ErrorIs(t, err, mcpsync.ErrForbidden)

	_, err = e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.Subscribe(docURI, alice)
	require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "a closing generation must finish first")

	_, err = e.FinishClose(docURI, true)
	require.NoError(t, err)
	next, err := e.Subscribe(docURI, alice)
	require.NoError(t, err)
	assert.Equal(t, first.SubscriptionGeneration+1, next.SubscriptionGeneration)
	assert.Zero(t, next.CloseEpoch)
	assert.Zero(t, next.LastIssuedOrdinal)
}

// A reopen closes the URI's generation and opens the next in one write of
// its record, from wherever the close is: the transitions are those of
// BeginClose, FinishClose (acked) and Subscribe, the old generation's
// results are STALE_AFTER_CLOSE from then on, and the new generation's fence
// starts afresh while its request ids go on rising and the version
// consumers see carries over.
func TestReopenClosesAndOpensTheNextGenerationInOneWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *mcpsync.Engine)
		path  []string
	}{
		{"open", func(*testing.T, *mcpsync.Engine) {}, []string{"1 READ_PENDING>UNSUBSCRIBING", "1 UNSUBSCRIBING>CLOSED", "2 DISCOVERED>SUBSCRIBING"}},
		{"closing", func(t *testing.T, e *mcpsync.Engine) {
			_, err := e.BeginClose(docURI)
			require.NoError(t, err)
		}, []string{"1 UNSUBSCRIBING>CLOSED", "2 DISCOVERED>SUBSCRIBING"}},
		{"closed", func(t *testing.T, e *mcpsync.Engine) {
			_, err := e.BeginClose(docURI)
			require.NoError(t, err)
			_, err = e.FinishClose(docURI, true)
			require.NoError(t, err)
		}, []string{"2 DISCOVERED>SUBSCRIBING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			e := activeEngine(t, &mcpsync.EngineOptions{OnTransition: rec.observe})
			acceptRead(t, e, ledger.TriggerInitial, "v1")
			late := issue(t, e, ledger.TriggerRevalidate)
			tc.setup(t, e)
			before, err := e.Ledger().Load(t.Context(), docURI)
			require.NoError(t, err)
			rec.seen = nil

			sub, err := e.Reopen(docURI, alice)
			require.NoError(t, err)
			after, err := e.Ledger().Load(t.Context(), docURI)
			require.NoError(t, err)
			assert.Equal(t, before.Revision+1, after.Revision, "one write")
			var path []string
			for _, tr := range rec.seen {
				path = append(path, fmt.Sprintf("%d %s>%s", tr.SubscriptionGeneration, tr.From, tr.To))
			}
			assert.Equal(t, tc.path, path)
			assert.Equal(t, uint64(2), sub.SubscriptionGeneration)
			assert.Equal(t, ledger.StateSubscribing, sub.State)
			assert.Zero(t, sub.CloseEpoch)
			assert.Zero(t, sub.LastIssuedOrdinal)

			out, err := e.AcceptResourceVersion(late, text(docURI, "late"))
			require.Error(t, err)
			assert.Equal(t, mcpsync.ReasonStaleAfterClose, out.Stale.Reason, "a result of the old generation")

			_, err = e.Activate(docURI, ledger.ModePush)
			require.NoError(t, err)
			entry, err := e.Lookup(alice, docURI)
			require.NoError(t, err)
			assert.Equal(t, "v1", entry.Contents[0].Text, "the version consumers see carries over")
			next := issue(t, e, ledger.TriggerReconnect)
			assert.Equal(t, uint64(1), next.ReadOrdinal)
			assert.Greater(t, next.RequestID, late.RequestID)
			_, err = e.AcceptResourceVersion(next, text(docURI, "v2"))
			require.NoError(t, err)
		})
	}
}

func TestSubscribeNeedsASessionAndAPrincipal(t *testing.T) {
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	_, err = e.Subscribe(docURI, alice)
	require.ErrorIs(t, err, mcpsync.ErrNoSession)
	e = newEngine(t, nil)
	_, err = e.Subscribe(docURI, "")
	require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
	_, err = e.Subscribe("not a uri", alice)
	require.ErrorIs(t, err, mcpsync.ErrInvalidURI)
}

// Duplicate notifications while a read is in flight cost one follow-up read,
// however many arrive (client-go workqueue: dirty + processing).
func TestNotificationsCoalesce(t *testing.T) {
	e := activeEngine(t, nil)
	first, ok, err := e.Notify(docURI)
	require.NoError(t, err)
	require.True(t, ok)
	for range 10 {
		_, ok, err := e.Notify(docURI)
		require.NoError(t, err)
		require.False(t, ok, "a read is already in flight")
	}
	out, err := e.FinishRead(first, text(docURI, "v1"))
	require.NoError(t, err)
	require.NotNil(t, out.FollowUp, "the pulses that arrived meanwhile get one read")
	assert.Equal(t, ledger.TriggerNotification, out.FollowUp.Trigger)

	out, err = e.FinishRead(*out.FollowUp, text(docURI, "v2"))
	require.NoError(t, err)
	assert.Nil(t, out.FollowUp, "nothing arrived during the follow-up")
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, uint64(11), sub.LastNotificationSeq)
	assert.Equal(t, uint64(2), sub.LastIssuedOrdinal, "11 pulses, 2 reads")
	assert.Equal(t, ledger.StateActive, sub.State)
}

// A read that fails still ends the queue's processing of its URI.
func TestFailedReadEndsProcessing(t *testing.T) {
	e := activeEngine(t, nil)
	tk, ok, err := e.RequestRead(docURI, ledger.TriggerInitial)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = e.RequestRead(docURI, ledger.TriggerRevalidate)
	require.NoError(t, err)
	require.False(t, ok)
	follow, err := e.Fail(tk)
	require.NoError(t, err)
	require.NotNil(t, follow)
	assert.Equal(t, ledger.TriggerRevalidate, follow.Trigger)
	_, err = e.AcceptResourceVersion(tk, text(docURI, "late"))
	require.ErrorIs(t, err, mcpsync.ErrUnknownRequest, "an abandoned ordinal cannot come back")
	next, err := e.Fail(*follow)
	require.NoError(t, err)
	assert.Nil(t, next)
	_, ok, err = e.RequestRead(docURI, ledger.TriggerPoll)
	require.NoError(t, err)
	assert.True(t, ok, "the URI is no longer processing")
}

func TestUnknownCloseEndsWithItsSession(t *testing.T) {
	e := activeEngine(t, nil)
	_, err := e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.FinishClose(docURI, false)
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateClosed, sub.State)
	assert.False(t, sub.EndedAt.IsZero())
}

func TestBeginCloseIsIdempotent(t *testing.T) {
	e := activeEngine(t, nil)
	issue(t, e, ledger.TriggerInitial)
	first, err := e.BeginClose(docURI)
	require.NoError(t, err)
	again, err := e.BeginClose(docURI)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, 1, first.ReadsInFlight)
}

// An identity the ledger never issued puts the subscription in
// RECONCILIATION_REQUIRED; reconciliation then decides.
func TestUnknownIdentityRequiresReconciliation(t *testing.T) {
	e := activeEngine(t, nil)
	tk := issue(t, e, ledger.TriggerInitial)
	forged := tk
	forged.ReadOrdinal = 99
	_, err := e.AcceptResourceVersion(forged, text(docURI, "?"))
	require.ErrorIs(t, err, mcpsync.ErrReconciliationRequired)
	sub, err := e.Subscription(docURI)
	require.NoError(t, err)
	require.Equal(t, ledger.StateReconciliationRequired, sub.State)
	_, err = e.AcceptResourceVersion(tk, text(docURI, "real"))
	require.ErrorIs(t, err, mcpsync.ErrNotActive, "nothing passes until reconciliation")

	reread, ok, err := e.ApplyListing(docURI, true, newClock().t)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = e.FinishRead(reread, text(docURI, "real"))
	require.NoError(t, err)
	assert.Equal(t, "real", served(t, e))
}

func TestSubscriptionsListsEveryURI(t *testing.T) {
	e := activeEngine(t, nil)
	require.NoError(t, e.Discover("file:///docs/b.md"))
	var uris []string
	for s, err := range e.Subscriptions() {
		require.NoError(t, err)
		assert.Equal(t, mcpsync.SchemaSubscription, s.Schema)
		uris = append(uris, s.URI)
	}
	assert.Equal(t, []string{docURI, "file:///docs/b.md"}, uris)
}

// With ConfirmSends, pulses that arrive before the read goes out are covered
// by it (the change they announce happened before the server answers), so
// duplicate notifications cost nothing; a pulse after the send still earns
// its one follow-up. Without the promise every pulse during a read does.
func TestPulsesBeforeTheSendAreCovered(t *testing.T) {
	for _, confirm := range []bool{true, false} {
		t.Run(fmt.Sprintf("ConfirmSends=%v", confirm), func(t *testing.T) {
			e := activeEngine(t, &mcpsync.EngineOptions{ConfirmSends: confirm})
			first, ok, err := e.Notify(docURI)
			require.NoError(t, err)
			require.True(t, ok)
			for range 10 { // duplicates, before the read goes out
				_, _, err := e.Notify(docURI)
				require.NoError(t, err)
			}
			e.Sending(first)
			out, err := e.FinishRead(first, text(docURI, "v1"))
			require.NoError(t, err)
			if confirm {
				assert.Nil(t, out.FollowUp, "covered by the read that followed them")
			} else {
				require.NotNil(t, out.FollowUp)
				_, err = e.FinishRead(*out.FollowUp, text(docURI, "v1"))
				require.NoError(t, err)
			}

			second, ok, err := e.Notify(docURI)
			require.NoError(t, err)
			require.True(t, ok)
			e.Sending(second)
			_, _, err = e.Notify(docURI) // after the send: may announce a change the read missed
			require.NoError(t, err)
			out, err = e.FinishRead(second, text(docURI, "v2"))
			require.NoError(t, err)
			require.NotNil(t, out.FollowUp, "a pulse after the send earns a follow-up")
		})
	}
}
