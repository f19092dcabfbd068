package mcpsync_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

func TestEraOf(t *testing.T) {
	for version, want := range map[string]mcpsync.Era{
		"2025-06-18": mcpsync.EraLegacy,
		"2025-11-25": mcpsync.EraLegacy,
		"2026-07-28": mcpsync.EraModern,
		"2027-01-01": mcpsync.EraModern,
	} {
		assert.Equal(t, want, mcpsync.EraOf(version), version)
	}
}

func TestResourceNotFoundByCode(t *testing.T) {
	cases := []struct {
		method string
		code   int
		absent bool
	}{
		{"resources/read", mcp.RESOURCE_NOT_FOUND, true},
		{"resources/read", mcp.INVALID_PARAMS, true},
		{"resources/read", -32603, false},
		{"resources/list", mcp.INVALID_PARAMS, false}, // an invalid cursor, not a missing resource
	}
	for _, tc := range cases {
		err := &mcpsync.RPCError{Method: tc.method, Code: tc.code, Message: "Resource not found"}
		assert.Equal(t, tc.absent, err.ResourceNotFound(), "%s %d", tc.method, tc.code)
	}
}

// docServer is a plain mcp-go server with one text resource.
type docServer struct {
	mu   sync.Mutex
	body string
	srv  *server.MCPServer
}

func newDocServer(body string) *docServer {
	d := &docServer{body: body}
	d.srv = server.NewMCPServer("doc-server", "1.0.0", server.WithResourceCapabilities(true, true))
	d.srv.AddResource(mcp.NewResource(docURI, "a", mcp.WithMIMEType("text/markdown")), d.read)
	return d
}

func (d *docServer) read(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: docURI, MIMEType: "text/markdown", Text: d.body}}, nil
}

func (d *docServer) set(body string) {
	d.mu.Lock()
	d.body = body
	d.mu.Unlock()
	d.srv.SendNotificationToAllClients(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": docURI})
}

func (d *docServer) dial(ctx context.Context) (transport.Interface, error) {
	return transport.NewInProcessTransport(d.srv), nil
}

func TestClientFollowsUpdates(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			d := newDocServer("v1")
			outcomes := make(chan mcpsync.Outcome, 16)
			c, err := mcpsync.Connect(t.Context(), d.dial, &mcpsync.ClientOptions{
				Subject: alice, ProtocolVersion: version,
				OnOutcome: func(o mcpsync.Outcome) { outcomes <- o },
			})
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, version, c.Capabilities().ProtocolVersion)

			_, err = c.Subscribe(t.Context(), docURI)
			require.NoError(t, err)
			first := <-outcomes
			require.True(t, first.Accepted, "%+v", first)
			entry, err := c.Lookup(docURI)
			require.NoError(t, err)
			assert.Equal(t, "v1", entry.Contents[0].Text)

			d.set("v2")
			second := <-outcomes
			require.True(t, second.Accepted)
			entry, err = c.Lookup(docURI)
			require.NoError(t, err)
			assert.Equal(t, "v2", entry.Contents[0].Text)
		})
	}
}

// A server without the subscribe capability gets jittered periodic reads,
// with a published staleness bound, never a pretence of real time.
func TestClientPollsWithoutSubscribeCapability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDocServer("v1")
		d.srv = server.NewMCPServer("no-subscribe", "1.0.0", server.WithResourceCapabilities(false, false))
		d.srv.AddResource(mcp.NewResource(docURI, "a"), d.read)
		c, err := mcpsync.Connect(t.Context(), d.dial, &mcpsync.ClientOptions{
			Subject: alice, ProtocolVersion: "2025-11-25", PollEvery: 30 * time.Second, Jitter: 0.1, Seed: 7,
		})
		require.NoError(t, err)
		defer c.Close()
		sub, err := c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		assert.Equal(t, ledger.ModePoll, sub.Mode)
		// PollEvery plus its jitter, and RequestTimeout (30 s) for the answer.
		assert.Equal(t, int64(33000+30000), sub.StalenessBoundMs)
		quiesce()
		assert.Equal(t, "v1", lookupText(t, c))

		d.mu.Lock()
		d.body = "v2" // no notification: only polling can see it
		d.mu.Unlock()
		time.Sleep(26 * time.Second)
		quiesce()
		assert.Equal(t, "v1", lookupText(t, c), "no poll before the jittered interval")
		time.Sleep(8 * time.Second)
		quiesce()
		assert.Equal(t, "v2", lookupText(t, c), "within the published bound")
	})
}

func lookupText(t *testing.T, c *mcpsync.Client) string {
	t.Helper()
	entry, err := c.Lookup(docURI)
	require.NoError(t, err)
	return entry.Contents[0].Text
}

func connectDoc(t *testing.T, d *docServer, version string, outcomes chan mcpsync.Outcome) *mcpsync.Client {
	t.Helper()
	c, err := mcpsync.Connect(t.Context(), d.dial, &mcpsync.ClientOptions{
		Subject: alice, ProtocolVersion: version,
		OnOutcome: func(o mcpsync.Outcome) {
			if outcomes != nil {
				outcomes <- o
			}
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// subscribedDoc returns a client of a new docServer with docURI subscribed
// and its initial read accepted, and the channel of later outcomes.
func subscribedDoc(t *testing.T, version string) (*docServer, *mcpsync.Client, chan mcpsync.Outcome, mcpsync.Subscription) {
	t.Helper()
	d := newDocServer("v1")
	outcomes := make(chan mcpsync.Outcome, 16)
	c := connectDoc(t, d, version, outcomes)
	sub, err := c.Subscribe(t.Context(), docURI)
	require.NoError(t, err)
	require.True(t, (<-outcomes).Accepted)
	return d, c, outcomes, sub
}

// A deleted resource is recognised by its error code in both eras (-32002
// before 2026-07-28, -32602 from then on), goes through the fence to
// TOMBSTONE_PENDING, and waits for list reconciliation.
func TestClientNotFoundByCode(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			d, c, outcomes, _ := subscribedDoc(t, version)

			d.srv.DeleteResources(docURI)
			d.set("gone")
			gone := <-outcomes
			require.True(t, gone.Accepted)
			assert.Equal(t, mcpsync.DecisionTombstonePending, gone.Version.Decision)
			sub, err := c.Engine().Subscription(docURI)
			require.NoError(t, err)
			assert.Equal(t, ledger.StateTombstonePending, sub.State)
			_, err = c.Lookup(docURI)
			require.ErrorIs(t, err, mcpsync.ErrTombstonePending)
		})
	}
}

func TestClientUnsubscribe(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			_, c, _, _ := subscribedDoc(t, version)

			sub, err := c.Unsubscribe(t.Context(), docURI)
			require.NoError(t, err)
			assert.Equal(t, ledger.StateClosed, sub.State)
			again, err := c.Unsubscribe(t.Context(), docURI)
			require.NoError(t, err, "idempotent")
			assert.Equal(t, sub.CloseEpoch, again.CloseEpoch)
			assert.Equal(t, "v1", lookupText(t, c), "cached content stays after unsubscribe")
		})
	}
}

// After a reconnect every subscription is re-established as a new
// generation of a new session, and re-read.
func TestClientReconnectReestablishes(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			d, c, outcomes, before := subscribedDoc(t, version)

			d.mu.Lock()
			d.body = "changed while disconnected"
			d.mu.Unlock()
			require.NoError(t, c.Reconnect(t.Context()))
			reread := <-outcomes
			require.True(t, reread.Accepted)
			assert.Equal(t, ledger.TriggerReconnect, reread.Version.Trigger)
			after, err := c.Engine().Subscription(docURI)
			require.NoError(t, err)
			assert.Equal(t, before.SessionGeneration+1, after.SessionGeneration)
			assert.Equal(t, before.SubscriptionGeneration+1, after.SubscriptionGeneration)
			assert.Equal(t, "changed while disconnected", lookupText(t, c))

			d.set("v3")
			require.True(t, (<-outcomes).Accepted, "notifications flow on the new session")
			assert.Equal(t, "v3", lookupText(t, c))
		})
	}
}

// A notification for a URI nobody subscribed triggers nothing and leaves a
// NOT_SUBSCRIBED receipt.
func TestClientNotificationForUnsubscribedURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDocServer("v1")
		c := connectDoc(t, d, "2025-11-25", nil)
		d.srv.SendNotificationToAllClients(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": "file:///nobody.md"})
		quiesce()
		receipts := c.Engine().StaleReceipts()
		require.Len(t, receipts, 1)
		assert.Equal(t, mcpsync.ReasonNotSubscribed, receipts[0].Reason)
		assert.Equal(t, "file:///nobody.md", receipts[0].URI)
		assert.Equal(t, ledger.TriggerNotification, receipts[0].Trigger)
	})
}

// Tools and prompts are listed by the same scanner, with the same session
// generation isolation, so an agent runtime gets a capability catalog with
// the same receipts.
func TestClientScansToolsAndPrompts(t *testing.T) {
	d := newDocServer("v1")
	for _, name := range []string{"search", "fetch", "summarize"} {
		d.srv.AddTool(mcp.NewTool(name), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	}
	d.srv.AddPrompt(mcp.NewPrompt("review"), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	c := connectDoc(t, d, "2025-11-25", nil)
	tools, err := c.Scan(t.Context(), mcpsync.KindTools)
	require.NoError(t, err)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, tools.Status)
	var names []string
	for d := range tools.Items() {
		names = append(names, d.Name)
	}
	assert.ElementsMatch(t, []string{"search", "fetch", "summarize"}, names)
	assert.Equal(t, c.Engine().SessionGeneration(), tools.SessionGeneration)

	prompts, err := c.Scan(t.Context(), mcpsync.KindPrompts)
	require.NoError(t, err)
	assert.Len(t, prompts.Descriptors, 1)

	require.NoError(t, c.Reconnect(t.Context()))
	_, err = tools.Proven(tools.MeasuredAt, c.Engine().SessionGeneration())
	require.ErrorIs(t, err, mcpsync.ErrSnapshotUnproven, "a catalog of an older session is refused")
}

// 2026-07-28: a notification tagged with a listen stream the client has
// replaced triggers no read (the new stream carries the same URIs) and
// leaves a receipt; one tagged with the current stream does.
func TestClientIgnoresReplacedListenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDocServer("v1")
		c := connectDoc(t, d, "2026-07-28", nil)
		_, err := c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		quiesce()
		before, err := c.Engine().Subscription(docURI)
		require.NoError(t, err)

		d.srv.SendNotificationToAllClients(string(mcp.MethodNotificationResourceUpdated), map[string]any{
			"uri": docURI, "_meta": map[string]any{mcp.MetaKeySubscriptionID: "a-stream-long-gone"},
		})
		quiesce()
		after, err := c.Engine().Subscription(docURI)
		require.NoError(t, err)
		assert.Equal(t, before.LastIssuedOrdinal, after.LastIssuedOrdinal, "no read for a replaced stream")
		assert.Equal(t, uint64(1), c.Engine().StaleCounts()[mcpsync.ReasonGenerationMismatch])

		d.set("v2") // mcp-go tags it with the current stream
		quiesce()
		assert.Equal(t, "v2", lookupText(t, c))
	})
}

// The context of Connect bounds the handshake, not the session: mcp-go
// keeps the context its transport was started with.
func TestClientOutlivesConnectContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	outcomes := make(chan mcpsync.Outcome, 4)
	c, err := mcpsync.Connect(ctx, func(context.Context) (transport.Interface, error) {
		return transport.NewStdio(os.Args[0], []string{docServerEnv + "=1"}, "-test.run=^$"), nil
	}, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25", OnOutcome: func(o mcpsync.Outcome) { outcomes <- o }})
	require.NoError(t, err)
	defer c.Close()
	cancel()
	_, err = c.Subscribe(t.Context(), docURI)
	require.NoError(t, err, "the session survives the end of Connect's context")
	require.True(t, next(t, outcomes).Accepted)
	assert.Equal(t, "v1", lookupText(t, c))
}

// Duplicate notifications are absorbed by the Client's read path whatever
// engine it drives: an engine the caller built, without ConfirmSends, gets
// the coverage too.
func TestClientAbsorbsDuplicatesOnACallersEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := mcpsync.NewEngine(nil)
		require.NoError(t, err)
		d := newDocServer("v1")
		c, err := mcpsync.Connect(t.Context(), d.dial, &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25", Engine: e})
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Subscribe(t.Context(), docURI)
		require.NoError(t, err)
		quiesce()

		d.mu.Lock()
		d.body = "v2"
		d.mu.Unlock()
		for range 10 {
			d.srv.SendNotificationToAllClients(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": docURI})
		}
		quiesce()
		sub, err := e.Subscription(docURI)
		require.NoError(t, err)
		assert.Equal(t, uint64(10), sub.LastNotificationSeq)
		assert.Equal(t, uint64(2), sub.LastIssuedOrdinal, "the initial read and one for ten duplicates")
		assert.Equal(t, "v2", lookupText(t, c))
	})
}

// A server lists docURI but answers every read of it with the contents of
// another URI, so every read is refused (URI_MISMATCH). WaitForSync,
// documented to return once every watched URI had "a first version, or a
// definite answer", returns rather than waiting out the caller's context
// (an hour here) saying nothing of why: the quick start calls WaitForSync
// with the caller's context.
func TestWaitForSyncReturnsOnAServerThatAnswersForAnotherURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := server.NewMCPServer("liar", "1.0.0", server.WithResourceCapabilities(true, true))
		srv.AddResource(mcp.NewResource(docURI, "a", mcp.WithMIMEType("text/markdown")),
			func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///docs/secret.md", MIMEType: "text/markdown", Text: "not yours"}}, nil
			})
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return transport.NewInProcessTransport(srv), nil
		}, &mcpsync.ClientOptions{Subject: alice})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		_, subErr := c.Subscribe(t.Context(), docURI)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		err = c.WaitForSync(ctx)
		_, lerr := c.Lookup(docURI)
		t.Logf("Subscribe: %v; Lookup: %v", subErr, lerr)
		require.NotErrorIs(t, err, context.DeadlineExceeded,
			"WaitForSync waited an hour for a URI whose every read the fence refuses, and said nothing of why")
	})
}
