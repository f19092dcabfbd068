package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
)

// Passing: a server that refuses its first k listen requests while a
// SubscribeAll of 50 URIs runs, then accepts every one: within two
// minutes every URI is pushed, at a cost of about two listen requests per
// refusal.
func TestBreak41PassingTransientRefusalInSubscribeAll(t *testing.T) {
	for _, k := range []int{1, 2, 3, 10} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var uris []string
				for i := range 50 {
					uris = append(uris, fmt.Sprintf("file:///b41/tsa/%02d.md", i))
				}
				r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
					w.refuse = func(req wireRequest) bool { return req.method == string(mcp.MethodSubscriptionsListen) && req.n <= k }
				}})
				_, err := r.c.SubscribeAll(t.Context(), uris)
				require.NoError(t, err)
				time.Sleep(2 * time.Minute)
				quiesce()
				push, lines := r.pushed(uris)
				require.Equal(t, len(uris), push, "%v", lines)
				require.LessOrEqual(t, r.wire.listens(), 2*k+2)
				time.Sleep(20 * time.Minute)
				quiesce()
				require.LessOrEqual(t, r.wire.listens(), 2*k+2)
			})
		})
	}
}

// Passing: 20 URIs pushed, then the server refuses every stream and ends
// the open one: each URI polls (one listen request each), the retries stay
// near one per URI per revalidation period, and once the server accepts
// streams again every URI is pushed within ten minutes.
func TestBreak41PassingRefuseAllAfterPushThenHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var uris []string
		for i := range 20 {
			uris = append(uris, fmt.Sprintf("file:///b41/rap/%02d.md", i))
		}
		r := buildRig(t, eras[1], rigConfig{uris: uris})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		require.NoError(t, err)
		quiesce()
		before := r.wire.listens()
		r.wire.set(func(w *faultWire) { w.refuse = listensWhere(anyURIs) })
		r.faults().EndListenStreams()
		time.Sleep(10 * time.Second)
		quiesce()
		// About one each; how the reopens interleave with the refused
		// streams (a reopen may find another's stream still pending)
		// can add a few, never one per URI more.
		require.LessOrEqual(t, r.wire.listens()-before, 2*len(uris))
		time.Sleep(time.Hour)
		quiesce()
		push, _ := r.pushed(uris)
		require.Zero(t, push)
		require.LessOrEqual(t, r.wire.listens()-before, 12*2*len(uris))
		r.wire.set(func(w *faultWire) { w.refuse = nil })
		time.Sleep(10 * time.Minute)
		quiesce()
		push, lines := r.pushed(uris)
		require.Equal(t, len(uris), push, "%v", lines)
	})
}
