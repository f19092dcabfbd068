package mcpsync_test

import (
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// SubscribeAll "subscribes every URI of uris, as Subscribe does each", and
// Unsubscribe leaves a generation UNSUBSCRIBE_UNKNOWN only when the
// server's acknowledgement is lost or times out. A caller unsubscribes x
// while another subscribes it again (2026-07-28): the two serialize on
// x's key, so the close is decided (CLOSED) and x is then open again,
// notified by the listen stream.
//
// With Subscribe that holds. With SubscribeAll it does not: Client.wantAll
// adds x to the connection's wanted URIs (conn.setWanted) without taking
// x's key, after the Unsubscribe took x out of them (Client.relisten's
// conn.setWanted(raw, false)) and while it waits for its turn to replace
// the stream. The stream the Unsubscribe then sends is built from
// conn.want, so it carries x again; its acknowledgement names x, relisten
// fails with "subscriptions/listen still acknowledges x", and Unsubscribe
// finishes the close as unacknowledged: UNSUBSCRIBE_UNKNOWN, though no
// acknowledgement was lost and the server did what it was asked.
func TestBreak35UnsubscribeRacingSubscribeAll(t *testing.T) {
	for _, all := range []bool{false, true} {
		name := "Subscribe"
		if all {
			name = "SubscribeAll"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const z = "file:///b35/race/z.md"
				r := newRig(t, eras[1], nil)
				r.srv.Set(z, "text/markdown", "z")
				r.subscribe()

				// A replacement is under way (z's) and waits for its
				// acknowledgement; the Unsubscribe of x queues behind it.
				hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
				zDone := make(chan error, 1)
				go func() {
					_, err := r.c.Subscribe(t.Context(), z)
					zDone <- err
				}()
				synctest.Wait()
				<-hold.Arrived()

				type result struct {
					sub mcpsync.Subscription
					err error
				}
				unsub := make(chan result, 1)
				go func() {
					sub, err := r.c.Unsubscribe(t.Context(), faultURI)
					unsub <- result{sub, err}
				}()
				synctest.Wait()
				resub := make(chan error, 1)
				go func() {
					if all {
						_, err := r.c.SubscribeAll(t.Context(), []string{faultURI})
						resub <- err
						return
					}
					_, err := r.c.Subscribe(t.Context(), faultURI)
					resub <- err
				}()
				synctest.Wait()
				hold.Release()

				require.NoError(t, <-zDone)
				u := <-unsub
				require.NoError(t, u.err)
				require.NoError(t, <-resub)
				quiesce()

				assert.Equal(t, mcpsync.StateClosed, u.sub.State,
					"the Unsubscribe that was answered left its generation %s", u.sub.State)
				sub, err := r.c.Engine().Subscription(faultURI)
				require.NoError(t, err)
				assert.Equal(t, mcpsync.ModePush, sub.Mode)
				assert.True(t, r.srv.Subscribed(faultURI))
				assert.Greater(t, sub.SubscriptionGeneration, u.sub.SubscriptionGeneration)
			})
		})
	}
}
