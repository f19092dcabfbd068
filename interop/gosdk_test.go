package interop

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// gosdkEnv makes the test binary the helper process that serves the
// official Go SDK server over stdio (see TestMain).
const gosdkEnv = "MCPSYNC_INTEROP_GOSDK"

const gosdkDoc = "file:///gosdk/handbook.md"

// runGoSDKServer serves one resource whose body a tool sets; the tool
// notifies subscribers, as a server whose documents change would. An empty
// body makes the resource missing. It returns the process exit code.
func runGoSDKServer() int {
	var mu sync.Mutex // protects body
	body := "v1"
	srv := sdk.NewServer(&sdk.Implementation{Name: "go-sdk-stdio", Version: "1.0.0"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	srv.AddResource(&sdk.Resource{URI: gosdkDoc, Name: "handbook", MIMEType: "text/markdown"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if body == "" {
				return nil, sdk.ResourceNotFoundError(req.Params.URI)
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: gosdkDoc, MIMEType: "text/markdown", Text: body}}}, nil
		})
	type setArgs struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "set", Description: "Set the handbook's body and notify subscribers."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in setArgs) (*sdk.CallToolResult, any, error) {
			mu.Lock()
			body = in.Text
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil,
				srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: gosdkDoc})
		})
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// gosdkServer starts this test binary as the Go SDK server's process.
func gosdkServer() *stdioServer {
	return &stdioServer{command: os.Args[0], env: []string{gosdkEnv + "=1"}, args: []string{"-test.run=^$"}}
}

// The official Go SDK over stdio, in both eras: go-sdk v1.8.0 answers
// server/discover, so without a pin mcp-go negotiates 2026-07-28 and
// subscribes with subscriptions/listen; a legacy pin uses initialize and
// resources/subscribe. In each, a notification triggers a fenced read of the
// new body, and -32602 (go-sdk's not-found on every revision) makes the
// subscription TOMBSTONE_PENDING.
func TestGoSDKStdio(t *testing.T) {
	for _, tc := range []struct{ pin, want string }{
		{"", "2026-07-28"},
		{"2026-07-28", "2026-07-28"},
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
	} {
		t.Run("pin="+tc.pin, func(t *testing.T) {
			t.Parallel()
			s := gosdkServer()
			c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{ProtocolVersion: tc.pin})
			caps := c.Capabilities()
			assert.Equal(t, tc.want, caps.ProtocolVersion)
			assert.Equal(t, "go-sdk-stdio", caps.Server.Name)
			assert.True(t, caps.Subscribe)

			sub, err := c.Subscribe(t.Context(), gosdkDoc)
			require.NoError(t, err)
			assert.Equal(t, ledger.ModePush, sub.Mode)
			first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))

			s.callTool(t, "set", map[string]any{"text": "v2"})
			updated := await(t, outcomes, "of v2", decided(mcpsync.DecisionAccepted, ledger.TriggerNotification))
			assert.Equal(t, first.Version.Version.Digest, updated.Version.PreviousDigest)
			entry, err := c.Lookup(gosdkDoc)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text)

			s.callTool(t, "set", map[string]any{"text": ""})
			await(t, outcomes, "of the deletion", decided(mcpsync.DecisionTombstonePending, ledger.TriggerNotification))
			_, err = c.Lookup(gosdkDoc)
			assert.ErrorIs(t, err, mcpsync.ErrTombstonePending)
		})
	}
}

// Reconnect against a stdio server is a new process: a new session
// generation, the subscription re-established as a new generation and
// re-read (the new process serves its initial body again), and
// notifications of the new process drive reads as before.
func TestGoSDKStdioReconnect(t *testing.T) {
	t.Parallel()
	s := gosdkServer()
	c, outcomes := connect(t, s.dial, mcpsync.ClientOptions{})
	_, err := c.Subscribe(t.Context(), gosdkDoc)
	require.NoError(t, err)
	first := await(t, outcomes, "initial", decided(mcpsync.DecisionAccepted, ledger.TriggerInitial))
	s.callTool(t, "set", map[string]any{"text": "v2"})
	await(t, outcomes, "of v2", decided(mcpsync.DecisionAccepted, ledger.TriggerNotification))

	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	require.NoError(t, c.Reconnect(ctx))
	again := await(t, outcomes, "after the reconnect", decided(mcpsync.DecisionAccepted, ledger.TriggerReconnect))
	assert.Greater(t, again.Version.Version.SessionGeneration, first.Version.Version.SessionGeneration)
	assert.Greater(t, again.Version.Version.SubscriptionGeneration, first.Version.Version.SubscriptionGeneration)
	entry, err := c.Lookup(gosdkDoc)
	require.NoError(t, err)
	assert.Equal(t, "v1", entry.Contents[0].Text, "the new process starts from v1")

	s.callTool(t, "set", map[string]any{"text": "v3"})
	await(t, outcomes, "of v3", decided(mcpsync.DecisionAccepted, ledger.TriggerNotification))
	entry, err = c.Lookup(gosdkDoc)
	require.NoError(t, err)
	assert.Equal(t, "v3", entry.Contents[0].Text)
}

// gosdkChurnEnv makes the test binary the helper process that serves
// runGoSDKChurnServer (see TestMain).
const gosdkChurnEnv = "MCPSYNC_INTEROP_GOSDK_CHURN"

// The churning server's documents, and how often each one changes.
const (
	churnDocs  = 25
	churnEvery = 50 * time.Millisecond
)

func churnDoc(i int) string { return fmt.Sprintf("gosdk://doc/%02d", i+1) }

// runGoSDKChurnServer serves churnDocs resources with the official Go SDK,
// each changed and announced with ResourceUpdated every churnEvery, and
// subscribe handlers that accept everything, as a new user's first server
// would be written. It returns the process exit code.
//
// On 2026-07-28 the go-sdk v1.8.0 server keeps resource subscriptions per
// session, not per stream (mcp/server.go): subscriptionsListen (line 1256)
// subscribes each URI of the stream with s.subscribe (line 1287), which
// sets s.resourceSubscriptions[uri][session] (line 1228), and defers
// s.unsubscribe of each (line 1297); the handler then blocks on
// <-ctx.Done() (line 1316), so the deferred unsubscribes run once that
// stream's context ends, and delete the session from the URI's set (line
// 1246) whichever stream subscribed it since. The same handler's deferred
// func (line 1278) deletes the session's list-changed subscriptions. A
// client that replaces stream A by stream B carrying the same URIs can
// have B subscribe them before A's handler has returned: A's clean-up then
// removes them while B stays acknowledged and open.
func runGoSDKChurnServer() int {
	var mu sync.Mutex // protects changes
	changes := map[string]int{}
	srv := sdk.NewServer(&sdk.Implementation{Name: "go-sdk-churn", Version: "1.0.0"}, &sdk.ServerOptions{
		SubscribeHandler:   func(context.Context, *sdk.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *sdk.UnsubscribeRequest) error { return nil },
	})
	for i := range churnDocs {
		uri := churnDoc(i)
		srv.AddResource(&sdk.Resource{URI: uri, Name: uri, MIMEType: "text/plain"},
			func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
				mu.Lock()
				defer mu.Unlock()
				text := fmt.Sprintf("%s change %d", uri, changes[uri])
				return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
			})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tick := time.NewTicker(churnEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i := range churnDocs {
				uri := churnDoc(i)
				mu.Lock()
				changes[uri]++
				mu.Unlock()
				_ = srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri})
			}
		}
	}()
	if err := srv.Run(ctx, &sdk.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// churnCounter counts, per URI, the new versions accepted since mark.
type churnCounter struct {
	wake chan struct{} // buffered 1: a count rose

	mu     sync.Mutex // protects marked and counts
	marked bool
	counts map[string]int
}

func (w *churnCounter) observe(o mcpsync.Outcome) {
	if !o.Changed() {
		return
	}
	w.mu.Lock()
	if w.marked {
		w.counts[o.Version.Version.URI]++
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *churnCounter) mark() {
	w.mu.Lock()
	w.marked, w.counts = true, map[string]int{}
	w.mu.Unlock()
}

func (w *churnCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.counts))
	for u, n := range w.counts {
		out[u] = n
	}
	return out
}

// churnRound is one run against a fresh go-sdk churning server: the
// documents are subscribed one at a time, each Subscribe a replacement of
// the listen stream, and right after the Subscribe of gosdk://doc/k, for
// each k in dropAfter, gosdk://doc/dropAfter[k] is unsubscribed (another
// replacement). From the last Subscribe on, every document still
// subscribed must get want new versions before the deadline, and no
// unsubscribed one may get any. It returns what went wrong, "" for a good
// round.
func churnRound(t *testing.T, dropAfter map[int]int, want int, deadline time.Duration) string {
	t.Helper()
	counter := &churnCounter{wake: make(chan struct{}, 1)}
	s := &stdioServer{command: os.Args[0], env: []string{gosdkChurnEnv + "=1", "GORACE=atexit_sleep_ms=0"}, args: []string{"-test.run=^$"}}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	c, err := mcpsync.Connect(ctx, s.dial, &mcpsync.ClientOptions{
		Subject:         alice,
		Seed:            1,
		ProtocolVersion: "2026-07-28",
		RequestTimeout:  bound,
		// An hour: no periodic read can stand in for a lost notification.
		RevalidateEvery: time.Hour,
		PollEvery:       time.Hour,
		OnOutcome:       counter.observe,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.Equal(t, "2026-07-28", c.Capabilities().ProtocolVersion)

	kept := map[string]bool{}
	var dropped []string
	for i := range churnDocs {
		uri := churnDoc(i)
		sub, err := c.Subscribe(ctx, uri)
		require.NoError(t, err, uri)
		require.Equal(t, ledger.ModePush, sub.Mode, "%s: %s %+v", uri, sub.ModeReason, sub)
		kept[uri] = true
		if d, ok := dropAfter[i+1]; ok {
			gone := churnDoc(d - 1)
			closed, err := c.Unsubscribe(ctx, gone)
			require.NoError(t, err, gone)
			require.Equal(t, ledger.StateClosed, closed.State, gone)
			delete(kept, gone)
			dropped = append(dropped, gone)
		}
	}
	counter.mark()

	timeout := time.NewTimer(deadline)
	defer timeout.Stop()
	for {
		counts := counter.snapshot()
		var short []string
		for uri := range kept {
			if counts[uri] < want {
				short = append(short, fmt.Sprintf("%s:%d", strings.TrimPrefix(uri, "gosdk://doc/"), counts[uri]))
			}
		}
		var heard []string
		for _, uri := range dropped {
			if counts[uri] > 0 {
				heard = append(heard, uri)
			}
		}
		if len(heard) > 0 {
			return fmt.Sprintf("unsubscribed documents got new versions: %v", heard)
		}
		if len(short) == 0 {
			return ""
		}
		select {
		case <-counter.wake:
			continue
		case <-timeout.C:
		}
		slices.Sort(short)
		return fmt.Sprintf("%d of %d subscribed documents below %d new versions after %v (doc:versions): %s",
			len(short), len(kept), want, deadline, strings.Join(short, " "))
	}
}

// (2026-07-28) Against the official Go SDK server, documents subscribed one
// at a time (each Subscribe a replacement of the listen stream) all keep
// receiving new versions once the last Subscribe returned, in every run:
// the old stream's clean-up, which the server runs after the new stream
// may have subscribed the same URIs, must not leave any of them silent.
// With Unsubscribes in between, the unsubscribed documents stop and the
// others keep receiving. Revalidation is an hour away, so only
// notifications can bring the new versions.
func TestGoSDKStreamReplacementKeepsEveryURIHeard(t *testing.T) {
	const (
		rounds   = 20
		want     = 5 // new versions of each document: about 250 ms of changes
		deadline = 10 * time.Second
	)
	for _, tc := range []struct {
		name      string
		dropAfter map[int]int
	}{
		{"subscribe one at a time", nil},
		{"with unsubscribes in between", map[int]int{6: 3, 12: 9, 18: 15, 24: 21}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var failed []string
			for round := range rounds {
				if msg := churnRound(t, tc.dropAfter, want, deadline); msg != "" {
					failed = append(failed, fmt.Sprintf("round %d: %s", round+1, msg))
				}
			}
			assert.Empty(t, failed, "%d of %d rounds left documents silent", len(failed), rounds)
		})
	}
}
