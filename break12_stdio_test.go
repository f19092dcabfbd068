package mcpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A response that also carries "method" passes the wire layer as "a
// notification or a request of the server"; mcp-go then routes it as a
// request of the server, and the read it answered waits out its timeout
// with no cause. JSON-RPC has no message with both method and result.
func TestBreak12ResponseWithMethodOnlyTimesOut(t *testing.T) {
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"resources/read","result":{"contents":[{"uri":%q,"text":"x"}]}}`+"\n", req.ID, b12URI))
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{RequestTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	_, err = c.Read(ctx, b12URI)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
	require.ErrorIs(t, err, mcpsync.ErrMalformedMessage)
}

// A line of exactly MaxMessageBytes framed with CRLF ends the session: the
// framer allows one byte of framing, so the CR counts as message. The HTTP
// SSE bound skips CR; stdio should treat CRLF as the framing it is.
func TestBreak12CRLFLineAtMessageBytesEndsSession(t *testing.T) {
	const limit = 64 << 10
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, req.ID, b12URI)
		tail := `"}]}}`
		msg := head + strings.Repeat("x", limit-len(head)-len(tail)) + tail
		p.write(msg + "\r\n")
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{Limits: &mcpsync.Limits{MaxMessageBytes: limit}})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	_, err = c.Read(ctx, b12URI)
	require.NoError(t, err, "a message of exactly MaxMessageBytes, CRLF-framed")
	require.NoError(t, c.SessionErr())
}

// The monitor remembers only the last 256 finished requests. A slow server
// that answers a request the client already gave up on, once 256 others
// have finished, has its late answer taken as an UNKNOWN_RESPONSE_ID that
// "names no request" - and every request in flight fails with it, though
// none of them had anything to do with it.
func TestBreak12LateAnswerAfterRingFailsUnrelatedRequest(t *testing.T) {
	const good = "test://b12/good"
	var (
		mu     sync.Mutex
		lateID json.RawMessage
		reads  atomic.Int64
	)
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		switch req.Method {
		case "resources/list":
			mu.Lock()
			if lateID == nil {
				lateID = req.ID // never answered in time
			}
			mu.Unlock()
		case "resources/read":
			if reads.Add(1) == 300 {
				mu.Lock()
				p.result(lateID, `{"resources":[]}`) // very late
				mu.Unlock()
			}
			p.result(req.ID, fmt.Sprintf(`{"contents":[{"uri":%q,"text":"ok"}]}`, good))
		}
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{})
	// A scan the caller gives up on after 100 ms.
	sctx, scancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err := c.Scan(sctx, mcpsync.KindResources)
	scancel()
	require.Error(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = c.Subscribe(ctx, good)
	require.NoError(t, err)
	for reads.Load() < 300 {
		_, err = c.Read(ctx, good)
		require.NoError(t, err, "read %d: an honest answer, failed by a late answer to another request", reads.Load())
	}
}

// A server whose stdout breaks off mid-line: limits.go says this ends the
// session with a *FramingError, but the framer keeps io.EOF and never ends
// the monitor, so neither the read nor SessionErr names a framing violation.
func TestBreak12StreamBrokenMidLineIsNoFramingError(t *testing.T) {
	var once sync.Once
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		once.Do(func() {
			p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"te`, req.ID, b12URI))
			p.mu.Lock()
			_ = p.out.(interface{ Close() error }).Close()
			p.mu.Unlock()
		})
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{Reconnect: mcpsync.ReconnectPolicy{Disabled: true}})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	_, err = c.Read(ctx, b12URI)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mcpsync.ErrFramingViolation, "stream broke mid-line")
	require.ErrorIs(t, c.SessionErr(), mcpsync.ErrFramingViolation)
}
