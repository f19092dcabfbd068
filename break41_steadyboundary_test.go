package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Break41 (2026-07-28), the streamSteady boundary: a server that ends
// every subscriptions/listen stream exactly d after acknowledging it (an
// empty result), a steady fault, with ten URIs subscribed.
//
// Client.reestablish starts its backoff afresh when the ended stream stayed
// acknowledged for streamSteady (30 s). With d = 29 s the backoff grows to
// RevalidateEvery and the client sends two or three streams per
// revalidation period (the rest come from rehear: a URI unheard while the
// backoff runs is reopened at its revalidation tick). With d = 30 s every stream counts as steady: each end is
// followed by a new stream after the backoff's first step (1 s +-50%),
// and every URI is reopened (a new generation) and read again: about ten
// streams and ten reads of every URI per 5-minute revalidation period, for
// as long as the fault lasts — bounded by streamSteady, not by
// RevalidateEvery (with RevalidateEvery of an hour, about 116 per period).
// The 29 s case passes; the 30 s case is what this test reports.
//
// Property at stake: no request storm — a bounded number of listen
// requests (and reads) per revalidation period once a fault is steady.
// (A judgment call: a proxy that cuts every stream at 30 s is a steady
// fault the backoff was meant to pace.)
func TestBreak41EndAtStreamSteadyResetsBackoff(t *testing.T) {
	for _, d := range []time.Duration{29 * time.Second, 30 * time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var uris []string
				for i := range 10 {
					uris = append(uris, fmt.Sprintf("file:///b41/steady/%02d.md", i))
				}
				r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) { w.endAfterAck = d }})
				_, err := r.c.SubscribeAll(t.Context(), uris)
				require.NoError(t, err)
				time.Sleep(15 * time.Minute) // the fault becomes steady
				quiesce()
				before, reads := r.wire.listens(), r.srv.Reads(uris[0])
				const periods = 12
				time.Sleep(periods * 5 * time.Minute)
				quiesce()
				listens, nreads := r.wire.listens()-before, r.srv.Reads(uris[0])-reads
				t.Logf("streams ended %v after their acknowledgement: %d listen requests and %d reads of %s in %d revalidation periods",
					d, listens, nreads, uris[0], periods)
				require.NoError(t, r.c.Close())
				time.Sleep(time.Minute) // the kit's stream timers
				require.LessOrEqual(t, listens, periods*4, "listen requests")
				require.LessOrEqual(t, nreads, periods*4, "reads of one URI")
			})
		})
	}
}
