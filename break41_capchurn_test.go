package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Break41 (2026-07-28): a server that carries at most max URIs per listen
// stream, the newest ones (the last of the filter): it acknowledges every
// stream, naming only the last max URIs it asked for. A steady fault: the
// same filter always gets the same answer.
//
// Subscribing more than max URIs leaves the older ones out of the
// acknowledgement. Client.retryPush, at the poll tick of such a URI x,
// reopens it: x goes to the end of conn.want, the new stream's
// acknowledgement names x, x is activated in push mode, and the activation
// resets w.retries (subscribe: "retries resets when the URI is activated in
// push mode"). But the acknowledgement now leaves out y, a URI the stream
// before carried (Connection.acknowledged's left), so y is reopened, its
// stream is acknowledged without y, and y falls back to polling with
// "subscribe failed: ..." — with its retries at 0 (its own last retry
// succeeded) and its retryAt long past. At y's next poll tick (PollEvery,
// 30 s) retryPush reopens y, which knocks x out, and so on: the backoff of
// retryPush never grows, because every retry "succeeds" by displacing
// another URI. Each turn costs two listen requests (each carrying every
// wanted URI) and a read.
//
// Property violated: no request storm — with a steady fault, a bounded
// number of listen requests per revalidation period (the passing tests
// accept about two per URI per period; a server refusing everything gets
// fewer).
func TestBreak41CapNewestChurnsRetryPush(t *testing.T) {
	for _, tc := range []struct{ n, max int }{{2, 1}, {20, 10}} {
		t.Run(fmt.Sprintf("%d-URIs-max-%d", tc.n, tc.max), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var uris []string
				for i := range tc.n {
					uris = append(uris, fmt.Sprintf("file:///b41/cap/%02d.md", i))
				}
				r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
					w.ackFilter = func(asked []string) []string {
						if len(asked) <= tc.max {
							return asked
						}
						return asked[len(asked)-tc.max:]
					}
				}})
				for _, u := range uris {
					_, err := r.c.Subscribe(t.Context(), u)
					require.NoError(t, err)
				}
				// Let the fault become steady: half an hour.
				time.Sleep(30 * time.Minute)
				quiesce()
				before, reads := r.wire.listens(), r.srv.Reads(uris[0])
				const periods = 12 // revalidation periods of 5 minutes
				time.Sleep(periods * 5 * time.Minute)
				quiesce()
				listens := r.wire.listens() - before
				push, _ := r.pushed(uris)
				t.Logf("%d listen requests and %d reads of %s in %d revalidation periods; %d of %d URIs pushed now",
					listens, r.srv.Reads(uris[0])-reads, uris[0], periods, push, tc.n)
				require.LessOrEqual(t, listens, periods*2*tc.n,
					"a server that steadily carries only the newest %d URIs drew %d listen requests in %d revalidation periods", tc.max, listens, periods)
			})
		})
	}
}
