package mcpsync_test

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

// Workers share a ledger; another worker took x's lease. Unsubscribe(x)
// only lets x go: BeginClose fails with ErrNotLeaseholder, and the server
// is told to stop (serverUnsubscribe). When that one request fails (a
// transient server error), the promise for every other failed
// unsubscribe holds here too: the server is put right once it answers
// (reconcileServer), so half an hour later it does not notify a URI this
// client no longer watches.
func TestBreak42LeaseMovedUnsubscribeFailureNeverRetried(t *testing.T) {
	for _, w := range eras {
		t.Run(w.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const y = "file:///b42/lease/y.md"
				l := newLeasedLedger()
				e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
				require.NoError(t, err)
				srv := mcpsynctest.NewServer(nil)
				srv.Set(docURI, "text/markdown", "v1")
				srv.Set(y, "text/markdown", "v1")
				r, err := newLiveRig(t.Context(), srv, w.version, 1, mcpsync.ClientOptions{Engine: e})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, r.c.Close()) })
				r.subscribeSettled(t, docURI)
				r.subscribeSettled(t, y) // keeps a 2026-07-28 stream open after docURI leaves it
				require.True(t, srv.Subscribed(docURI))

				l.setForeign(docURI, true)
				method := string(mcp.MethodResourcesUnsubscribe)
				if w.version == "2026-07-28" {
					method = string(mcp.MethodSubscriptionsListen)
				}
				r.faults().FailNext(method, "", mcp.INTERNAL_ERROR, "b42: try again")
				_, err = r.c.Unsubscribe(t.Context(), docURI)
				require.NoError(t, err)
				for range 6 {
					time.Sleep(5 * time.Minute)
					quiesce()
				}
				require.True(t, srv.Subscribed(y), "y is still watched")
				require.False(t, srv.Subscribed(docURI),
					"half an hour after Unsubscribe let go of a URI whose lease moved, the server still notifies it (unsubscribes sent %d)", srv.UnsubscribeCalls())
			})
		})
	}
}

// The same on 2026-07-28 with the caller giving up: Unsubscribe(x) of a
// URI whose lease moved waits for the stream replacement a Subscribe(z)
// has under way (its listen request slow to reach the server, carrying
// x); the caller's context ends. The replacement goes out carrying x and
// nothing replaces it again: x stays on the stream. (With the lease held,
// the same Unsubscribe queues reconcileServer; break38 covers that.)
func TestBreak42LeaseMovedCancelledUnsubscribeLeftOnStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const z = "file:///b42/lease/z.md"
		l := newLeasedLedger()
		e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
		require.NoError(t, err)
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/markdown", "v1")
		srv.Set(z, "text/markdown", "v1")
		r, err := newLiveRig(t.Context(), srv, eras[1].version, 1, mcpsync.ClientOptions{Engine: e})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.c.Close()) })
		r.subscribeSettled(t, docURI)
		require.True(t, srv.Subscribed(docURI))

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		subDone := make(chan error, 1)
		go func() {
			_, err := r.c.Subscribe(t.Context(), z)
			subDone <- err
		}()
		<-hold.Arrived()
		l.setForeign(docURI, true)
		ctx, cancel := context.WithCancel(t.Context())
		unsubDone := make(chan error, 1)
		go func() {
			_, err := r.c.Unsubscribe(ctx, docURI)
			unsubDone <- err
		}()
		synctest.Wait()
		cancel()
		t.Logf("Unsubscribe: %v", <-unsubDone)
		hold.Release()
		require.NoError(t, <-subDone)
		for range 6 {
			time.Sleep(5 * time.Minute)
			quiesce()
		}
		require.True(t, srv.Subscribed(z), "z is still watched")
		require.False(t, srv.Subscribed(docURI),
			"half an hour after Unsubscribe let go of a URI whose lease moved, the listen stream still carries it")
	})
}
