package mcpsync_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/mcpsync/mcpsync"
)

// b12Req is one request the client sent to a scripted break-12 peer.
type b12Req struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		URI             string `json:"uri"`
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"params"`
}

// b12Peer is a hand-written JSON-RPC server over pipes: it answers the
// handshake, ping and resources/subscribe itself and hands every other
// request to answer, which writes raw bytes to w (nothing is added: the
// answer carries its own framing).
type b12Peer struct {
	mu     sync.Mutex // serializes writes
	out    io.Writer
	answer func(p *b12Peer, req b12Req)
}

// write writes raw bytes to the client, serialized with other writes.
func (p *b12Peer) write(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.out, s)
}

func (p *b12Peer) result(id json.RawMessage, result string) {
	p.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result))
}

func b12Dialer(t *testing.T, answer func(p *b12Peer, req b12Req)) mcpsync.Dialer {
	t.Helper()
	return mcpsync.StreamDialer(func(context.Context) (io.ReadCloser, io.WriteCloser, error) {
		fromServer, toClient := io.Pipe()
		fromClient, toServer := io.Pipe()
		p := &b12Peer{out: toClient, answer: answer}
		go func() {
			defer toClient.Close()
			r := bufio.NewReader(fromClient)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				var req b12Req
				if json.Unmarshal(line, &req) != nil || req.ID == nil {
					continue
				}
				switch req.Method {
				case "initialize":
					p.result(req.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"resources":{"subscribe":true}},"serverInfo":{"name":"b12","version":"1"}}`, req.Params.ProtocolVersion))
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

func b12Connect(t *testing.T, dial mcpsync.Dialer, o mcpsync.ClientOptions) *mcpsync.Client {
	t.Helper()
	o.Subject = "b12"
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
