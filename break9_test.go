package mcpsync_test

// Liveness through the Client: each test drives a Client as a user would
// into an interleaving of calls and faults, lets fake time pass with the
// server quiet, and checks the progress counterpart of a safety property.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A caller's Reconnect that cannot open a new session (the server is down
// for a moment) has already closed the old one: the client is left with a
// dead session, its heartbeat stopped, nothing healing it, and Health still
// says UP. Once the server is back, nothing brings the subscription back:
// the new text is never read, and Lookup serves the old one with no
// Degraded reason. The default heartbeat (15 s) would have found a dead
// session within a minute; ten minutes pass.
func TestBreak9FailedReconnectLeavesDeadSessionUp(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(nil)
				srv.Set(faultURI, "text/markdown", "v1")
				r, err := newLiveRig(t.Context(), srv, w.version, 0, mcpsync.ClientOptions{RevalidateEvery: time.Hour})
				require.NoError(t, err)
				t.Cleanup(func() { _ = r.c.Close() })
				r.subscribeSettled(t, faultURI)

				r.down.Store(true)
				err = r.c.Reconnect(t.Context())
				require.Error(t, err, "the server is down: Reconnect says so")
				r.down.Store(false) // the server is back

				srv.Set(faultURI, "text/markdown", "v2")
				time.Sleep(10 * time.Minute)
				quiesce()
				h := r.c.Health()
				entry, lerr := r.c.Lookup(faultURI)
				t.Logf("after the failed Reconnect and 10 minutes: Health %+v; Lookup degraded %q err %v", h, entry.Degraded, lerr)
				if h.State == mcpsync.ConnectionUp {
					r.requireConverged(t, faultURI, "failed caller Reconnect (Health says UP)")
				}
			})
		})
	}
}

// Client.Read at the read cap: with MaxReadsInFlight 1, a revalidation or
// a notification that lands while a caller's Read is in flight is kept as
// one dirty bit, and the Read's completion issues it as a follow-up ticket.
// Client.Read hands that ticket back in Outcome.FollowUp and nobody ever
// sends it: the URI's queue item stays "processing, unsent" for ever, so
// every later notification and revalidation is swallowed. The URI serves
// the old text although the server changed it twice and notified both.
func TestBreak9ClientReadAtCapWedgesURI(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, err := mcpsync.NewEngine(&mcpsync.Options{MaxReadsInFlight: 1})
				require.NoError(t, err)
				r := mustLiveRig(t, w, mcpsync.ClientOptions{Engine: e, RevalidateEvery: time.Minute}, faultURI)
				r.subscribeSettled(t, faultURI)

				hold := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
				read := make(chan mcpsync.Outcome, 1)
				go func() {
					out, _ := r.c.Read(context.Background(), faultURI)
					read <- out
				}()
				synctest.Wait()
				require.True(t, arrived(hold), "the caller's read is in flight")
				r.srv.Set(faultURI, "text/markdown", "v2") // its pulse finds the URI at the cap
				quiesce()
				hold.Release()
				out := <-read
				t.Logf("Client.Read returned accepted=%v followUp=%+v", out.Accepted, out.FollowUp)

				time.Sleep(5 * time.Second)
				r.srv.Set(faultURI, "text/markdown", "v3") // a later pulse, nothing in flight
				time.Sleep(5 * time.Minute)                // five revalidation intervals
				quiesce()
				r.requireConverged(t, faultURI, "pulse at the cap behind Client.Read")
			})
		})
	}
}

// Legacy: a subscribe the client gave up on (timeout) makes Unsubscribe
// wait for it (UNSUBSCRIBE_UNKNOWN, resolveUnsubscribe once it settles).
// resolveUnsubscribe checks that the caller does not watch the URI and only
// then sends resources/unsubscribe, without the URI's key lock: a Subscribe
// that lands between the check and the server's unsubscribe opens a push
// subscription the late unsubscribe then removes on the server. The client
// believes it is ACTIVE in push mode; no notification ever comes; the URI
// serves the old text (revalidation is an hour away) and nothing says so.
func TestBreak9LateUnsubscribeUndoesResubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustLiveRig(t, eras[0], mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 2 * time.Second}, faultURI)
		kit := r.faults()
		subHold := kit.HoldNextRequest(string(mcp.MethodResourcesSubscribe), "")
		first := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(context.Background(), faultURI)
			first <- err
		}()
		synctest.Wait()
		require.True(t, arrived(subHold))
		time.Sleep(3 * time.Second) // the client gives up on the subscribe: poll mode
		require.NoError(t, <-first)
		quiesce()

		unsubHold := kit.HoldNextRequest(string(mcp.MethodResourcesUnsubscribe), "")
		gone, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("Unsubscribe: %s generation %d", gone.State, gone.SubscriptionGeneration)

		subHold.Release() // the abandoned subscribe reaches the server, then the unsubscribe waiting for it goes out
		synctest.Wait()
		require.True(t, arrived(unsubHold), "the unsubscribe that waited for the subscribe is on its way")

		again, err := r.c.Subscribe(t.Context(), faultURI) // the caller changes its mind
		require.NoError(t, err)
		t.Logf("Subscribe again: %s generation %d mode %s", again.State, again.SubscriptionGeneration, again.Mode)
		unsubHold.Release()
		quiesce()

		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()
		r.requireConverged(t, faultURI, "late unsubscribe of an earlier generation")
	})
}

// A subscribed resource is deleted and the tombstone confirmed by a proven
// catalog; the caller then unsubscribes. A confirmed tombstone is still
// subscribed on the server, so it must close like an open generation: the
// server is told, and when the resource is recreated the unsubscribed URI
// stays closed instead of coming back against the caller's last word.
func TestBreak9UnsubscribeTombstonedURI(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{Snapshot: true, SuppressListChanged: true})
				srv.Set(faultURI, "text/markdown", "v1")
				srv.Set(otherURI, "text/markdown", "v1")
				r, err := newLiveRig(t.Context(), srv, w.version, 0, mcpsync.ClientOptions{RevalidateEvery: time.Hour})
				require.NoError(t, err)
				t.Cleanup(func() { _ = r.c.Close() })
				r.subscribeSettled(t, faultURI)
				srv.Delete(faultURI)
				time.Sleep(time.Second)
				quiesce()
				cat, err := r.c.Scan(t.Context(), mcpsync.KindResources)
				require.NoError(t, err)
				_, err = r.c.Reconcile(cat)
				require.NoError(t, err)
				sub, err := r.c.Engine().Subscription(faultURI)
				require.NoError(t, err)
				require.Equal(t, mcpsync.StateTombstoned, sub.State, r.describe(faultURI))

				closed, uerr := r.c.Unsubscribe(t.Context(), faultURI)
				t.Logf("Unsubscribe of a tombstoned URI: %s, err %v", closed.State, uerr)
				quiesce()
				srv.Recreate(faultURI, "v2")
				time.Sleep(time.Minute)
				quiesce()
				sub, err = r.c.Engine().Subscription(faultURI)
				require.NoError(t, err)
				if uerr != nil || openState(sub.State) || srv.Subscribed(faultURI) {
					t.Fatalf("unsubscribe of a tombstoned URI not done (Unsubscribe err %v); after recreation: %s", uerr, r.describe(faultURI))
				}
			})
		})
	}
}

// Legacy: an unsubscribe that fails once (the server answers an error, the
// network blips) leaves the generation UNSUBSCRIBE_UNKNOWN, which the design
// says is "reconciled on the same session or ends with the session". The
// Client never tries again: on a session that stays up, the server keeps the
// URI subscribed for ever and keeps notifying a client that asked it to
// stop, and the generation never reaches CLOSED.
func TestBreak9FailedUnsubscribeNeverRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustLiveRig(t, eras[0], mcpsync.ClientOptions{RevalidateEvery: time.Hour}, faultURI)
		r.subscribeSettled(t, faultURI)
		r.faults().FailNext(string(mcp.MethodResourcesUnsubscribe), faultURI, -32603, "internal error")
		gone, err := r.c.Unsubscribe(t.Context(), faultURI)
		require.NoError(t, err)
		t.Logf("Unsubscribe: %s", gone.State)
		r.faults().Heal() // the last fault
		time.Sleep(30 * time.Minute)
		quiesce()
		sub, err := r.c.Engine().Subscription(faultURI)
		require.NoError(t, err)
		if sub.State != mcpsync.StateClosed || r.srv.Subscribed(faultURI) {
			t.Fatalf("a failed unsubscribe is never reconciled on a live session: %s", r.describe(faultURI))
		}
	})
}
