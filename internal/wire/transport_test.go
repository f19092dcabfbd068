package wire_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/internal/wire"
)

type codeError struct {
	method string
	code   int
	data   json.RawMessage
}

func (e *codeError) Error() string { return fmt.Sprintf("%s: %d", e.method, e.code) }

func toError(method string, code int, _ string, data json.RawMessage) error {
	return &codeError{method: method, code: code, data: data}
}

func newServer() *server.MCPServer {
	s := server.NewMCPServer("t", "1", server.WithResourceCapabilities(true, false))
	s.AddResource(mcp.NewResource("test://present", "present"),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "here"}}, nil
		})
	return s
}

// The code of a JSON-RPC error reaches the caller through mcp-go, for the
// selected methods, in both protocol eras.
func TestErrorCodeSurvivesMCPGo(t *testing.T) {
	for version, want := range map[string]int{"2025-11-25": -32002, "2026-07-28": -32602} {
		t.Run(version, func(t *testing.T) {
			c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil, "resources/read"),
				client.WithProtocolVersion(version))
			require.NoError(t, c.Start(t.Context()))
			defer c.Close()
			_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
			require.NoError(t, err)

			req := mcp.ReadResourceRequest{}
			req.Params.URI = "test://absent"
			_, err = c.ReadResource(t.Context(), req)
			var ce *codeError
			require.True(t, errors.As(err, &ce), "got %T %v", err, err)
			assert.Equal(t, want, ce.code)
			assert.Equal(t, "resources/read", ce.method)

			req.Params.URI = "test://present"
			res, err := c.ReadResource(t.Context(), req)
			require.NoError(t, err)
			require.Len(t, res.Contents, 1)
		})
	}
}

// Methods not selected keep mcp-go's own error values.
func TestUnselectedMethodsPassThrough(t *testing.T) {
	c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil, "tools/list"),
		client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://absent"
	_, err = c.ReadResource(t.Context(), req)
	require.Error(t, err)
	var ce *codeError
	assert.False(t, errors.As(err, &ce))
	assert.ErrorIs(t, err, mcp.ErrResourceNotFound)
}

// The wrapper looks like what it wraps: mcp-go changes behaviour on
// transport.HTTPConnection, so only an HTTP transport's wrapper has it.
func TestWrapperKeepsTheTransportKind(t *testing.T) {
	inproc := wire.New(transport.NewInProcessTransport(newServer()), toError, nil)
	_, isHTTP := inproc.(transport.HTTPConnection)
	assert.False(t, isHTTP)

	httpServer := httptest.NewServer(server.NewStreamableHTTPServer(newServer()))
	defer httpServer.Close()
	tr, err := transport.NewStreamableHTTP(httpServer.URL)
	require.NoError(t, err)
	wrapped := wire.New(tr, toError, nil, "resources/read")
	_, isHTTP = wrapped.(transport.HTTPConnection)
	assert.True(t, isHTTP)

	c := client.NewClient(wrapped, client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err = c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://absent"
	_, err = c.ReadResource(t.Context(), req)
	var ce *codeError
	require.True(t, errors.As(err, &ce), "over streamable HTTP too: %v", err)
	assert.Equal(t, -32002, ce.code)
}

func TestRawResultIsKept(t *testing.T) {
	c := client.NewClient(wire.New(transport.NewInProcessTransport(newServer()), toError, nil),
		client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	defer c.Close()
	_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	var raw json.RawMessage
	_, err = c.ListResourcesByPage(wire.WithRawResult(t.Context(), &raw), mcp.ListResourcesRequest{})
	require.NoError(t, err)
	var page struct {
		Resources []struct{ URI string } `json:"resources"`
	}
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Len(t, page.Resources, 1)
	assert.Equal(t, "test://present", page.Resources[0].URI)
}

// blockingServer serves test://blocked, whose handler waits for release
// and ignores its context, and test://present.
func blockingServer(release <-chan struct{}, entered chan<- struct{}) *server.MCPServer {
	s := newServer()
	s.AddResource(mcp.NewResource("test://blocked", "blocked"),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			entered <- struct{}{}
			<-release // ignores its context
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "late"}}, nil
		})
	return s
}

func startClient(t *testing.T, tr transport.Interface) *client.Client {
	t.Helper()
	c := client.NewClient(tr, client.WithProtocolVersion("2025-11-25"))
	require.NoError(t, c.Start(t.Context()))
	_, err := c.Initialize(t.Context(), mcp.InitializeRequest{})
	require.NoError(t, err)
	return c
}

// A request returns at its context's end even when the in-process server's
// handler ignores the context (mcp-go runs it on the goroutine that sends
// the request), and other requests are answered meanwhile: none waits for
// the stuck one.
func TestRequestReturnsAtItsContextsEndWhenTheHandlerIgnoresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release, entered := make(chan struct{}), make(chan struct{}, 2)
		c := startClient(t, wire.New(transport.NewInProcessTransport(blockingServer(release, entered)), toError, nil, "resources/read"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		req := mcp.ReadResourceRequest{}
		req.Params.URI = "test://blocked"
		start := time.Now()
		_, err := c.ReadResource(ctx, req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "returned at the deadline")
		<-entered

		req.Params.URI = "test://present"
		res, err := c.ReadResource(t.Context(), req)
		require.NoError(t, err, "answered while the first request is still in its handler")
		require.Len(t, res.Contents, 1)

		close(release)
		require.NoError(t, c.Close())
		synctest.Wait() // the stuck request's worker ends with its handler
	})
}

// WithSettled tells whether the caller gave up on a request before the
// transport was done with it, and tells it before the caller has an answer.
func TestSettledSaysWhetherTheCallerGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release, entered := make(chan struct{}), make(chan struct{}, 1)
		c := startClient(t, wire.New(transport.NewInProcessTransport(blockingServer(release, entered)), toError, nil))
		var got []bool
		settled := make(chan struct{}, 2)
		track := func(ctx context.Context) context.Context {
			return wire.WithSettled(ctx, func() func(bool) {
				return func(abandoned bool) {
					got = append(got, abandoned)
					settled <- struct{}{}
				}
			})
		}
		req := mcp.ReadResourceRequest{}
		req.Params.URI = "test://present"
		_, err := c.ReadResource(track(t.Context()), req)
		require.NoError(t, err)
		require.Equal(t, []bool{false}, got, "settled, not abandoned, before the answer")

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		req.Params.URI = "test://blocked"
		_, err = c.ReadResource(track(ctx), req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		<-entered
		assert.Len(t, got, 1, "not settled while the handler holds it")
		close(release)
		<-settled
		<-settled
		assert.Equal(t, []bool{false, true}, got, "abandoned: the caller gave up first")
		require.NoError(t, c.Close())
	})
}

// The answers of a transport whose messages the monitor does not read (the
// in-process one hands over decoded results) are held to the read limits
// all the same, before mcp-go decodes them.
func TestUnreadAnswersAreHeldToTheLimits(t *testing.T) {
	var faults []error
	mon := wire.NewMonitor(wire.Limits{ReadBytes: 3}, wire.PlainFaults{}, func(err error) { faults = append(faults, err) })
	c := startClient(t, wire.New(transport.NewInProcessTransport(newServer()), toError, mon, "resources/read"))
	defer c.Close()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://present"
	_, err := c.ReadResource(t.Context(), req)
	var le *wire.LimitError
	require.True(t, errors.As(err, &le), "got %v", err)
	assert.Equal(t, wire.LimitReadBytes, le.Limit)
	assert.EqualValues(t, 4, le.Observed, `"here"`)
	assert.Len(t, faults, 1, "reported")
}

// A request kept open for its answer past its context (WithAnswerAwaited)
// over streamable HTTP, which otherwise runs on the caller's goroutine,
// still returns to its caller at the context's end; the server's answer
// comes later and is told.
func TestAwaitedRequestReturnsAtItsContextsEndOverHTTP(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	httpServer := httptest.NewServer(server.NewStreamableHTTPServer(blockingServer(release, entered)))
	defer httpServer.Close()
	defer close(release)
	tr, err := transport.NewStreamableHTTP(httpServer.URL)
	require.NoError(t, err)
	c := startClient(t, wire.New(tr, toError, nil, "resources/read"))
	defer c.Close()

	ended := make(chan wire.Ending, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "test://blocked"
	returned := make(chan error, 1)
	go func() {
		_, err := c.ReadResource(wire.WithAnswerAwaited(ctx, time.Minute, func(how wire.Ending) { ended <- how }), req)
		returned <- err
	}()
	<-entered
	cancel()
	require.ErrorIs(t, <-returned, context.Canceled, "returned at its context's end, the handler still running")
	select {
	case <-ended:
		t.Fatal("told the request ended while the server still had it")
	default:
	}
	release <- struct{}{}
	assert.Equal(t, wire.Answered, <-ended, "the server's answer came after the caller had gone")
}
