package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened (Client.reopen). When
// the write finishing that close fails once, the URI is left UNSUBSCRIBING
// in the current session, and the repair of its next revalidation tick
// finishes the close (Client.finishStuckClose) only while the caller still
// watches it; "unsubscribed meanwhile: its Unsubscribe decides the close".
//
// The caller unsubscribes it before that tick. Unsubscribe is documented as
// closing the generation and being idempotent, and it returns no error.
// The promise checked: after Unsubscribe returned, the generation is closed
// (CLOSED or UNSUBSCRIBE_UNKNOWN, not UNSUBSCRIBING), and a later Subscribe
// of the same URI opens a new generation, as Subscribe promises.
//
// Neither holds. Unsubscribe returns at once when the generation has a
// close epoch (the `before.CloseEpoch != 0` early return), so it decides
// nothing: the generation stays UNSUBSCRIBING for the rest of the session,
// nothing finishes it (the tick's repair skips an unwatched URI), and every
// Subscribe of the URI is refused by Engine.Subscribe with an illegal
// transition (UNSUBSCRIBING in the current session) and drops its watch
// again, so the caller can never watch the URI again until the session is
// replaced. Fails on the current code.
func TestBreak34UnsubscribeOfStuckCloseNeverDecidesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLedgerRig(t, eras[1])
		r.subscribe()

		r.ledger.failWrites(1, writeTo(mcpsync.StateClosed))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.Equal(t, 1, r.ledger.failures(), "the write finishing the close was refused")
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateUnsubscribing, sub.State, "the reopen stopped half way")

		// The caller no longer wants the URI.
		_, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		time.Sleep(6 * time.Minute) // a revalidation period and more
		quiesce()
		sub, err = r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.State == mcpsync.StateUnsubscribing {
			t.Errorf("Unsubscribe returned nil, yet the generation is still %s in the current session", sub.State)
		}

		// Then it wants it again.
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		sub, err = r.c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err, "Subscribe after Unsubscribe (subscription %s, generation %d)", sub.State, sub.SubscriptionGeneration)
		quiesce()
		require.Equal(t, "v2", r.served())
	})
}

// The same early return when the reopen stopped after the close: the URI is
// CLOSED in the current session, but the client still wants it on its
// 2026-07-28 listen stream (closeTold leaves the connection's wanted URIs
// alone), so the next stream, opened for another URI, carries it again.
// Unsubscribe returns nil without telling the server (serverUnsubscribe is
// never reached), and the server goes on notifying a URI the caller
// unsubscribed, on every stream the client opens from then on.
func TestBreak34UnsubscribeOfStuckOpenKeepsServerSubscribed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		r := newLedgerRig(t, eras[1])
		r.subscribe()
		r.srv.Set(other, "text/markdown", "v1")
		_, err := r.c.Subscribe(t.Context(), other)
		require.NoError(t, err)
		quiesce()

		// The write opening its next generation fails until the caller
		// lets it go: the repair a read of it would start fails too.
		r.ledger.failWrites(1000, openingWriteOf(faultURI))
		r.faults().EndListenStreams()
		time.Sleep(2 * time.Second) // the client's backoff before reopening
		quiesce()
		require.GreaterOrEqual(t, r.ledger.failures(), 1, "the write opening the next generation was refused")
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		require.Equal(t, mcpsync.StateClosed, sub.State, "the reopen stopped half way")

		_, err = r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		quiesce()
		if r.srv.Subscribed(faultURI) {
			t.Errorf("Unsubscribe returned nil, yet the server is still asked to notify %s", faultURI)
		}
		// Another Subscribe replaces the stream: it must not carry the URI
		// the caller let go of.
		const third = "file:///docs/third.md"
		r.srv.Set(third, "text/markdown", "v1")
		_, err = r.c.Subscribe(t.Context(), third)
		require.NoError(t, err)
		quiesce()
		if r.srv.Subscribed(faultURI) {
			t.Errorf("a stream opened after Unsubscribe still carries %s", faultURI)
		}
	})
}
