package mcpsync_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// b41RetryInFlight sets up a (pushed) and x (polled: its stream was
// refused), then has the server accept streams again but acknowledge each
// only after ackDelay, and waits until retryPush's stream for x is out.
func b41RetryInFlight(t *testing.T, ackDelay time.Duration) (*rig, string, string) {
	const a, x = "file:///b41/race/a.md", "file:///b41/race/x.md"
	r := buildRig(t, eras[1], rigConfig{uris: []string{a, x}})
	_, err := r.c.Subscribe(t.Context(), a)
	require.NoError(t, err)
	r.wire.set(func(w *faultWire) { w.refuse = listensWhere(func(u []string) bool { return slices.Contains(u, x) }) })
	sx, err := r.c.Subscribe(t.Context(), x)
	require.NoError(t, err)
	require.Equal(t, mcpsync.ModePoll, sx.Mode)
	quiesce()
	r.wire.set(func(w *faultWire) { w.refuse = nil; w.ackDelay = ackDelay })
	n := r.wire.listens()
	for i := 0; r.wire.listens() == n; i++ {
		require.Less(t, i, 120, "no retry of x within two minutes")
		time.Sleep(time.Second)
	}
	t.Logf("retry out: filters %v", r.wire.listenFilters())
	return r, a, x
}

func b41End(t *testing.T, r *rig, d time.Duration) {
	require.NoError(t, r.c.Close())
	time.Sleep(d) // the kit's delayed acknowledgements
	synctest.Wait()
}

// Passing. Safety: a URI unsubscribed (or forgotten) while retryPush's reopen of it
// is waiting for its stream's acknowledgement does not come back, and the
// server stops carrying it; the other URI stays pushed; a Reconnect
// brings it back in push mode; a Close leaves no goroutine behind.
func TestBreak41RetryPushRaces(t *testing.T) {
	for _, delay := range []time.Duration{10 * time.Second, 40 * time.Second} {
		for _, op := range []string{"unsubscribe", "forget", "reconnect", "close"} {
			t.Run(fmt.Sprint(op, "-ack-after-", delay), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r, a, x := b41RetryInFlight(t, delay)
					done := make(chan error, 1)
					go func() {
						var err error
						switch op {
						case "unsubscribe":
							_, err = r.c.Unsubscribe(context.Background(), x)
						case "forget":
							err = r.c.Forget(context.Background(), x)
						case "reconnect":
							err = r.c.Reconnect(context.Background())
						case "close":
							err = r.c.Close()
						}
						done <- err
					}()
					time.Sleep(2 * delay)
					quiesce()
					require.NoError(t, <-done)
					if op == "close" {
						time.Sleep(delay)
						synctest.Wait()
						return
					}
					time.Sleep(10 * time.Minute)
					quiesce()
					ta, da := r.state(a)
					_, dx := r.state(x)
					t.Logf("a: %s %s; x: %s", ta, da, dx)
					sa, _ := r.c.Engine().Subscription(a)
					require.Equal(t, mcpsync.ModePush, sa.Mode, da)
					require.True(t, r.srv.Subscribed(a), da)
					sx, _ := r.c.Engine().Subscription(x)
					switch op {
					case "unsubscribe", "forget":
						require.False(t, r.srv.Subscribed(x), dx)
						require.NotEqual(t, mcpsync.StateActive, sx.State, dx)
						if op == "forget" {
							_, err := r.c.Lookup(x)
							require.Error(t, err, dx)
						}
					case "reconnect":
						require.Equal(t, mcpsync.ModePush, sx.Mode, dx)
						require.True(t, r.srv.Subscribed(x), dx)
					}
					// a still gets its changes.
					r.srv.Set(a, "text/markdown", "v9")
					time.Sleep(5 * time.Second)
					quiesce()
					got, da := r.state(a)
					require.Equal(t, "v9", got, da)
					b41End(t, r, delay)
				})
			})
		}
	}
}
