package mcpsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// (2026-07-28) Subscribes and Unsubscribes that arrive while a listen
// stream is being replaced are all carried by the one stream that follows
// it: each Subscribe returns in push mode with its first version, each
// Unsubscribe leaves its URI off the server's subscriptions, and no URI
// is lost or kept by the merge. A URI carried across the replacements and
// changed while no stream was open is read once afterwards, not once per
// replacement.
func TestListenBatchesSubscribesAndUnsubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var kept, dropped, added []string
		for i := range 5 {
			kept = append(kept, fmt.Sprintf("file:///batch/kept%d.md", i))
			dropped = append(dropped, fmt.Sprintf("file:///batch/dropped%d.md", i))
		}
		for i := range 20 {
			added = append(added, fmt.Sprintf("file:///batch/added%02d.md", i))
		}
		all := append(append(append([]string{}, kept...), dropped...), added...)
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: all})
		for _, u := range append(append([]string{}, kept...), dropped...) {
			r.watch(u)
		}
		time.Sleep(time.Minute) // every read after a replacement is done
		quiesce()
		listens, reads := r.srv.SubscribeCalls(), map[string]int{}
		for _, u := range kept {
			reads[u] = r.srv.Reads(u)
		}

		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		var wg sync.WaitGroup
		subs := make([]mcpsync.Subscription, len(added))
		subErrs := make([]error, len(added))
		wg.Go(func() { subs[0], subErrs[0] = r.c.Subscribe(context.Background(), added[0]) })
		synctest.Wait()
		require.True(t, arrived(hold), "the first replacement is held")
		r.srv.Set(kept[0], "text/markdown", "v2") // while no stream carries it
		for i := 1; i < len(added); i++ {
			wg.Go(func() { subs[i], subErrs[i] = r.c.Subscribe(context.Background(), added[i]) })
		}
		unsubs := make([]mcpsync.Subscription, len(dropped))
		unsubErrs := make([]error, len(dropped))
		for i := range dropped {
			wg.Go(func() { unsubs[i], unsubErrs[i] = r.c.Unsubscribe(context.Background(), dropped[i]) })
		}
		synctest.Wait()
		hold.Release()
		wg.Wait()
		for i, u := range added {
			require.NoError(t, subErrs[i], u)
			assert.Equal(t, ledger.ModePush, subs[i].Mode, "%s: %s", u, subs[i].ModeReason)
			assert.True(t, openState(subs[i].State), "%s is %s", u, subs[i].State)
			_, err := r.c.Lookup(u)
			assert.NoError(t, err, "%s has its first version", u)
		}
		for i, u := range dropped {
			require.NoError(t, unsubErrs[i], u)
			assert.Equal(t, ledger.StateClosed, unsubs[i].State, u)
		}
		minutes(1)
		for _, u := range append(append([]string{}, kept...), added...) {
			assert.True(t, r.srv.Subscribed(u), "%s is on the stream", u)
		}
		for _, u := range dropped {
			assert.False(t, r.srv.Subscribed(u), "%s is off the stream", u)
		}
		assert.LessOrEqual(t, r.srv.SubscribeCalls()-listens, 2,
			"the held stream, then one stream for everything that arrived meanwhile")
		for _, u := range kept {
			assert.LessOrEqual(t, r.srv.Reads(u)-reads[u], 1, "%s is read once after the replacements", u)
		}
		r.requireConverged(kept[0], "changed while no stream was open")
	})
}

// (2026-07-28) A key's pass never waits on the listen stream: while the
// listen request that carries them is parked (never answered, so never
// acknowledged), more Subscribes than the controller has workers each
// return within their RequestTimeout, in poll mode saying why, and a key
// the stream does not concern (a Forget of one never subscribed) is worked
// on at once.
func TestParkedListenRequestHoldsNoKeyPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, timeout = 80, 5 * time.Second // more than the controller's 64 workers
		uris := numbered("file:///parked/%02d.md", n)
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: timeout}, uris: uris})
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		defer hold.Release()
		start := time.Now()
		wait := subscribeEach(context.Background(), r.c, uris)
		synctest.Wait()
		require.True(t, arrived(hold), "the listen request is parked")
		forgot := time.Now()
		require.ErrorIs(t, r.c.Forget(context.Background(), faultURI), mcpsync.ErrUnknownURI)
		assert.Zero(t, time.Since(forgot), "a key the stream does not concern waits for nothing")
		subs, errs := wait()
		assert.LessOrEqual(t, time.Since(start), timeout+time.Second, "each waits at most its own timeout and its read")
		requirePolledAfterAFailedSubscribe(t, uris, subs, errs)
	})
}

// requirePolledAfterAFailedSubscribe checks what a Subscribe of each of
// uris returned: no error, and poll mode saying that subscribing failed.
func requirePolledAfterAFailedSubscribe(t *testing.T, uris []string, subs []mcpsync.Subscription, errs []error) {
	t.Helper()
	for i, u := range uris {
		require.NoError(t, errs[i], u)
		assert.Equal(t, ledger.ModePoll, subs[i].Mode, u)
		assert.Contains(t, subs[i].ModeReason, "subscribe failed", u)
	}
}

// noAck is a transport whose server never acknowledges a listen stream.
type noAck struct{ transport.Interface }

func (n noAck) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	n.Interface.SetNotificationHandler(func(m mcp.JSONRPCNotification) {
		if m.Method != mcp.MethodNotificationSubscriptionsAcknowledged {
			h(m)
		}
	})
}

// (2026-07-28) Against a server that never acknowledges a listen stream,
// Subscribes that queue behind one another each still return within
// RequestTimeout, each with its first version and in poll mode saying why.
func TestListenNeverAcknowledged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		uris := []string{"file:///mute/a.md", "file:///mute/b.md", "file:///mute/c.md"}
		for _, u := range uris {
			srv.Set(u, "text/markdown", "v1")
		}
		const timeout = 5 * time.Second
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return noAck{srv.NewInProcessTransport()}, nil
		}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2026-07-28", RequestTimeout: timeout})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		start := time.Now()
		subs, errs := subscribeEach(t.Context(), c, uris)()
		assert.LessOrEqual(t, time.Since(start), 2*timeout, "each waits at most its own timeout and its read")
		requirePolledAfterAFailedSubscribe(t, uris, subs, errs)
		for _, u := range uris {
			_, err := c.Lookup(u)
			assert.NoError(t, err, "%s has its first version", u)
		}
	})
}

// (2026-07-28) Subscribes that arrive within the window of the last
// replacement become one replacement, not one each: the stream sync holds
// the replacement back while they keep arriving, and one stream carries
// them all.
func TestSubscribesWithinOneWindowCauseOneReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		uris := numbered("file:///window/%02d.md", n)
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, CoalesceWindow: time.Second}, uris: uris})
		r.watch(faultURI)
		before := r.listens()
		subs, errs := subscribeEach(t.Context(), r.c, uris)()
		for i, u := range uris {
			require.NoError(t, errs[i], u)
			assert.Equal(t, ledger.ModePush, subs[i].Mode, "%s: %s", u, subs[i].ModeReason)
		}
		assert.Equal(t, 1, r.listens()-before, "one replacement for %d Subscribes: %v", n, r.wire.listenFilters())
	})
}

// subscribeEach makes a Subscribe of each of uris on c, each on a
// goroutine of its own; wait returns what each returned, in the order of
// uris, once all have.
func subscribeEach(ctx context.Context, c *mcpsync.Client, uris []string) (wait func() ([]mcpsync.Subscription, []error)) {
	var wg sync.WaitGroup
	subs := make([]mcpsync.Subscription, len(uris))
	errs := make([]error, len(uris))
	for i, u := range uris {
		wg.Go(func() { subs[i], errs[i] = c.Subscribe(ctx, u) })
	}
	return func() ([]mcpsync.Subscription, []error) {
		wg.Wait()
		return subs, errs
	}
}
