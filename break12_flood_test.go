package mcpsync_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A server over MaxNotificationsPerSecond has the rest of that second
// dropped, and a resources/updated for a subscribed URI is dropped with it:
// no dirty bit survives, no read follows when the rate falls, and Lookup
// says nothing (Degraded is empty). The copy stays on the old text until the
// next revalidation (RevalidateEvery, 5 min by default): silently stale,
// against DESIGN.md "a pulse is never dropped (one dirty bit survives any
// cap)". Here the flood is ordinary log notifications, so even an honest but
// chatty server loses a resource change this way.
func TestBreak12FloodDropsSubscribedPulseSilently(t *testing.T) {
	var text atomic.Value
	text.Store("v1")
	var peer atomic.Pointer[b12Peer]
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		peer.Store(p)
		p.result(req.ID, fmt.Sprintf(`{"contents":[{"uri":%q,"text":%q}]}`, b12URI, text.Load()))
	})
	faults := make(chan error, 16)
	outcomes := make(chan mcpsync.Outcome, 64)
	lim := mcpsync.Limits{MaxNotificationsPerSecond: 100}
	c := b12Connect(t, dial, mcpsync.ClientOptions{
		Limits: &lim, RevalidateEvery: time.Hour,
		OnFault: func(err error) {
			select {
			case faults <- err:
			default:
			}
		},
		OnOutcome: func(o mcpsync.Outcome) {
			select {
			case outcomes <- o:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	_, err = c.Read(ctx, b12URI)
	require.NoError(t, err)
	entry, err := c.Lookup(b12URI)
	require.NoError(t, err)
	require.Equal(t, "v1", entry.Contents[0].Text)
	for len(outcomes) > 0 {
		<-outcomes
	}

	// The resource changes; the server logs a burst and then says so.
	text.Store("v2")
	var burst strings.Builder
	for i := range 2 * lim.MaxNotificationsPerSecond {
		fmt.Fprintf(&burst, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"line %d"}}`+"\n", i)
	}
	fmt.Fprintf(&burst, `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":%q}}`+"\n", b12URI)
	peer.Load().write(burst.String())

	select {
	case err := <-faults:
		require.ErrorIs(t, err, mcpsync.ErrSessionDegraded)
	case <-ctx.Done():
		require.FailNow(t, "no DegradedError")
	}

	// Either the copy reaches v2 once the rate falls (well within 3 s, three
	// windows of the rate), or Lookup says it is not being kept fresh.
	deadline := time.NewTimer(3 * time.Second)
	defer deadline.Stop()
	for {
		entry, err := c.Lookup(b12URI)
		require.NoError(t, err)
		if entry.Contents[0].Text == "v2" || entry.Degraded != "" {
			return
		}
		select {
		case <-outcomes:
		case <-deadline.C:
			require.Failf(t, "silently stale", "after the flood the copy is still %q with Degraded=%q and staleness bound %v; the resources/updated was dropped",
				entry.Contents[0].Text, entry.Degraded, entry.StalenessBound)
			return
		}
	}
}
