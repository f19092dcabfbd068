package mcpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// b12HTTP serves streamable HTTP: the handshake and ping honestly, every
// resources/read with read, which writes the whole HTTP response.
func b12HTTP(t *testing.T, read func(w http.ResponseWriter, r *http.Request, id json.RawMessage)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req b12Req
		if json.Unmarshal(body, &req) != nil || req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Mcp-Session-Id", "b12")
		switch req.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"b12","version":"1"}}}`, req.ID, req.Params.ProtocolVersion)
		case "resources/read":
			read(w, r, req.ID)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, req.ID)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// b12HTTPRead connects over HTTPDialer with lim and reads b12URI once,
// within a deadline far shorter than the request timeout, so that a read
// failing only by timeout shows as context.DeadlineExceeded.
func b12HTTPRead(t *testing.T, url string, lim mcpsync.Limits) (mcpsync.Outcome, error) {
	t.Helper()
	c := b12Connect(t, mcpsync.HTTPDialer(url, nil), mcpsync.ClientOptions{Limits: &lim, RequestTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	return c.Read(ctx, b12URI)
}

// An SSE event over MaxMessageBytes fails its request, but with mcp-go's
// "unexpected nil response": the *LimitError goes to OnFault only, so the
// caller's error does not name the limit (over a JSON body it does).
func TestBreak12HTTPSSEEventOverMessageBytesErrorNamesNoLimit(t *testing.T) {
	url := b12HTTP(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"contents\":[{\"uri\":%q,\"text\":%q}]}}\n\n", id, b12URI, strings.Repeat("x", 128<<10))
	})
	_, err := b12HTTPRead(t, url, mcpsync.Limits{MaxMessageBytes: 64 << 10})
	require.Error(t, err)
	require.ErrorIs(t, err, mcpsync.ErrMessageTooLarge, "the read's error should name MaxMessageBytes")
}

// A malformed SSE event is dropped by mcp-go ("non-fatal") and the request
// waits out its timeout: over HTTP the wire layer inspects no message.
func TestBreak12HTTPSSEMalformedEventOnlyTimesOut(t *testing.T) {
	url := b12HTTP(t, func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"contents\":[{\"uri\":\n\n", id)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the stream stays open, as a streaming server's does
	})
	_, err := b12HTTPRead(t, url, mcpsync.Limits{})
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
	require.ErrorIs(t, err, mcpsync.ErrMalformedMessage)
}

// MaxDepth is not applied over HTTP: a result nested 100 deep is accepted
// under MaxDepth=32 (and one nested 100,000 deep fails with encoding/json's
// untyped "exceeded max depth", not ErrMessageTooDeep).
func TestBreak12HTTPMaxDepthNotEnforced(t *testing.T) {
	url := b12HTTP(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"x"}],"_meta":{"deep":%s%s}}}`, id, b12URI, strings.Repeat("[", 100), strings.Repeat("]", 100))
	})
	out, err := b12HTTPRead(t, url, mcpsync.Limits{MaxDepth: 32})
	require.ErrorIs(t, err, mcpsync.ErrMessageTooDeep, "depth 100 under MaxDepth=32 (accepted: %v)", out.Accepted)
}

// A response with an id the client never sent is taken as the answer over
// HTTP (mcp-go does not compare ids), where over stdio it is refused with
// UNKNOWN_RESPONSE_ID.
func TestBreak12HTTPWrongResponseIDAccepted(t *testing.T) {
	url := b12HTTP(t, func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":987654321,"result":{"contents":[{"uri":%q,"text":"not yours"}]}}`, b12URI)
	})
	out, err := b12HTTPRead(t, url, mcpsync.Limits{})
	require.ErrorIs(t, err, mcpsync.ErrUnknownResponseID, "answer to id 987654321 (accepted: %v)", out.Accepted)
}

// A JSON body whose message is exactly MaxMessageBytes is refused when the
// server ends it with a newline, as encoding/json's Encoder (and so most Go
// servers) does: the bound counts framing bytes the decoder never needs.
func TestBreak12HTTPBodyAtMessageBytesWithNewlineRefused(t *testing.T) {
	const limit = 64 << 10
	url := b12HTTP(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, id, b12URI)
		tail := `"}]}}`
		msg := head + strings.Repeat("x", limit-len(head)-len(tail)) + tail
		if len(msg) != limit {
			panic("bad size")
		}
		io.WriteString(w, msg+"\n")
	})
	out, err := b12HTTPRead(t, url, mcpsync.Limits{MaxMessageBytes: limit})
	require.NoError(t, err, "a message of exactly MaxMessageBytes")
	require.True(t, out.Accepted)
}
