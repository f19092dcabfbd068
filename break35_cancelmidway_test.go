package mcpsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"

	"github.com/mcpsync/mcpsync"
)

// SubscribeAll returns "the errors of those that failed, joined, each
// naming its URI", and a URI it reports no error for is subscribed as
// Subscribe promises: its first read answered (a version), on a server
// that can subscribe, in push mode.
//
// The caller's context is cancelled midway, while the first listen
// stream, which carries every URI, waits for its acknowledgement and the
// other Subscribes wait for their turn to replace it. Every URI in
// flight then comes back with a nil error, although none was subscribed
// with the server and none was read: Client.subscribe turns the context's
// end in Client.serverSubscribe into ModePoll with the reason "subscribe
// failed: context canceled" (a poll subscription on a server that can
// push, for the rest of the session), and Client.readNow swallows the
// read that could not be sent (it is retried in the background), so
// Subscribe, and SubscribeAll after it, return no error for them. A caller
// that cancels sees no URI it should try again, and gets back
// subscriptions that silently poll.
func TestBreak35SubscribeAllCancelledMidwayReportsSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		uris := make([]string, 8)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b35/cancel/%d.md", i)
			r.srv.Set(uris[i], "text/markdown", "v1")
		}
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		ctx, cancel := context.WithCancel(t.Context())
		type result struct {
			subs []mcpsync.Subscription
			err  error
		}
		done := make(chan result, 1)
		go func() {
			subs, err := r.c.SubscribeAll(ctx, uris)
			done <- result{subs, err}
		}()
		synctest.Wait()
		select {
		case <-hold.Arrived():
		default:
			t.Fatal("the first listen stream was never sent")
		}
		cancel()
		res := <-done
		defer func() {
			hold.Release()
			quiesce()
		}()

		msg := ""
		if res.err != nil {
			msg = res.err.Error()
		}
		for i, uri := range uris {
			if strings.Contains(msg, uri) {
				continue // said why
			}
			sub := res.subs[i]
			entry, err := r.c.Lookup(uri)
			assert.True(t, sub.Mode == mcpsync.ModePush && err == nil && len(entry.Contents) > 0,
				"%s: no error, yet subscription %s in %s mode (%q) with no first version at return", uri, sub.State, sub.Mode, sub.ModeReason)
		}
	})
}
