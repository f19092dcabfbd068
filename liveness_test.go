package mcpsync_test

// Liveness of the session layer: each test drives a Client over the
// mcpsynctest server into an interleaving of calls and faults, then lets
// fake time pass with the server quiet, and checks that the subscription
// reached the server's current content (or says why not). Revalidation is
// set far beyond the test wherever only the read under test can bring the
// new content, so that a periodic read cannot hide a lost one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// otherURI is a second resource of the liveness tests.
const otherURI = "file:///docs/other.md"

// A read queued (not yet sent) for the old session or the old
// subscription generation must not stand in for the read the new
// generation asks for. The pulse lands first, its read waits out the
// coalescing window, and the new generation opens inside that window.
func TestLivenessQueueKeyedByURIAlone(t *testing.T) {
	eachEraAnd(t, []string{"reconnect", "unsubscribe then subscribe"}, nil, func(t *testing.T, w wiring, how string) {
		r := newRig(t, w, &mcpsync.ClientOptions{RevalidateEvery: time.Hour, CoalesceWindow: time.Second})
		r.subscribeSettled(faultURI)
		r.srv.Set(faultURI, "text/markdown", "v2") // its read waits out the window
		synctest.Wait()
		if how == "reconnect" {
			require.NoError(t, r.c.Reconnect(t.Context()))
		} else {
			_, err := r.c.Unsubscribe(t.Context(), faultURI)
			require.NoError(t, err)
			r.watch(faultURI)
		}
		time.Sleep(10 * time.Second) // an hour short of revalidation
		quiesce()
		r.requireConverged(faultURI, "queue keyed by URI alone")
	})
}

// A Subscribe whose server subscribe is in flight while the
// client reconnects must not end in the dead session. The request is held
// before the server sees it until the reconnect is done.
func TestLivenessSubscribeRacingReconnect(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := newRig(t, w, &mcpsync.ClientOptions{RevalidateEvery: 2 * time.Second, PollEvery: 2 * time.Second})
		hold := r.faults().HoldNextRequest(r.subscribeMethod(), "")
		done := goCall(context.Background(), r.c.Subscribe, faultURI)
		synctest.Wait()
		require.True(t, arrived(hold), "the subscribe request is held")
		require.NoError(t, r.c.Reconnect(t.Context()))
		hold.Release()
		res := <-done
		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(30 * time.Second) // many revalidation intervals
		quiesce()
		if res.err != nil {
			t.Logf("Subscribe failed visibly: %v", res.err)
			return
		}
		r.requireConverged(faultURI, fmt.Sprintf("Subscribe racing Reconnect (Subscribe returned session %d, %s)", res.val.SessionGeneration, res.val.State))
	})
}

// An Unsubscribe that completes while a Reconnect is
// re-establishing subscriptions stays done: the URI is not watched again.
// The first resubscribe of the reconnect is held; the other URI is
// unsubscribed meanwhile.
func TestLivenessUnsubscribeDuringReconnect(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		r := buildRig(t, w, rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: 2 * time.Second}, uris: []string{otherURI}})
		r.subscribeSettled(faultURI)
		r.subscribeSettled(otherURI)
		var hold *mcpsynctest.Hold
		r.setOnDial(func(_ int, kit *mcpsynctest.Transport) { hold = kit.HoldNextRequest(r.subscribeMethod(), "") })
		reconnected := make(chan error, 1)
		go func() { reconnected <- r.c.Reconnect(context.Background()) }()
		synctest.Wait()
		require.True(t, arrived(hold), "the first resubscribe is held")

		// The URI the reconnect has not reached yet is the one still
		// in the old session.
		current := r.c.Engine().SessionGeneration()
		gone := faultURI
		if sub, err := r.c.Engine().Subscription(faultURI); err == nil && sub.SessionGeneration == current {
			gone = otherURI
		}
		closed, err := r.c.Unsubscribe(t.Context(), gone)
		require.NoError(t, err)
		require.Contains(t, []ledger.SubscriptionState{ledger.StateClosed, ledger.StateUnsubscribeUnknown}, closed.State)
		hold.Release()
		t.Logf("Reconnect returned %v", <-reconnected)
		time.Sleep(10 * time.Second)
		quiesce()

		sub, err := r.c.Engine().Subscription(gone)
		require.NoError(t, err)
		if sub.SubscriptionGeneration != closed.SubscriptionGeneration || openState(sub.State) || r.srv.Subscribed(gone) {
			t.Fatalf("unsubscribe during reconnect undone: Unsubscribe returned %s generation %d; now %s",
				closed.State, closed.SubscriptionGeneration, r.describe(gone))
		}
	})
}

// (2026-07-28) A change to an already subscribed URI while the
// listen stream is being replaced must still reach the client. The new
// stream's request is held before the server sees it, so the old stream is
// gone and the new one not yet there when the resource changes; once the
// new stream is acknowledged the URI must converge without waiting for
// revalidation, an hour away.
func TestLivenessRelistenGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{otherURI}})
		r.subscribeSettled(faultURI)
		hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
		subscribed := goCall(context.Background(), r.c.Subscribe, otherURI)
		synctest.Wait()
		require.True(t, arrived(hold), "the new stream is held")
		t.Logf("while the new stream is held, the server has %s subscribed: %v", faultURI, r.srv.Subscribed(faultURI))
		r.srv.Set(faultURI, "text/markdown", "v2")
		hold.Release()
		require.NoError(t, (<-subscribed).err)
		time.Sleep(10 * time.Second)
		quiesce()
		r.requireConverged(faultURI, "relisten gap")
	})
}

// (2026-07-28) Subscribe calls that run at once each get the
// acknowledgement of their own stream and end in push mode, and an
// Unsubscribe takes its URI off the server's subscriptions.
func TestLivenessConcurrentSubscribeModern(t *testing.T) {
	uris := []string{"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md", "file:///docs/d.md"}
	synctest.Test(t, func(t *testing.T) {
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: uris})
		modes := make([]ledger.SubscriptionMode, len(uris))
		errs := make([]error, len(uris))
		var wg sync.WaitGroup
		for i, u := range uris {
			wg.Go(func() {
				sub, err := r.c.Subscribe(context.Background(), u)
				modes[i], errs[i] = sub.Mode, err
			})
		}
		wg.Wait()
		quiesce()
		for i, u := range uris {
			require.NoError(t, errs[i], u)
		}
		assert.Equal(t, slices.Repeat([]ledger.SubscriptionMode{ledger.ModePush}, len(uris)), modes,
			"every concurrent Subscribe ends in push mode")
		for _, u := range uris {
			_, err := r.c.Unsubscribe(t.Context(), u)
			require.NoError(t, err)
			// The server forgets a cancelled stream's URIs once it has seen
			// the cancellation.
			quiesce()
			assert.False(t, r.srv.Subscribed(u), "unsubscribed but still subscribed on the server: %s", r.describe(u))
		}
	})
}

// A read triggered by a notification that fails (an error
// answer, a broken transport, a timeout) is retried with backoff while the
// subscription is open; revalidation is an hour away, so only a retry can
// bring the new text within the 30 s the test waits.
func TestLivenessFailedReadRetried(t *testing.T) {
	faults := map[string]func(kit *mcpsynctest.Transport){
		"error answer": func(kit *mcpsynctest.Transport) {
			kit.FailNext(string(mcp.MethodResourcesRead), faultURI, -32603, "internal error")
		},
		"broken transport": func(kit *mcpsynctest.Transport) {
			kit.BreakNext(string(mcp.MethodResourcesRead), faultURI, errors.New("connection reset"))
		},
		"timeout": func(kit *mcpsynctest.Transport) { kit.HoldNext(string(mcp.MethodResourcesRead), faultURI) },
	}
	eachEraAnd(t, slices.Sorted(maps.Keys(faults)), nil, func(t *testing.T, w wiring, name string) {
		fault := faults[name]
		r := newRig(t, w, &mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second})
		r.subscribeSettled(faultURI)
		fault(r.faults())
		r.srv.Set(faultURI, "text/markdown", "v2")
		time.Sleep(5 * time.Second) // the read has failed by now
		quiesce()
		r.faults().Heal() // the server recovers
		time.Sleep(30 * time.Second)
		quiesce()
		r.requireConverged(faultURI, "failed read not retried ("+name+")")
	})
}

// A list_changed that arrives while pass B is being listed makes the scan
// start over. The server here is scripted over a pipe, so the order is the
// wire's: the notification is written before the last page of pass B, and
// the client's read loop hands it over before that page's response. The
// client used to count list_changed later, on its notification pump, so a
// scan could read the count before the pump caught up and pass B looked
// clean, the more likely the busier the pump; the resource created during
// pass B was then missing.
func TestLivenessListChangedDuringPassB(t *testing.T) {
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			const late = "file:///docs/late.md"
			listed := []string{"file:///docs/1.md", "file:///docs/2.md"}
			walks := 0
			serve := func(req map[string]any, send func(any)) {
				switch req["method"] {
				case "initialize":
					send(map[string]any{"jsonrpc": "2.0", "id": req["id"], "result": map[string]any{
						"protocolVersion": "2025-11-25", "serverInfo": map[string]any{"name": "scripted", "version": "1"},
						"capabilities": map[string]any{"resources": map[string]any{"listChanged": true}},
					}})
				case "resources/list":
					params, _ := req["params"].(map[string]any)
					cursor, _ := params["cursor"].(string)
					page := map[string]any{}
					if cursor == "" {
						walks++
						page["resources"] = []any{map[string]any{"uri": listed[0], "name": "1"}}
						page["nextCursor"] = "p2"
					} else {
						page["resources"] = []any{map[string]any{"uri": listed[1], "name": "2"}}
						if walks == 2 && len(listed) == 2 {
							// Created during pass B, after the page that would
							// list it: only list_changed says so.
							listed = append(listed, late)
							// A burst of updates first, as a busy server sends:
							// the client's pump has a backlog to work through.
							for i := range 5000 {
								send(map[string]any{"jsonrpc": "2.0", "method": "notifications/resources/updated",
									"params": map[string]any{"uri": fmt.Sprintf("file:///docs/busy/%d.md", i)}})
							}
							send(map[string]any{"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
						}
						if len(listed) == 3 && walks > 2 {
							page["resources"] = []any{map[string]any{"uri": listed[1], "name": "2"}, map[string]any{"uri": late, "name": "late"}}
						}
					}
					send(map[string]any{"jsonrpc": "2.0", "id": req["id"], "result": page})
				default:
					if req["id"] != nil {
						send(map[string]any{"jsonrpc": "2.0", "id": req["id"], "result": map[string]any{}})
					}
				}
			}
			c, err := mcpsync.Connect(t.Context(), mcpsync.StreamDialer(scriptedServer(t, serve)), &mcpsync.ClientOptions{
				Subject: alice, ProtocolVersion: "2025-11-25", PingEvery: -1,
			})
			require.NoError(t, err)
			defer c.Close()
			cat, err := c.Scan(t.Context(), mcpsync.KindResources)
			require.NoError(t, err)
			var uris []string
			for d := range cat.Items() {
				uris = append(uris, d.URI)
			}
			var passes []string
			for _, sc := range cat.Scans {
				passes = append(passes, fmt.Sprintf("attempt %d pass %s %s, %d items, %d list_changed seen", sc.Attempt, sc.Pass, sc.Outcome, sc.ItemCount, sc.ListChangedSeen))
			}
			require.Contains(t, uris, late, "list_changed during pass B did not make the scan retry: %s after %q", cat.Status, passes)
		})
	}
}

// scriptedServer returns what StreamDialer opens: a pipe to a server that
// answers each JSON-RPC line with serve, whose send writes one line.
func scriptedServer(t *testing.T, serve func(req map[string]any, send func(any))) func(context.Context) (io.ReadCloser, io.WriteCloser, error) {
	return func(context.Context) (io.ReadCloser, io.WriteCloser, error) {
		toClient, fromServer := io.Pipe()
		toServer, fromClient := io.Pipe()
		go func() {
			defer fromServer.Close()
			enc := json.NewEncoder(fromServer)
			dec := json.NewDecoder(toServer)
			for {
				var req map[string]any
				if err := dec.Decode(&req); err != nil {
					return
				}
				serve(req, func(msg any) {
					if err := enc.Encode(msg); err != nil {
						t.Logf("scripted server: %v", err)
					}
				})
			}
		}()
		return toClient, fromClient, nil
	}
}

// Close is bounded: it returns even when a server handler ignores its
// context (in-process, mcp-go runs the handler on the read's goroutine), and
// a Subscribe racing Close neither panics nor races the client's wait group.
func TestLivenessCloseBounded(t *testing.T) {
	t.Run("handler ignores its context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const blocked = "file:///docs/blocked.md"
			srv := mcpsynctest.NewServer(nil)
			unblock := make(chan struct{})
			srv.MCPServer().AddResource(mcp.NewResource(blocked, "blocked"), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				<-unblock // ignores its context
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: blocked, Text: "late"}}, nil
			})
			r, err := connectRig(t.Context(), eras[0], rigConfig{srv: srv, opts: mcpsync.ClientOptions{RequestTimeout: time.Second}})
			require.NoError(t, err)
			_, err = r.c.Subscribe(t.Context(), blocked)
			require.NoError(t, err)
			quiesce() // the first read is in the handler
			closed := make(chan error, 1)
			go func() { closed <- r.c.Close() }()
			select {
			case <-closed:
			case <-time.After(time.Minute):
				close(unblock) // let the handler go, so the bubble can end
				<-closed
				t.Fatal("Close did not return within a minute of fake time while a server handler ignored its context (RequestTimeout 1 s)")
			}
			close(unblock)
		})
	})
	t.Run("subscribe racing close", func(t *testing.T) {
		for round := range 20 {
			synctest.Test(t, func(t *testing.T) {
				r, err := connectRig(t.Context(), eras[0], rigConfig{kitSeed: int64(round)})
				require.NoError(t, err)
				hold := r.faults().HoldNextRequest(string(mcp.MethodResourcesSubscribe), "")
				subscribed := goCall(context.Background(), r.c.Subscribe, faultURI)
				synctest.Wait()
				require.True(t, arrived(hold))
				// The subscribe resumes while Close waits for the client's
				// goroutines: it must not start one after that wait began.
				closed := make(chan error, 1)
				go func() { closed <- r.c.Close() }()
				if round%2 == 0 {
					synctest.Wait()
				}
				hold.Release()
				require.NoError(t, <-closed)
				err = (<-subscribed).err
				synctest.Wait()
				if round%2 == 0 {
					// Close had begun (and marked the client closed) before
					// the subscribe resumed; in odd rounds either may finish
					// first, and only the wait group is at stake.
					assert.ErrorIs(t, err, mcpsync.ErrClientClosed, "a Subscribe that resumes after Close began reports the client closed")
				}
			})
		}
	})
}

// Client.Read returns at the sooner of its caller's deadline and
// RequestTimeout, whichever of them comes first, while the server holds
// its answer.
func TestReadReturnsAtTheSoonerOfItsDeadlineAndRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name           string
		deadline, want time.Duration
	}{
		{"RequestTimeout first", time.Hour, 5 * time.Second},
		{"the caller's deadline first", 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, eras[0], &mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second})
				r.subscribeSettled(faultURI)
				hold := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
				defer hold.Release()
				ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
				defer cancel()
				start := time.Now()
				_, err := r.c.Read(ctx, faultURI)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, tc.want, time.Since(start))
			})
		})
	}
}

// Client.Read at the read cap: with MaxReadsInFlight 1, a notification that
// lands while a caller's Read is in flight is kept as one dirty bit, and
// the Read's completion makes it a follow-up read. That follow-up is sent,
// so the URI is not left "processing, unsent" for ever swallowing every
// later notification and revalidation: the URI converges to the server's
// text after two changes, both notified.
func TestReadAtTheCapSendsItsFollowUp(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{MaxReadsInFlight: 1})
		require.NoError(t, err)
		r := newRig(t, w, &mcpsync.ClientOptions{Engine: e, RevalidateEvery: time.Minute})
		r.subscribeSettled(faultURI)

		hold := r.faults().HoldNext(string(mcp.MethodResourcesRead), faultURI)
		read := make(chan mcpsync.Outcome, 1)
		go func() {
			out, _ := r.c.Read(context.Background(), faultURI)
			read <- out
		}()
		synctest.Wait()
		require.True(t, arrived(hold), "the caller's read is in flight")
		r.srv.Set(faultURI, "text/markdown", "v2") // its pulse finds the URI at the cap
		quiesce()
		hold.Release()
		out := <-read
		t.Logf("Client.Read returned accepted=%v followUp=%+v", out.Accepted, out.FollowUp)

		time.Sleep(5 * time.Second)
		r.srv.Set(faultURI, "text/markdown", "v3") // a later pulse, nothing in flight
		time.Sleep(5 * time.Minute)                // five revalidation intervals
		quiesce()
		r.requireConverged(faultURI, "pulse at the cap behind Client.Read")
	})
}
