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
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b42Rig is a client of an mcpsynctest server through the fault kit and a
// b42Wire (outermost) that fails what fail says, on every connection.
type b42Rig struct {
	t    *testing.T
	srv  *mcpsynctest.Server
	c    *mcpsync.Client
	mu   sync.Mutex
	fail func(method, uri string, n int) bool
	kit  *mcpsynctest.Transport
	wire *b42Wire
	all  []*b42Wire
}

func newB42Rig(t *testing.T, version string, opts mcpsync.ClientOptions, uris []string) *b42Rig {
	t.Helper()
	r := &b42Rig{t: t, srv: mcpsynctest.NewServer(nil)}
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v1")
	}
	opts.Subject, opts.ProtocolVersion, opts.Seed = alice, version, 1
	c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.kit = mcpsynctest.NewTransport(r.srv.NewInProcessTransport(), int64(len(r.all)+1))
		r.wire = newB42Wire(r.kit, r.fail)
		r.all = append(r.all, r.wire)
		return r.wire, nil
	}, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	r.c = c
	return r
}

func (r *b42Rig) setFail(f func(method, uri string, n int) bool) {
	r.mu.Lock()
	r.fail = f
	all := r.all
	r.mu.Unlock()
	for _, w := range all {
		w.setFail(f)
	}
}

func (r *b42Rig) requests(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.all {
		n += w.count(method)
	}
	return n
}

func b42Open(s mcpsync.SubscriptionState) bool {
	return s == mcpsync.StateActive || s == mcpsync.StateVersionAccepted || s == mcpsync.StateTombstonePending
}

// b42Check checks, after things settled, every URI of uris: one that must
// be watched (mustOpen) is open in the current session, in push mode with
// the server notifying it, or polling with a reason, and serves the
// server's current content; one that must not (mustClosed) is not open;
// one that is not open is not subscribed on the server.
func (r *b42Rig) check(uris []string, mustOpen, mustClosed map[string]bool) {
	t := r.t
	t.Helper()
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v2")
	}
	for range 7 {
		time.Sleep(time.Minute)
		quiesce()
	}
	gen := r.c.Health().SessionGeneration
	var bad []string
	opened := 0
	for _, u := range uris {
		sub, err := r.c.Engine().Subscription(u)
		open := err == nil && sub.SessionGeneration == gen && b42Open(sub.State)
		e, lerr := r.c.Lookup(u)
		text := ""
		if lerr == nil && len(e.Contents) > 0 {
			text = e.Contents[0].Text
		}
		desc := fmt.Sprintf("%s: %s %s (%q) session %d/%d, serves %q (err %v) degraded %q, server subscribed %v",
			u, sub.State, sub.Mode, sub.ModeReason, sub.SessionGeneration, gen, text, lerr, e.Degraded, r.srv.Subscribed(u))
		switch {
		case mustOpen[u] && !open:
			bad = append(bad, "watched but not open: "+desc)
		case mustClosed[u] && open:
			bad = append(bad, "unsubscribed but open: "+desc)
		case open && text != "v2":
			bad = append(bad, "open but stale: "+desc)
		case open && sub.Mode == mcpsync.ModePush && !r.srv.Subscribed(u):
			bad = append(bad, "push but not notified: "+desc)
		case open && sub.Mode == mcpsync.ModePoll && sub.ModeReason == "":
			bad = append(bad, "polled without a reason: "+desc)
		case !open && r.srv.Subscribed(u):
			bad = append(bad, "not open but notified: "+desc)
		}
		if open {
			opened++
		}
	}
	t.Logf("%d of %d open after settling", opened, len(uris))
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
	}
	require.Empty(t, bad)
}

// SubscribeAll of 200 URIs while the server fails every 7th subscribe,
// listen and unsubscribe request; then half of them are Unsubscribed
// concurrently, a third of those with a context that ends a moment in, and
// a Reconnect comes in the middle. Faults then stop. Once settled, every
// URI is where its caller left it, and the server agrees.
func TestBreak42ScaleSubscribeAllUnsubscribeHalfWithFaults(t *testing.T) {
	for _, w := range eras {
		for _, reconnect := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reconnect=%v", w.name, reconnect), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n = 200
					uris := make([]string, n)
					for i := range uris {
						uris[i] = fmt.Sprintf("file:///b42/scale/%03d.md", i)
					}
					r := newB42Rig(t, w.version, mcpsync.ClientOptions{}, uris)
					faulty := func(method, _ string, k int) bool {
						switch method {
						case string(mcp.MethodResourcesSubscribe), string(mcp.MethodResourcesUnsubscribe), string(mcp.MethodSubscriptionsListen):
							return k%7 == 0
						}
						return false
					}
					r.setFail(faulty)
					_, err := r.c.SubscribeAll(t.Context(), uris)
					t.Logf("SubscribeAll: %v", err != nil)
					quiesce()

					mustOpen, mustClosed := map[string]bool{}, map[string]bool{}
					var mu sync.Mutex
					unsubErrs := map[string]error{}
					var wg sync.WaitGroup
					for i, u := range uris {
						if i%2 == 0 {
							mustOpen[u] = true
							continue
						}
						ctx, cancel := context.WithCancel(t.Context())
						if i%3 == 0 {
							time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
						}
						wg.Go(func() {
							defer cancel()
							sub, err := r.c.Unsubscribe(ctx, u)
							mu.Lock()
							if err == nil {
								mustClosed[u] = true
							} else {
								unsubErrs[u] = fmt.Errorf("%w (returned %s)", err, sub.State)
							}
							mu.Unlock()
						})
					}
					if reconnect {
						wg.Go(func() {
							time.Sleep(2 * time.Millisecond)
							_ = r.c.Reconnect(t.Context())
						})
					}
					wg.Wait()
					t.Logf("%d Unsubscribes returned nil", len(mustClosed))
					quiesce()
					time.Sleep(10 * time.Minute)
					quiesce()
					r.setFail(nil)
					for range 30 {
						time.Sleep(time.Minute)
						quiesce()
					}
					defer func() {
						if t.Failed() {
							for u, err := range unsubErrs {
								t.Logf("Unsubscribe(%s): %v", u, err)
							}
						}
					}()
					r.check(uris, mustOpen, mustClosed)
				})
			})
		}
	}
}
