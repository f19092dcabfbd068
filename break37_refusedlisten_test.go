package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Progress: a server change (srv.Set) reaches Lookup once notifications
// are handled, for every URI a SubscribeAll returned without error on a
// server that can subscribe. The server refuses the first
// subscriptions/listen request once (a JSON-RPC error), then answers
// every later one. With Subscribe alone the URI heals: the refused
// stream's end is noted, Client.reestablish finds it still conn.listen
// and, after its backoff, reopens the URI in push mode.
//
// (Since then, a URI whose stream was refused polls until its first poll
// tick, which opens it on a stream again: Client.retryPush.)
//
// With SubscribeAll the URI whose Subscribe sent the refused stream
// falls back to ModePoll ("subscribe failed: ...") and is taken off
// conn.want (serverSubscribe's setWanted(raw, false)); the next queued
// Subscribe replaces the refused stream with one that no longer carries
// it, so when the refused stream's streamEnded note is handled,
// Client.reestablish sees conn.listen != stream ("already replaced by a
// newer stream") and reopens nothing. The URI polls for the rest of the
// session on a server that pushes every other URI; its changes reach
// Lookup only at its next poll.
//
// Intermittent: the replacing Subscribe must swap conn.listen before the
// pump hands the refused stream's end to reestablish, a race between
// goroutines (no timer). The 8-URI case fails in about 1 run of 20
// without -race and 1 of 5 with it; the 1-URI case (Subscribe alone)
// always passes.
func TestBreak37RefusedListenInSubscribeAllLeavesURIPolling(t *testing.T) {
	for _, n := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d URIs", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, eras[1], nil)
				uris := make([]string, n)
				for i := range uris {
					uris[i] = fmt.Sprintf("file:///b37/refused/%d.md", i)
					r.srv.Set(uris[i], "text/markdown", "v1")
				}
				r.faults().FailNext(string(mcp.MethodSubscriptionsListen), "", -32603, "not now")
				_, err := r.c.SubscribeAll(t.Context(), uris)
				require.NoError(t, err)
				// The URI whose Subscribe sent the refused stream polls; its
				// first poll tick (PollEvery, 30 s, and its jitter) opens it
				// on a stream again.
				time.Sleep(time.Minute)
				quiesce()
				// Another URI's Subscribe replaces the stream, as any later
				// Subscribe or Unsubscribe does.
				const w = "file:///b37/refused/w.md"
				r.srv.Set(w, "text/markdown", "w")
				_, err = r.c.Subscribe(t.Context(), w)
				require.NoError(t, err)
				quiesce()

				for _, u := range uris {
					r.srv.Set(u, "text/markdown", "v2")
				}
				quiesce()
				var stale []string
				for _, u := range uris {
					sub, err := r.c.Engine().Subscription(u)
					require.NoError(t, err)
					entry, err := r.c.Lookup(u)
					require.NoError(t, err)
					if entry.Contents[0].Text != "v2" || sub.Mode != mcpsync.ModePush || !r.srv.Subscribed(u) {
						stale = append(stale, fmt.Sprintf("%s (%s mode: %q, carried: %v)", u, sub.Mode, sub.ModeReason, r.srv.Subscribed(u)))
					}
				}
				require.Empty(t, stale, "changes that never reached Lookup, or URIs the server does not push")
			})
		})
	}
}
