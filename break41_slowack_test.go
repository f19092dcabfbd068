package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Break41 (2026-07-28): a slow but honest server, which acknowledges every
// subscriptions/listen stream, naming every URI asked for, one second after
// RequestTimeout (30 s by default): it carries every stream it is sent.
// Three URIs are subscribed one after another.
//
// Each Subscribe waits RequestTimeout for its stream's acknowledgement and
// falls back to polling ("subscribe failed: context deadline exceeded");
// serverSubscribe then takes its URI off conn.want, although the stream
// that carries it stays conn.listen and is acknowledged a second later. At
// a poll tick, Client.retryPush reopens a URI x: relisten's shortcut (the
// current stream is acknowledged with x) only helps when no other URI's
// stream replaced x's meanwhile; otherwise a new stream goes out that
// carries x alone (every other URI is polled, so unwanted), times out, and
// x polls again while that stream, acknowledged a second later, is
// replaced by the next URI's retry. With three URIs (two converge, by
// luck of the retry order) the retries take turns replacing each other's
// streams for ever: no URI ever gets back to push, while the server
// acknowledges, and carries, every stream.
//
// Property violated: progress — each watched URI ends up in push mode on a
// server that accepts it. (The reason is visible, and each is polled within
// its bound, but the server is not refusing anything.)
func TestBreak41SlowAckNeverPushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b41/slow/a.md", "file:///b41/slow/b.md", "file:///b41/slow/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.ackDelay = 31 * time.Second // RequestTimeout is 30 s
		}})
		for _, u := range uris {
			sub, err := r.c.Subscribe(t.Context(), u)
			require.NoError(t, err)
			t.Logf("%s: %s %q", u, sub.Mode, sub.ModeReason)
		}
		time.Sleep(3 * time.Hour)
		quiesce()
		push, lines := r.pushed(uris)
		for _, l := range lines {
			t.Log(l)
		}
		f := r.wire.listenFilters()
		t.Logf("%d listen requests in 3 hours; the last four filters: %v", len(f), f[len(f)-4:])
		require.NoError(t, r.c.Close())
		time.Sleep(time.Minute) // the kit's delayed acknowledgements
		require.Equal(t, len(uris), push, fmt.Sprintf("after 3 hours, %d of %d URIs pushed by a server that acknowledges every stream", push, len(uris)))
	})
}
