package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Break40 (2026-07-28): a server that acknowledges every
// subscriptions/listen stream and then ends it at once (100 ms later, an
// empty result) — a steady fault. Client.reestablish paces the streams the
// server ends with conn.ends, a doubling backoff up to RevalidateEvery, but
// Connection.acknowledged resets it (conn.ends = nil) at every
// acknowledgement, and this server acknowledges every stream. So the
// backoff never grows past its first step (1 s +-50%): the client sends a
// listen request, and re-reads every URI it carried (reopen reads with
// TriggerReconnect), about once a second for as long as the fault lasts.
//
// Property violated: no request storm — with a steady fault, a bounded
// number of listen requests per revalidation period.
func TestBreak40AckThenEndStormsListens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b40/end/a.md", "file:///b40/end/b.md", "file:///b40/end/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()

		r.wire.set(func(w *faultWire) { w.endAfterAck = 100 * time.Millisecond })
		// One more Subscribe puts the fault on the stream that is open now.
		const d = "file:///b40/end/d.md"
		r.srv.Set(d, "text/markdown", "v1")
		_, err = r.c.Subscribe(t.Context(), d)
		require.NoError(t, err)

		before, reads := r.wire.listens(), r.srv.Reads(uris[0])
		const periods = 6 // revalidation periods of 5 minutes
		for range periods * 5 {
			time.Sleep(time.Minute)
			quiesce()
		}
		listens := r.wire.listens() - before
		t.Logf("%d listen requests and %d reads of %s in %d revalidation periods", listens, r.srv.Reads(uris[0])-reads, uris[0], periods)
		for _, u := range append(uris, d) {
			_, desc := r.state(u)
			t.Logf("%s: %s", u, desc)
		}
		// Generous: a few streams per period, per URI even.
		limit := periods * 4 * (len(uris) + 1)
		require.LessOrEqual(t, listens, limit, fmt.Sprintf("a steady fault drew %d listen requests in %d revalidation periods", listens, periods))
	})
}
