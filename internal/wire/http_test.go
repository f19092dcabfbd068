package wire

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An event stream is handed on as mcp-go reads it: data lines joined as it
// joins them, id and retry kept; a refused event keeps its id, so the
// stream can still be resumed after it, and fails the request whose stream
// it is with the cause.
func TestEventBodyRebuildsEvents(t *testing.T) {
	var faults []error
	mon := NewMonitor(Limits{MessageBytes: 1 << 10, Depth: 8}, PlainFaults{}, func(err error) { faults = append(faults, err) })
	ctx, finish := begun(mon, context.Background(), "int64:1", "resources/read")
	defer finish()
	in := "retry: 50\r\nid: 7\r\nevent: message\r\ndata:\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata:  \"method\":\"notifications/x\"}\r\n\r\n" +
		": comment\nid: 8\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":[[[[[[[[[[]]]]]]]]]]}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n" // unfinished: mcp-go dispatches it at the end
	b := &eventBody{rc: io.NopCloser(strings.NewReader(in)), mon: mon, src: source{http: true, owner: "int64:1"}, limit: 1 << 10}
	b.br = newReader(b.rc)
	out, err := io.ReadAll(b)
	require.NoError(t, err)
	assert.Equal(t, "retry: 50\nid: 7\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\ndata:  \"method\":\"notifications/x\"}\n\n"+
		"id: 8\n\n"+
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", string(out))
	require.Len(t, faults, 1)
	assert.ErrorIs(t, faults[0], &LimitError{Limit: LimitDepth})
	assert.ErrorIs(t, context.Cause(ctx), &LimitError{Limit: LimitDepth})
}

// An event over MessageBytes ends the stream with the limit, and fails the
// request whose stream it is; on a stream of no request an answer fails
// nothing, but is reported.
func TestEventBodyBounds(t *testing.T) {
	var faults []error
	mon := NewMonitor(Limits{MessageBytes: 64}, PlainFaults{}, func(err error) { faults = append(faults, err) })
	ctx, finish := begun(mon, context.Background(), "int64:1", "resources/read")
	defer finish()

	listen := &eventBody{rc: io.NopCloser(strings.NewReader("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")), mon: mon, src: source{http: true}, limit: 64}
	listen.br = newReader(listen.rc)
	out, err := io.ReadAll(listen)
	require.NoError(t, err)
	assert.Equal(t, "\n", string(out))
	require.Len(t, faults, 1)
	assert.ErrorIs(t, faults[0], &MessageError{Fault: FaultUnknownID})
	assert.NoError(t, ctx.Err())

	own := &eventBody{rc: io.NopCloser(strings.NewReader("data: {\"a\":\ndata: \"" + strings.Repeat("x", 60) + "\"}\n\n")), mon: mon, src: source{http: true, owner: "int64:1"}, limit: 64}
	own.br = newReader(own.rc)
	_, err = io.ReadAll(own)
	assert.ErrorIs(t, err, &LimitError{Limit: LimitMessageBytes})
	assert.ErrorIs(t, context.Cause(ctx), &LimitError{Limit: LimitMessageBytes})
}

// A JSON body may end in whitespace past MessageBytes; anything else past
// it is over the limit.
func TestJSONBodyTrailingWhitespace(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":1,"result":{}}`
	for body, ok := range map[string]bool{
		msg:                     true,
		msg + "\r\n\n  \t":      true,
		msg + "\n" + "x":        false,
		" " + msg:               false,
		msg[:len(msg)-1] + " }": false,
	} {
		mon := NewMonitor(Limits{MessageBytes: int64(len(msg))}, PlainFaults{}, nil)
		_, finish := begun(mon, context.Background(), "int64:1", "resources/read")
		b := &jsonBody{rc: io.NopCloser(strings.NewReader(body)), mon: mon, src: source{http: true, owner: "int64:1"}, limit: int64(len(msg))}
		_, err := io.ReadAll(b)
		if ok {
			assert.NoError(t, err, "%q", body)
		} else {
			assert.ErrorIs(t, err, &LimitError{Limit: LimitMessageBytes}, "%q", body)
		}
		finish()
	}
}

// A session's HTTP connections close with it: every one its client opened,
// and none opens after. net/http keeps closing the connections that become
// idle after CloseIdleConnections only until the next request asks for
// one, so a request of the session still on its way as it closed would
// otherwise leave a connection in the pool for good.
func TestASessionsHTTPConnectionsCloseWithIt(t *testing.T) {
	var mu sync.Mutex // protects open
	open := map[net.Conn]bool{}
	changed := make(chan struct{}, 1)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	hs.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	hs.Start()
	defer hs.Close()

	mon := NewMonitor(Limits{MessageBytes: 1 << 20, Depth: 64}, PlainFaults{}, func(error) {})
	c := SessionHTTPClient(nil, mon)
	post := func() error {
		resp, err := c.Post(hs.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/x"}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			err = resp.Body.Close()
		}
		return err
	}
	require.NoError(t, post())
	mon.closePools()
	_ = post() // the session's last request, on its way as it closed

	deadline := time.After(5 * time.Second)
	for {
		mu.Lock()
		n := len(open)
		mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d connection(s) of the closed session still open", n)
		}
	}
}
