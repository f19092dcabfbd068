package mcpsync_test

// The limits of the wire (Limits): every bound holds whatever a hostile or
// odd peer sends, over stdio and over streamable HTTP, however the peer
// spells a member name, and a violation fails its request with an error
// that names its cause rather than a timeout. The peers here are scripted
// by hand, byte for byte.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// peerRequest is one request the client sent to a scripted peer.
type peerRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		URI             string `json:"uri"`
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"params"`
}

// scriptedPeer is a hand-written JSON-RPC server over pipes: it answers the
// handshake, ping and resources/subscribe itself and hands every other
// request to answer, which writes raw bytes to w (nothing is added: the
// answer carries its own framing).
type scriptedPeer struct {
	mu     sync.Mutex // serializes writes
	out    io.Writer
	answer func(p *scriptedPeer, req peerRequest)
}

// write writes raw bytes to the client, serialized with other writes.
func (p *scriptedPeer) write(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.out, s)
}

func (p *scriptedPeer) result(id json.RawMessage, result string) {
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result))
}

// peerDialer dials a fresh scriptedPeer over pipes for each connection; the
// peer hands every request it does not answer itself to answer.
func peerDialer(t *testing.T, answer func(p *scriptedPeer, req peerRequest)) mcpsync.Dialer {
	t.Helper()
	return mcpsync.StreamDialer(func(context.Context) (io.ReadCloser, io.WriteCloser, error) {
		fromServer, toClient := io.Pipe()
		fromClient, toServer := io.Pipe()
		p := &scriptedPeer{out: toClient, answer: answer}
		go func() {
			defer toClient.Close()
			r := bufio.NewReader(fromClient)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				var req peerRequest
				if json.Unmarshal(line, &req) != nil || req.ID == nil {
					continue
				}
				switch req.Method {
				case "initialize":
					p.result(req.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"peer","version":"1"}}`, req.Params.ProtocolVersion))
				case "ping", "resources/subscribe", "resources/unsubscribe":
					p.result(req.ID, `{}`)
				default:
					p.answer(p, req)
				}
			}
		}()
		return fromServer, toServer, nil
	})
}

// connectPeer connects a client of a scripted peer (2025-11-25 and no
// heartbeat unless o says otherwise), closed when the test ends.
func connectPeer(t *testing.T, dial mcpsync.Dialer, o mcpsync.ClientOptions) *mcpsync.Client {
	t.Helper()
	o.Subject = "peer"
	if o.ProtocolVersion == "" {
		o.ProtocolVersion = "2025-11-25"
	}
	if o.PingEvery == 0 {
		o.PingEvery = -1
	}
	c, err := mcpsync.Connect(t.Context(), dial, &o)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// subscribedPeer connects a client with o to the peer dial reaches and
// subscribes peerURI; the context it returns bounds what the test asks of
// the client to d.
func subscribedPeer(t *testing.T, dial mcpsync.Dialer, o mcpsync.ClientOptions, d time.Duration) (*mcpsync.Client, context.Context) {
	t.Helper()
	c := connectPeer(t, dial, o)
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	_, err := c.Subscribe(ctx, peerURI)
	require.NoError(t, err)
	return c, ctx
}

// readPastABound reads peerURI, whose answer is past a bound of the
// client's Limits, and returns the error; a read accepted anyway is logged
// with what it kept.
func readPastABound(t *testing.T, c *mcpsync.Client, ctx context.Context) error {
	t.Helper()
	out, err := c.Read(ctx, peerURI)
	if err == nil && out.Accepted {
		entry, lerr := c.Lookup(peerURI)
		require.NoError(t, lerr)
		t.Logf("accepted a read past its bound: %d content items, %d bytes of text in the first", len(entry.Contents), len(entry.Contents[0].Text))
	}
	return err
}

// peerURI is the one resource of the scripted peers.
const peerURI = "test://peer/doc"

// The result bounds measure what the decoders behind them see: a member
// name spelled with escapes ("cont\u0065nts") or another case
// ("Resources") is the member the decoders read (mcp-go's parse of a read
// unescapes names, encoding/json's decode of a page folds their case), so
// it counts toward its bound like the plain spelling. Here: 11 content
// items under a "cont\u0065nts" key fail a read with MaxReadItems 10.
func TestEscapedContentsKeyCountsTowardMaxReadItems(t *testing.T) {
	lim := mcpsync.Limits{MaxReadItems: 10}
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		items := make([]string, 11)
		for i := range items {
			items[i] = fmt.Sprintf(`{"uri":%q,"text":"x"}`, peerURI)
		}
		p.result(req.ID, `{"cont\u0065nts":[`+strings.Join(items, ",")+`]}`)
	})
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{Limits: &lim}, 10*time.Second)
	require.ErrorIs(t, readPastABound(t, c, ctx), mcpsync.ErrTooManyReadItems, "11 content items under MaxReadItems=10")
}

// 64 KiB of text under a "t\u0065xt" key fail a read with MaxReadBytes
// 1024.
func TestEscapedTextKeyCountsTowardMaxReadBytes(t *testing.T) {
	lim := mcpsync.Limits{MaxReadBytes: 1024}
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		p.result(req.ID, fmt.Sprintf(`{"contents":[{"uri":%q,"t\u0065xt":%q}]}`, peerURI, strings.Repeat("x", 64<<10)))
	})
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{Limits: &lim}, 10*time.Second)
	require.ErrorIs(t, readPastABound(t, c, ctx), mcpsync.ErrReadTooLarge, "64 KiB of text under MaxReadBytes=1024")
}

// A page of 50 items under a "Resources" key fails a scan with MaxPageItems
// 10.
func TestCaseFoldedResourcesKeyCountsTowardMaxPageItems(t *testing.T) {
	lim := mcpsync.Limits{MaxPageItems: 10}
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		items := make([]string, 50)
		for i := range items {
			items[i] = fmt.Sprintf(`{"uri":"test://peer/%d","name":"r"}`, i)
		}
		p.result(req.ID, `{"Resources":[`+strings.Join(items, ",")+`]}`)
	})
	c := connectPeer(t, dial, mcpsync.ClientOptions{Limits: &lim})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cat, err := c.Scan(ctx, mcpsync.KindResources)
	if err == nil {
		n := 0
		for range cat.Items() {
			n++
		}
		t.Logf("catalog of %d items from pages of 50 under MaxPageItems=10", n)
	}
	require.ErrorIs(t, err, mcpsync.ErrTooManyPageItems, "a page of 50 items under MaxPageItems=10")
}

// docs/limits.md promises peak heap within twice MaxMessageBytes plus 16 MiB
// (mcpsynctest.HeapSlack) for every hostile scenario. One message under
// MaxMessageBytes = 2 MiB carrying ~58,000 content items under a
// "cont\u0065nts" key, far past MaxReadItems (10,000), fails with
// ErrTooManyReadItems within that bound.
func TestEscapedContentsKeyFloodStaysWithinTheHeapBound(t *testing.T) {
	const msgBytes = 2 << 20
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		p.mu.Lock()
		defer p.mu.Unlock()
		bw := bufio.NewWriter(p.out)
		fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"cont\u0065nts":[`, req.ID)
		n := 64 // the envelope
		for i := 0; ; i++ {
			item := `{"uri":"` + peerURI + `","text":""}`
			if n+len(item)+8 > msgBytes {
				break
			}
			if i > 0 {
				bw.WriteByte(',')
				n++
			}
			bw.WriteString(item)
			n += len(item)
		}
		bw.WriteString("]}}\n")
		_ = bw.Flush()
	})
	lim := mcpsync.Limits{MaxMessageBytes: msgBytes}
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{Limits: &lim}, 30*time.Second)

	runtime.GC()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	out, err := c.Read(ctx, peerURI)
	close(stop)
	peak := <-done
	var items int
	if entry, lerr := c.Lookup(peerURI); lerr == nil {
		items = len(entry.Contents)
	}
	t.Logf("read: accepted=%v err=%v, %d items kept, peak heap %.1f MiB", out.Accepted, err, items, float64(peak)/(1<<20))
	bound := uint64(2*msgBytes + 16<<20)
	assert.ErrorIs(t, err, mcpsync.ErrTooManyReadItems)
	assert.LessOrEqual(t, peak, bound, "peak heap %d MiB over the published bound of %d MiB", peak>>20, bound>>20)
}

// A server over MaxNotificationsPerSecond has the rest of that second
// dropped, but a resources/updated for a subscribed URI dropped with it
// still leaves its dirty bit (DESIGN: "a pulse is never dropped (one dirty
// bit survives any cap)"): the session says it is degraded, and within
// three windows of the rate the copy reaches the new text, or Lookup says
// it is not being kept fresh. The flood here is ordinary log
// notifications: an honest but chatty server must not lose a resource
// change this way.
func TestNotificationFloodKeepsTheSubscribedPulse(t *testing.T) {
	var text atomic.Value
	text.Store("v1")
	var peer atomic.Pointer[scriptedPeer]
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		peer.Store(p)
		p.result(req.ID, fmt.Sprintf(`{"contents":[{"uri":%q,"text":%q}]}`, peerURI, text.Load()))
	})
	faults := make(chan error, 16)
	outcomes := make(chan mcpsync.Outcome, 64)
	lim := mcpsync.Limits{MaxNotificationsPerSecond: 100}
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{
		Limits: &lim, RevalidateEvery: time.Hour,
		OnFault: func(err error) {
			select {
			case faults <- err:
			default:
			}
		},
		OnOutcome: func(o mcpsync.Outcome) {
			select {
			case outcomes <- o:
			default:
			}
		},
	}, 10*time.Second)
	_, err := c.Read(ctx, peerURI)
	require.NoError(t, err)
	entry, err := c.Lookup(peerURI)
	require.NoError(t, err)
	require.Equal(t, "v1", entry.Contents[0].Text)
	for len(outcomes) > 0 {
		<-outcomes
	}

	// The resource changes; the server logs a burst and then says so.
	text.Store("v2")
	var burst strings.Builder
	for i := range 2 * lim.MaxNotificationsPerSecond {
		fmt.Fprintf(&burst, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"line %d"}}`+"\n", i)
	}
	fmt.Fprintf(&burst, `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":%q}}`+"\n", peerURI)
	peer.Load().write(burst.String())

	select {
	case err := <-faults:
		require.ErrorIs(t, err, mcpsync.ErrNotificationRate)
	case <-ctx.Done():
		require.FailNow(t, "no degraded session told")
	}

	// Either the copy reaches v2 once the rate falls (well within 3 s, three
	// windows of the rate), or Lookup says it is not being kept fresh.
	deadline := time.NewTimer(3 * time.Second)
	defer deadline.Stop()
	for {
		entry, err := c.Lookup(peerURI)
		require.NoError(t, err)
		if entry.Contents[0].Text == "v2" || entry.Degraded != "" {
			return
		}
		select {
		case <-outcomes:
		case <-deadline.C:
			require.Failf(t, "silently stale", "after the flood the copy is still %q with Degraded=%q and staleness bound %v; the resources/updated was dropped",
				entry.Contents[0].Text, entry.Degraded, entry.StalenessBound)
			return
		}
	}
}

// A response that also carries "method" (JSON-RPC has no message with both
// method and result) fails the read it answers with ErrMalformedMessage,
// rather than being routed as a request of the server while the read waits
// out its timeout with no cause.
func TestResponseWithAMethodFailsAsMalformed(t *testing.T) {
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"resources/read","result":{"contents":[{"uri":%q,"text":"x"}]}}`+"\n", req.ID, peerURI))
	})
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{RequestTimeout: time.Minute}, 3*time.Second)
	_, err := c.Read(ctx, peerURI)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
	require.ErrorIs(t, err, mcpsync.ErrMalformedMessage)
}

// A line of exactly MaxMessageBytes framed with CRLF is a message of
// MaxMessageBytes: stdio treats CRLF as the framing it is (as the HTTP SSE
// bound skips CR), so the read passes and the session stays up.
func TestCRLFLineOfExactlyMaxMessageBytesIsAccepted(t *testing.T) {
	const limit = 64 << 10
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, req.ID, peerURI)
		tail := `"}]}}`
		msg := head + strings.Repeat("x", limit-len(head)-len(tail)) + tail
		p.write(msg + "\r\n")
	})
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{Limits: &mcpsync.Limits{MaxMessageBytes: limit}}, 5*time.Second)
	_, err := c.Read(ctx, peerURI)
	require.NoError(t, err, "a message of exactly MaxMessageBytes, CRLF-framed")
	require.NoError(t, c.SessionErr())
}

// A slow server answers a request the client gave up on only once 300
// others have finished, more than the client remembers. The late answer
// is refused on its own; no request in flight, none of which it names,
// fails with it.
func TestLateAnswerToAForgottenRequestFailsNoOther(t *testing.T) {
	const good = "test://peer/good"
	var (
		mu     sync.Mutex
		lateID json.RawMessage
		reads  atomic.Int64
	)
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
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
	c := connectPeer(t, dial, mcpsync.ClientOptions{})
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

// A server whose stdout breaks off mid-line ends the session with a
// *MessageError of FaultFramingViolation: both the read in flight and SessionErr name the framing
// violation, and neither is a timeout.
func TestStreamBrokenMidLineIsAFramingViolation(t *testing.T) {
	var once sync.Once
	dial := peerDialer(t, func(p *scriptedPeer, req peerRequest) {
		once.Do(func() {
			p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"te`, req.ID, peerURI))
			p.mu.Lock()
			_ = p.out.(interface{ Close() error }).Close()
			p.mu.Unlock()
		})
	})
	c, ctx := subscribedPeer(t, dial, mcpsync.ClientOptions{Reconnect: mcpsync.ReconnectPolicy{Disabled: true}}, 5*time.Second)
	_, err := c.Read(ctx, peerURI)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mcpsync.ErrFramingViolation, "stream broke mid-line")
	require.ErrorIs(t, c.SessionErr(), mcpsync.ErrFramingViolation)
}

// httpPeer serves streamable HTTP: the handshake and ping honestly, every
// resources/read with read, which writes the whole HTTP response.
func httpPeer(t *testing.T, read func(w http.ResponseWriter, r *http.Request, id json.RawMessage)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req peerRequest
		if json.Unmarshal(body, &req) != nil || req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Mcp-Session-Id", "peer")
		switch req.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"peer","version":"1"}}}`, req.ID, req.Params.ProtocolVersion)
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

// readOverHTTP connects over HTTPDialer with lim and reads peerURI once,
// within a deadline far shorter than the request timeout, so that a read
// failing only by timeout shows as context.DeadlineExceeded.
func readOverHTTP(t *testing.T, url string, lim mcpsync.Limits) (mcpsync.Outcome, error) {
	t.Helper()
	c := connectPeer(t, mcpsync.HTTPDialer(url, nil), mcpsync.ClientOptions{Limits: &lim, RequestTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, peerURI)
	require.NoError(t, err)
	return c.Read(ctx, peerURI)
}

// An SSE event over MaxMessageBytes fails its request with an error that
// names the limit (ErrMessageTooLarge), as over a JSON body, not with
// mcp-go's "unexpected nil response".
func TestHTTPSSEEventOverMaxMessageBytesNamesTheLimit(t *testing.T) {
	url := httpPeer(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"contents\":[{\"uri\":%q,\"text\":%q}]}}\n\n", id, peerURI, strings.Repeat("x", 128<<10))
	})
	_, err := readOverHTTP(t, url, mcpsync.Limits{MaxMessageBytes: 64 << 10})
	require.Error(t, err)
	require.ErrorIs(t, err, mcpsync.ErrMessageTooLarge, "the read's error should name MaxMessageBytes")
}

// A malformed SSE event (which mcp-go drops as "non-fatal") fails the read
// it answers with ErrMalformedMessage, not by waiting out its timeout.
func TestHTTPSSEMalformedEventFailsWithItsCause(t *testing.T) {
	url := httpPeer(t, func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"contents\":[{\"uri\":\n\n", id)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the stream stays open, as a streaming server's does
	})
	_, err := readOverHTTP(t, url, mcpsync.Limits{})
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
	require.ErrorIs(t, err, mcpsync.ErrMalformedMessage)
}

// MaxDepth holds over HTTP too: a result nested 100 deep is refused under
// MaxDepth=32 with ErrMessageTooDeep.
func TestHTTPResultDeeperThanMaxDepthIsRefused(t *testing.T) {
	url := httpPeer(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"x"}],"_meta":{"deep":%s%s}}}`, id, peerURI, strings.Repeat("[", 100), strings.Repeat("]", 100))
	})
	out, err := readOverHTTP(t, url, mcpsync.Limits{MaxDepth: 32})
	require.ErrorIs(t, err, mcpsync.ErrMessageTooDeep, "depth 100 under MaxDepth=32 (accepted: %v)", out.Accepted)
}

// A response with an id the client never sent is refused over HTTP with
// ErrUnknownResponseID (mcp-go does not compare ids), as over stdio.
func TestHTTPResponseWithAnUnknownIDIsRefused(t *testing.T) {
	url := httpPeer(t, func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":987654321,"result":{"contents":[{"uri":%q,"text":"not yours"}]}}`, peerURI)
	})
	out, err := readOverHTTP(t, url, mcpsync.Limits{})
	require.ErrorIs(t, err, mcpsync.ErrUnknownResponseID, "answer to id 987654321 (accepted: %v)", out.Accepted)
}

// A JSON body whose message is exactly MaxMessageBytes is accepted when the
// server ends it with a newline, as encoding/json's Encoder (and so most Go
// servers) does: the bound counts no framing bytes the decoder never
// needs.
func TestHTTPBodyOfExactlyMaxMessageBytesWithANewlineIsAccepted(t *testing.T) {
	const limit = 64 << 10
	url := httpPeer(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, id, peerURI)
		tail := `"}]}}`
		msg := head + strings.Repeat("x", limit-len(head)-len(tail)) + tail
		if len(msg) != limit {
			panic("bad size")
		}
		io.WriteString(w, msg+"\n")
	})
	out, err := readOverHTTP(t, url, mcpsync.Limits{MaxMessageBytes: limit})
	require.NoError(t, err, "a message of exactly MaxMessageBytes")
	require.True(t, out.Accepted)
}

// Every error of hostile input reaches the caller as the exported type
// that names it, with its fields, for errors.As: a *LimitError from a read
// over a bound, a *MessageError from a malformed answer, a *MessageError of
// FaultFramingViolation from a stream broken mid-line, and a *LimitError of
// the notification rate, with what it dropped, told to OnFault by a flooded
// session.
func TestHostileInputFailsWithAnErrorOfItsExportedType(t *testing.T) {
	read := func(t *testing.T, answer func(p *scriptedPeer, req peerRequest), o mcpsync.ClientOptions) error {
		c := connectPeer(t, peerDialer(t, answer), o)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := c.Subscribe(ctx, peerURI)
		require.NoError(t, err)
		_, err = c.Read(ctx, peerURI)
		require.Error(t, err)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
		return err
	}
	t.Run("LimitError", func(t *testing.T) {
		err := read(t, func(p *scriptedPeer, req peerRequest) {
			item := fmt.Sprintf(`{"uri":%q,"text":"x"}`, peerURI)
			p.result(req.ID, `{"contents":[`+strings.Repeat(item+",", 2)+item+`]}`)
		}, mcpsync.ClientOptions{Limits: &mcpsync.Limits{MaxReadItems: 2}})
		lim, ok := errors.AsType[*mcpsync.LimitError](err)
		require.True(t, ok, "%T %v", err, err)
		assert.Equal(t, mcpsync.LimitReadItems, lim.Limit)
		assert.EqualValues(t, 2, lim.Max)
		assert.EqualValues(t, 3, lim.Observed)
		assert.Equal(t, "resources/read", lim.Method)
	})
	t.Run("MessageError", func(t *testing.T) {
		var id atomic.Value
		err := read(t, func(p *scriptedPeer, req peerRequest) {
			id.Store(string(req.ID))
			p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"x","result":{}}`+"\n", req.ID))
		}, mcpsync.ClientOptions{RequestTimeout: time.Minute})
		msg, ok := errors.AsType[*mcpsync.MessageError](err)
		require.True(t, ok, "%T %v", err, err)
		assert.Equal(t, mcpsync.FaultMalformedMessage, msg.Fault)
		assert.Equal(t, id.Load(), msg.ID)
	})
	t.Run("MessageError of lost framing", func(t *testing.T) {
		err := read(t, func(p *scriptedPeer, req peerRequest) {
			p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"contents":[`, req.ID))
			p.mu.Lock()
			_ = p.out.(io.Closer).Close()
			p.mu.Unlock()
		}, mcpsync.ClientOptions{Reconnect: mcpsync.ReconnectPolicy{Disabled: true}})
		framing, ok := errors.AsType[*mcpsync.MessageError](err)
		require.True(t, ok, "%T %v", err, err)
		assert.Equal(t, mcpsync.FaultFramingViolation, framing.Fault)
		assert.ErrorIs(t, framing.Err, io.ErrUnexpectedEOF)
	})
	t.Run("LimitError of a degraded session", func(t *testing.T) {
		faults := make(chan error, 16)
		lim := mcpsync.Limits{MaxNotificationsPerSecond: 10}
		c := connectPeer(t, peerDialer(t, func(p *scriptedPeer, req peerRequest) {
			p.write(strings.Repeat(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`+"\n", 3*lim.MaxNotificationsPerSecond))
			p.result(req.ID, `{"resources":[]}`)
		}), mcpsync.ClientOptions{Limits: &lim, OnFault: func(err error) {
			select {
			case faults <- err:
			default:
			}
		}})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := c.Scan(ctx, mcpsync.KindResources)
		require.NoError(t, err)
		select {
		case err := <-faults:
			degraded, ok := errors.AsType[*mcpsync.LimitError](err)
			require.True(t, ok, "%T %v", err, err)
			assert.Equal(t, mcpsync.LimitNotificationsPerSecond, degraded.Limit)
			assert.Positive(t, degraded.Dropped)
		case <-ctx.Done():
			require.FailNow(t, "no fault told to OnFault")
		}
	})
}
