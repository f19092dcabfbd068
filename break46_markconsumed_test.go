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

// b46Wire parks requests the hook chooses (outside any lock) and forwards
// them, once released, with their context's cancellation ignored (a
// listen stream excepted, which ends with the client): the request was on
// its way, and the server answers it.
type b46Wire struct {
	transport.Interface
	n    int
	hook func(conn int, method, uri string) chan struct{}
}

func (w *b46Wire) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if w.hook != nil {
		if ch := w.hook(w.n, req.Method, b42URI(req.Params)); ch != nil {
			<-ch
			if req.Method == string(mcp.MethodSubscriptionsListen) {
				// A stream lives on the client's context, not the
				// caller's, and must end with the client.
				return w.Interface.SendRequest(ctx, req)
			}
			return w.Interface.SendRequest(context.WithoutCancel(ctx), req)
		}
	}
	return w.Interface.SendRequest(ctx, req)
}

type b46Rig struct {
	srv  *mcpsynctest.Server
	c    *mcpsync.Client
	mu   sync.Mutex
	n    int
	hook func(conn int, method, uri string) chan struct{}
}

// parkTwo parks the first two requests of method on the second connection
// (the one a Reconnect opens): each, as it arrives, names its URI on
// arrived1 or arrived2 and waits until h1 or h2 is closed.
func (r *b46Rig) parkTwo(method string) (h1, h2 chan struct{}, arrived1, arrived2 chan string) {
	h1, h2 = make(chan struct{}), make(chan struct{})
	arrived1, arrived2 = make(chan string, 1), make(chan string, 1)
	seen := 0
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = func(conn int, m, u string) chan struct{} {
		if conn != 2 || m != method {
			return nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		seen++
		switch seen {
		case 1:
			arrived1 <- u
			return h1
		case 2:
			arrived2 <- u
			return h2
		}
		return nil
	}
	return h1, h2, arrived1, arrived2
}

func newB46Rig(t *testing.T, version string, uris ...string) *b46Rig {
	r := &b46Rig{srv: mcpsynctest.NewServer(nil)}
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v1")
	}
	opts := mcpsync.ClientOptions{Subject: alice, ProtocolVersion: version, Seed: 1}
	c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n++
		return &b46Wire{Interface: r.srv.NewInProcessTransport(), n: r.n, hook: func(conn int, m, u string) chan struct{} {
			r.mu.Lock()
			h := r.hook
			r.mu.Unlock()
			if h == nil {
				return nil
			}
			return h(conn, m, u)
		}}, nil
	}, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	r.c = c
	return r
}

// x and y are watched. A Reconnect re-subscribes them one by one; the
// first one's request is parked. Meanwhile a second caller Subscribes the
// other one (already watched: had) and takes its key; its request in the
// new session is parked too. The reconnect, let go, finds that key held and
// marks it. The second caller's context ends as its request is answered:
// its Subscribe fails, and its settle, seeing the mark, runs its step again
// with the ended context. The URI is watched (by the first caller); once
// settled it must be open in the current session, or visibly degraded, and
// it must serve current content.
func TestBreak46HadSubscribeCancelledConsumesReconnectMark(t *testing.T) {
	for _, era := range []struct{ name, version, method string }{
		{"legacy", "2025-11-25", string(mcp.MethodResourcesSubscribe)},
		{"modern", "2026-07-28", string(mcp.MethodSubscriptionsListen)},
	} {
		t.Run(era.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const x, y = "file:///b46/mark/x.md", "file:///b46/mark/y.md"
				r := newB46Rig(t, era.version, x, y)
				_, err := r.c.SubscribeAll(t.Context(), []string{x, y})
				require.NoError(t, err)
				quiesce()
				h1, h2, arrived1, arrived2 := r.parkTwo(era.method)
				recDone := make(chan error, 1)
				go func() { recDone <- r.c.Reconnect(context.Background()) }()
				first := <-arrived1
				other := x
				if first == x || (era.name == "modern") {
					other = y
					if first == y {
						other = x
					}
				}
				t.Logf("reconnect's first request parked (%q); second caller subscribes %s", first, other)
				bctx, cancel := context.WithCancel(context.Background())
				bDone := make(chan error, 1)
				go func() {
					_, err := r.c.Subscribe(bctx, other)
					bDone <- err
				}()
				var second string
				select {
				case second = <-arrived2:
				case <-time.After(time.Second):
					t.Logf("the second caller sent nothing in 1s")
				}
				close(h1)
				quiesce()
				recFinished := false
				select {
				case err := <-recDone:
					recFinished = true
					t.Logf("reconnect: %v; second request %q", err, second)
				default:
					t.Logf("reconnect still running")
				}
				cancel()
				close(h2)
				quiesce()
				t.Logf("second caller: %v", <-bDone)
				if !recFinished {
					<-recDone
				}
				quiesce()

				gen := r.c.Health().SessionGeneration
				for _, u := range []string{x, y} {
					s, err := r.c.Engine().Subscription(u)
					require.NoError(t, err)
					e, lerr := r.c.Lookup(u)
					require.NoError(t, lerr)
					t.Logf("just after: %s %s %s %q session %d/%d server %v degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Degraded)
				}
				r.srv.Set(x, "text/markdown", "v2")
				r.srv.Set(y, "text/markdown", "v2")
				time.Sleep(2 * time.Minute)
				quiesce()
				var bad []string
				for _, u := range []string{x, y} {
					s, _ := r.c.Engine().Subscription(u)
					e, lerr := r.c.Lookup(u)
					require.NoError(t, lerr)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Contents[0].Text, e.Degraded)
					t.Logf("2 min after the change: %s", desc)
					if e.Contents[0].Text != "v2" && e.Degraded == "" {
						bad = append(bad, "stale silently 2 min after the change: "+desc)
					}
				}
				for range 10 {
					time.Sleep(time.Minute)
					quiesce()
				}
				gen = r.c.Health().SessionGeneration
				for _, u := range []string{x, y} {
					s, _ := r.c.Engine().Subscription(u)
					e, _ := r.c.Lookup(u)
					desc := fmt.Sprintf("%s: %s %s %q session %d/%d server %v serves %q degraded %q", u, s.State, s.Mode, s.ModeReason, s.SessionGeneration, gen, r.srv.Subscribed(u), e.Contents[0].Text, e.Degraded)
					t.Logf("12 min after: %s", desc)
					if !(s.SessionGeneration == gen && b42Open(s.State)) || e.Contents[0].Text != "v2" {
						bad = append(bad, "not healed: "+desc)
					} else if s.Mode == mcpsync.ModePush && !r.srv.Subscribed(u) {
						bad = append(bad, "push but not notified: "+desc)
					}
				}
				for _, b := range bad {
					t.Error(b)
				}
			})
		})
	}
}
