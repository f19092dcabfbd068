package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Passing coverage (2026-07-28 servers that misbehave on
// subscriptions/listen); everything here passes on the current code.

// A server that refuses every listen request with a JSON-RPC error: each
// URI polls, saying why, and serves current content within its poll
// bound; the retries (Client.reestablish, whose backoff no acknowledgement
// resets here) stay bounded per revalidation period.
func TestBreak40PassingRefuseEveryListen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		uris := []string{"file:///b40/refuse/a.md", "file:///b40/refuse/b.md", "file:///b40/refuse/c.md"}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.refuse = listensWhere(anyURIs)
		}})
		for _, u := range uris {
			sub, err := r.c.Subscribe(t.Context(), u)
			require.NoError(t, err)
			require.Equal(t, mcpsync.ModePoll, sub.Mode)
			require.Contains(t, sub.ModeReason, "subscribe failed")
		}
		time.Sleep(30 * time.Minute) // the backoff reaches RevalidateEvery
		quiesce()
		before := r.wire.listens()
		for i := range 12 { // an hour
			time.Sleep(5 * time.Minute)
			want := fmt.Sprintf("v%d", i)
			for _, u := range uris {
				r.srv.Set(u, "text/markdown", want)
			}
			time.Sleep(40 * time.Second) // PollEvery 30 s + 20% jitter
			quiesce()
			for _, u := range uris {
				got, desc := r.state(u)
				require.Equal(t, want, got, "%s: %s", u, desc)
			}
		}
		listens := r.wire.listens() - before
		t.Logf("%d listen requests in 12 revalidation periods", listens)
		require.LessOrEqual(t, listens, 12*2*len(uris))
	})
}

// Notifications of a replaced stream (the old stream id), and of a URI the
// stream does not carry and nobody watches (the current id), make the
// client read nothing and the engine keep nothing.
func TestBreak40PassingForeignNotificationsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, b, x = "file:///b40/foreign/a.md", "file:///b40/foreign/b.md", "file:///b40/foreign/x.md"
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{a, b, x}})
		_, err := r.c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		_, err = r.c.Subscribe(t.Context(), b) // replaces a's first stream
		require.NoError(t, err)
		time.Sleep(time.Minute)
		quiesce()
		ids := r.wire.listenIDs()
		require.Len(t, ids, 2)
		old, cur := ids[0], ids[1]
		r.wire.set(func(w *faultWire) {
			w.rewrite = func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification {
				if m.Method != mcp.MethodNotificationResourceUpdated {
					return []mcp.JSONRPCNotification{m}
				}
				switch m.Params.AdditionalFields["uri"] {
				case a: // only on the replaced stream
					return []mcp.JSONRPCNotification{withStreamID(m, old)}
				case b: // and, on the current one, x, which nobody watches
					xm := m
					xm.Params.AdditionalFields = map[string]any{"uri": x}
					return []mcp.JSONRPCNotification{m, withStreamID(xm, cur)}
				}
				return nil
			}
		})
		readsA, readsX := r.srv.Reads(a), r.srv.Reads(x)
		r.srv.Set(a, "text/markdown", "v2")
		r.srv.Set(b, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()
		require.Equal(t, readsA, r.srv.Reads(a), "a notification of a replaced stream was read")
		require.Equal(t, readsX, r.srv.Reads(x), "a notification of a URI nobody watches was read")
		_, err = r.c.Lookup(x)
		require.Error(t, err, "the engine keeps a URI nobody watches")
		got, desc := r.state(b)
		require.Equal(t, "v2", got, desc)
	})
}

// Acknowledgements that name another stream (a wrong id), or that never
// come before RequestTimeout: the Subscribe waiting for one returns in poll
// mode saying why, and the URI already pushed keeps being pushed.
func TestBreak40PassingWrongOrSlowAck(t *testing.T) {
	for _, fault := range []string{"wrong-id", "slow"} {
		t.Run(fault, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const a, b = "file:///b40/ack/a.md", "file:///b40/ack/b.md"
				r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour, RequestTimeout: 5 * time.Second}, uris: []string{a, b}})
				sa, err := r.c.Subscribe(t.Context(), a)
				require.NoError(t, err)
				require.Equal(t, mcpsync.ModePush, sa.Mode)
				r.wire.set(func(w *faultWire) {
					switch fault {
					case "wrong-id":
						w.rewrite = func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification {
							if m.Method == mcp.MethodNotificationSubscriptionsAcknowledged {
								m = withStreamID(m, "9999")
							}
							return []mcp.JSONRPCNotification{m}
						}
					case "slow":
						w.ackDelay = time.Minute
					}
				})
				start := time.Now()
				sb, err := r.c.Subscribe(t.Context(), b)
				require.NoError(t, err)
				require.LessOrEqual(t, time.Since(start), 10*time.Second)
				require.Equal(t, mcpsync.ModePoll, sb.Mode)
				require.Contains(t, sb.ModeReason, "subscribe failed")
				for i := range 5 {
					time.Sleep(2 * time.Minute)
					want := fmt.Sprintf("v%d", i+2)
					r.srv.Set(a, "text/markdown", want)
					r.srv.Set(b, "text/markdown", want)
					time.Sleep(40 * time.Second)
					quiesce()
					for _, u := range []string{a, b} {
						got, desc := r.state(u)
						require.Equal(t, want, got, "%s: %s", u, desc)
					}
				}
			})
		})
	}
}
