package mcpsync_test

// One integration test per fault the design names, each run on both
// protocol eras over the in-process transport, and the read-ordering ones
// over streamable HTTP too. The server is mcpsynctest's; faults are injected
// by its Transport between mcp-go's client and the wire.

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// subscribedIn runs test once per wiring of ws, in a subtest named for
// it, on a rig of that wiring with faultURI subscribed.
func subscribedIn(t *testing.T, ws []wiring, test func(t *testing.T, r *rig)) {
	for _, w := range ws {
		t.Run(w.name, func(t *testing.T) {
			r := newRig(t, w, nil)
			r.subscribe()
			test(t, r)
		})
	}
}

func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never arrived")
	}
}

// Read A slower than B: A was sent first but answers last, with older
// content; B's version stays, A leaves a STALE_ORDINAL receipt.
func TestFaultReadASlowerThanB(t *testing.T) {
	subscribedIn(t, withHTTP, func(t *testing.T, r *rig) {

		holdA := r.faults().HoldNext("resources/read", faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2") // notification -> read A
		waitFor(t, holdA.Arrived())                // the server answered v2; the client waits
		r.srv.Set(faultURI, "text/markdown", "v3")
		b, err := r.c.Read(t.Context(), faultURI) // read B overtakes A
		require.NoError(t, err)
		require.Equal(t, mcpsync.DecisionAccepted, b.Version.Decision)
		require.Equal(t, "v3", r.served())

		holdA.Release()
		a := next(t, r.outcomes)
		for a.Accepted && a.Version.Version.ReadOrdinal == b.Version.Version.ReadOrdinal {
			a = next(t, r.outcomes) // B's own outcome, reported too
		}
		require.False(t, a.Accepted, "the slower, older read must not pass")
		assert.Equal(t, mcpsync.ReasonStaleOrdinal, a.Stale.Reason)
		assert.Less(t, a.Stale.ReadOrdinal, b.Version.Version.ReadOrdinal)
		assert.Equal(t, "v3", r.served(), "old generation never overwrites new")
	})
}

// Close vs read accept race: a read is in flight when the unsubscribe
// begins; its answer, content or not-found, is audit only.
func TestFaultCloseVersusReadAcceptRace(t *testing.T) {
	for _, w := range withHTTP {
		for _, gone := range []bool{false, true} {
			name := w.name + "/late content"
			if gone {
				name = w.name + "/late not found"
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, w, nil)
				r.subscribe()
				before := r.outbox()

				hold := r.faults().HoldNext("resources/read", faultURI)
				if gone {
					r.srv.Delete(faultURI) // notification -> read answered not found
				} else {
					r.srv.Set(faultURI, "text/markdown", "v2")
				}
				waitFor(t, hold.Arrived())
				sub, err := r.c.Unsubscribe(t.Context(), faultURI)
				require.NoError(t, err)
				assert.Equal(t, ledger.StateClosed, sub.State)

				hold.Release()
				late := next(t, r.outcomes)
				require.False(t, late.Accepted)
				assert.Equal(t, mcpsync.ReasonStaleAfterClose, late.Stale.Reason)
				assert.Equal(t, gone, late.Stale.NotFound)
				assert.Equal(t, before, r.outbox(), "no version, tombstone or invalidation after close")
				assert.Equal(t, "v1", r.served(), "cached content stays until evicted")
			})
		}
	}
}

// Late content and late not-found after CLOSED: the unsubscribe completed
// before the answers of two reads arrive; neither changes anything.
func TestFaultLateContentAndNotFoundAfterClosed(t *testing.T) {
	subscribedIn(t, eras, func(t *testing.T, r *rig) {
		holdContent := r.faults().HoldNext("resources/read", faultURI)
		results := make(chan mcpsync.Outcome, 2)
		go func() { out, _ := r.c.Read(context.Background(), faultURI); results <- out }()
		waitFor(t, holdContent.Arrived())
		r.faults().DropNext(faultURI, 1) // only the explicit reads below
		r.srv.Delete(faultURI)
		holdGone := r.faults().HoldNext("resources/read", faultURI)
		go func() { out, _ := r.c.Read(context.Background(), faultURI); results <- out }()
		waitFor(t, holdGone.Arrived())

		sub, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.StateClosed, sub.State)
		holdContent.Release()
		holdGone.Release()
		notFound := 0
		for range 2 {
			out := <-results
			require.False(t, out.Accepted)
			assert.Equal(t, mcpsync.ReasonStaleAfterClose, out.Stale.Reason)
			if out.Stale.NotFound {
				notFound++
			}
		}
		assert.Equal(t, 1, notFound)
		assert.Len(t, r.outbox(), 1, "only the version accepted before the close")
		sub, err = r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.StateClosed, sub.State, "no late tombstone")
	})
}

// Unsubscribe ack lost: the generation becomes UNSUBSCRIBE_UNKNOWN, stays
// silent, is never reopened, and a later Subscribe is a new generation.
func TestFaultUnsubscribeAckLost(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			r := newRig(t, w, &mcpsync.ClientOptions{RequestTimeout: time.Second})
			first := r.subscribe()
			if w.version == "2025-11-25" {
				r.faults().LoseNextResponse("resources/unsubscribe", faultURI)
			} else {
				// 2026-07-28 unsubscribes by replacing the listen stream;
				// with none left to open, a lost ack is a stream that breaks.
				// A second URI keeps a stream to reopen.
				r.srv.Set("file:///docs/other.md", "text/plain", "o")
				_, err := r.c.Subscribe(t.Context(), "file:///docs/other.md")
				require.NoError(t, err)
				next(t, r.outcomes)
				r.faults().BreakNext("subscriptions/listen", "", assert.AnError)
			}
			sub, err := r.c.Unsubscribe(t.Context(), faultURI)
			require.NoError(t, err)
			require.Equal(t, ledger.StateUnsubscribeUnknown, sub.State)

			_, _, err = r.c.Engine().Notify(faultURI)
			require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "silent: a pulse issues no read")
			_, err = r.c.Engine().Activate(faultURI, ledger.ModePush)
			require.ErrorIs(t, err, mcpsync.ErrIllegalTransition, "never reopened")

			again, err := r.c.Subscribe(t.Context(), faultURI)
			require.NoError(t, err)
			assert.Equal(t, first.SubscriptionGeneration+1, again.SubscriptionGeneration)
		})
	}
}

// Old-session notification: a notification of the previous connection that
// arrives after the reconnect triggers nothing and leaves a receipt.
func TestFaultOldSessionNotification(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, nil)
		r.subscribe()
		oldKit := r.faults()
		oldKit.DelayNext(faultURI, 0) // hold until released
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		require.Equal(t, 1, oldKit.Held())

		require.NoError(t, r.c.Reconnect(t.Context()))
		reread := next(t, r.outcomes)
		require.True(t, reread.Accepted)
		assert.Equal(t, ledger.TriggerReconnect, reread.Version.Trigger)
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		issued := sub.LastIssuedOrdinal

		require.Equal(t, 1, oldKit.ReleaseNotifications())
		quiesce()
		assert.Equal(t, uint64(1), r.c.Engine().StaleCounts()[mcpsync.ReasonGenerationMismatch],
			"the old session's notification is refused with a receipt")
		sub, err = r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, issued, sub.LastIssuedOrdinal, "it issued no read")
		assert.Equal(t, "v2", r.served())
	})
}

// Out-of-order and duplicated notifications: whatever order pulses arrive
// in, accepted versions only move forward and the last is the server's
// newest.
func TestFaultOutOfOrderNotifications(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, nil)
		r.subscribe()
		kit := r.faults()
		kit.ReorderNext(faultURI)
		kit.SetDuplicateRate(1)
		readsBefore := r.srv.Reads(faultURI)
		for _, v := range []string{"v2", "v3", "v4", "v5"} {
			r.srv.Set(faultURI, "text/markdown", v)
		}
		kit.ReleaseNotifications()
		quiesce()
		assert.Equal(t, "v5", r.served())
		reads := r.srv.Reads(faultURI) - readsBefore
		assert.LessOrEqual(t, reads, 8, "8 pulses for 4 changes: never more reads than pulses")
		var last uint64
		for len(r.outcomes) > 0 {
			out := <-r.outcomes
			if out.Accepted {
				assert.Greater(t, out.Version.Version.ReadOrdinal, last, "no version regression")
				last = out.Version.Version.ReadOrdinal
			}
		}
	})
}

// URI encoding confusion: the server notifies another spelling of the
// subscribed URI; it reaches the same subscription and fence.
func TestFaultURIEncodingConfusion(t *testing.T) {
	subscribedIn(t, eras, func(t *testing.T, r *rig) {
		r.faults().MapNotificationURIs(func(u string) string {
			return strings.Replace(strings.Replace(u, "file:", "FILE:", 1), "handbook", "%68andbook", 1)
		})
		r.srv.Set(faultURI, "text/markdown", "v2")
		out := next(t, r.outcomes)
		require.True(t, out.Accepted)
		assert.Equal(t, faultURI, out.Version.Version.URI)
		assert.Equal(t, "v2", r.served())
	})
}

// Multi-page change with a lost notification: the update notification is
// lost; the revalidation read bounds how long the copy stays stale.
func TestFaultLostNotificationCaughtByRevalidation(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{RevalidateEvery: time.Minute, Jitter: 0.1})
		sub := r.subscribe()
		r.faults().DropNext(faultURI, 1)
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		assert.Equal(t, "v1", r.served(), "the notification was lost")
		time.Sleep(time.Duration(sub.StalenessBoundMs) * time.Millisecond)
		quiesce()
		assert.Equal(t, "v2", r.served(), "caught within the published staleness bound")
	})
}

// Cache hit after permission revocation: zero hits once the subject is
// revoked, every derived artifact invalidated, reads in flight refused.
func TestFaultCacheHitAfterPermissionRevocation(t *testing.T) {
	subscribedIn(t, eras, func(t *testing.T, r *rig) {
		e := r.c.Engine()
		v := r.outbox()[0].Version
		require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "embeddings", ArtifactID: "handbook#0", Version: v}))

		hold := r.faults().HoldNext("resources/read", faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2")
		waitFor(t, hold.Arrived())
		rc, err := e.RevokeSubject(alice)
		require.NoError(t, err)
		_, err = r.c.Lookup(faultURI)
		require.ErrorIs(t, err, mcpsync.ErrRevoked, "0 cache hits after revocation")
		require.Len(t, rc.Artifacts, 1)
		assert.Equal(t, "handbook#0", rc.Artifacts[0].ArtifactID)

		hold.Release()
		late := next(t, r.outcomes)
		require.False(t, late.Accepted)
		assert.Equal(t, mcpsync.ReasonSubjectRevoked, late.Stale.Reason)
		var traced []string
		for _, entry := range r.outbox() {
			if entry.Reason == ledger.InvalidateRevoked {
				traced = append(traced, artifactOf(entry))
			}
		}
		assert.ElementsMatch(t, []string{"/", "embeddings/handbook#0"}, traced)
	})
}

// A subscribe handler that records the subscription and then fails (a real
// server does this): the URI polls, and the notifications it still gets
// trigger fenced reads.
func TestFaultSubscribeFailsAfterRecording(t *testing.T) {
	srvOpts := &mcpsynctest.ServerOptions{FailSubscribe: true}
	srv := mcpsynctest.NewServer(srvOpts)
	srv.Set(faultURI, "text/markdown", "v1")
	outcomes := make(chan mcpsync.Outcome, 16)
	c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25", OnOutcome: func(o mcpsync.Outcome) { outcomes <- o }})
	require.NoError(t, err)
	defer c.Close()
	sub, err := c.Subscribe(t.Context(), faultURI)
	require.NoError(t, err)
	assert.Equal(t, ledger.ModePoll, sub.Mode, "a failed subscribe is not a subscription")
	require.True(t, srv.Subscribed(faultURI), "although the server recorded it")
	require.True(t, next(t, outcomes).Accepted)
	srv.Set(faultURI, "text/markdown", "v2")
	out := next(t, outcomes)
	require.True(t, out.Accepted)
	assert.Equal(t, ledger.TriggerNotification, out.Version.Trigger)

	// The server recorded the subscription, so it is told of the close.
	sub, err = c.Unsubscribe(t.Context(), faultURI)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateClosed, sub.State)
	assert.False(t, srv.Subscribed(faultURI), "the server's record is cleared")
}

func artifactOf(entry mcpsync.OutboxEntry) string {
	if entry.Artifact == nil {
		return "/"
	}
	return entry.Artifact.Index + "/" + entry.Artifact.ArtifactID
}

// 2026-07-28: when the server ends the subscriptions/listen stream, every
// subscription it carried leaves ACTIVE, is re-established as a new
// generation and re-read; notifications flow on the new stream.
func TestListenStreamEndReestablishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		before := r.subscribe()
		r.faults().EndListenStreams()
		quiesce()
		r.srv.Set(faultURI, "text/markdown", "v2") // no stream: nobody is notified
		quiesce()
		assert.Equal(t, "v1", r.served())
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()

		reread := next(t, r.outcomes)
		require.True(t, reread.Accepted)
		assert.Equal(t, mcpsync.DecisionAccepted, reread.Version.Decision)
		assert.Equal(t, ledger.TriggerReconnect, reread.Version.Trigger)
		after, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		assert.Equal(t, before.SubscriptionGeneration+1, after.SubscriptionGeneration)
		assert.Equal(t, ledger.ModePush, after.Mode)
		assert.Equal(t, "v2", r.served(), "the re-read caught what the gap lost")

		r.srv.Set(faultURI, "text/markdown", "v3")
		quiesce()
		assert.Equal(t, "v3", r.served(), "notifications flow on the new stream")
	})
}
