package mcpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// b40Server is a 2026-07-28 server that misbehaves on subscriptions/listen,
// built as a transport wrapper around the fault kit (so its faults and the
// server's counters still work). Every knob is read under mu at the moment
// it applies, so a test may change it at any time.
type b40Server struct {
	transport.Interface // the kit around the in-process transport

	mu sync.Mutex
	// listens counts every subscriptions/listen request the client sent,
	// refused ones included; filters holds the URIs each one named.
	listens int
	filters [][]string
	ids     []string // the JSON-RPC id of each
	// refuse, if set, answers a listen request naming uris with a JSON-RPC
	// error (the server never sees it).
	refuse func(uris []string) bool
	// endAfterAck >= 0 ends each listen stream that long after its
	// acknowledgement reached the client, with an empty result.
	endAfterAck time.Duration
	// ackFilter, if set, rewrites the URIs of every acknowledgement.
	ackFilter func(asked []string) []string
	// rewrite, if set, turns each notification the server sends into the
	// ones the client gets (none drops it).
	rewrite func(m mcp.JSONRPCNotification) []mcp.JSONRPCNotification
	// ackDelay > 0 delivers every acknowledgement that much later.
	ackDelay time.Duration
	// acked holds, per listen id, a channel closed once its
	// acknowledgement reached the client.
	acked map[string]chan struct{}
}

func newB40Server(inner transport.Interface) *b40Server {
	return &b40Server{Interface: inner, endAfterAck: -1, acked: map[string]chan struct{}{}}
}

func (s *b40Server) ackChan(id string) chan struct{} {
	ch := s.acked[id]
	if ch == nil {
		ch = make(chan struct{})
		s.acked[id] = ch
	}
	return ch
}

func (s *b40Server) Listens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listens
}

func (s *b40Server) Filters() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.filters)
}

func (s *b40Server) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

func (s *b40Server) set(f func(s *b40Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func b40ListenURIs(params any) []string {
	raw, _ := json.Marshal(params)
	var p mcp.SubscriptionsListenParams
	_ = json.Unmarshal(raw, &p)
	return p.Notifications.ResourceSubscriptions
}

func b40StreamID(m mcp.JSONRPCNotification) string {
	if id, ok := m.Params.Meta[mcp.MetaKeySubscriptionID]; ok {
		return fmt.Sprint(id)
	}
	if meta, ok := m.Params.AdditionalFields["_meta"].(map[string]any); ok {
		if id, ok := meta[mcp.MetaKeySubscriptionID]; ok {
			return fmt.Sprint(id)
		}
	}
	return ""
}

func b40AckURIs(m mcp.JSONRPCNotification) []string {
	switch f := m.Params.AdditionalFields["notifications"].(type) {
	case mcp.SubscriptionFilter:
		return f.ResourceSubscriptions
	case map[string]any:
		var out []string
		for _, x := range f["resourceSubscriptions"].([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

// b40WithAck returns m, an acknowledgement, naming uris instead.
func b40WithAck(m mcp.JSONRPCNotification, uris []string) mcp.JSONRPCNotification {
	fields := maps.Clone(m.Params.AdditionalFields)
	fields["notifications"] = mcp.SubscriptionFilter{ResourceSubscriptions: uris}
	m.Params.AdditionalFields = fields
	return m
}

// b40WithStreamID returns m tagged with stream id ("" removes the tag).
func b40WithStreamID(m mcp.JSONRPCNotification, id string) mcp.JSONRPCNotification {
	meta := maps.Clone(m.Params.Meta)
	if meta == nil {
		meta = map[string]any{}
	}
	if id == "" {
		delete(meta, mcp.MetaKeySubscriptionID)
	} else {
		meta[mcp.MetaKeySubscriptionID] = id
	}
	m.Params.Meta = meta
	return m
}

func (s *b40Server) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	s.Interface.SetNotificationHandler(func(m mcp.JSONRPCNotification) {
		s.mu.Lock()
		rewrite, ackFilter, delay := s.rewrite, s.ackFilter, s.ackDelay
		s.mu.Unlock()
		isAck := m.Method == mcp.MethodNotificationSubscriptionsAcknowledged
		if isAck && delay > 0 {
			go func() {
				time.Sleep(delay)
				s.deliver(h, m, rewrite, ackFilter)
			}()
			return
		}
		s.deliver(h, m, rewrite, ackFilter)
	})
}

func (s *b40Server) deliver(h func(mcp.JSONRPCNotification), m mcp.JSONRPCNotification,
	rewrite func(mcp.JSONRPCNotification) []mcp.JSONRPCNotification, ackFilter func([]string) []string) {
	{
		isAck := m.Method == mcp.MethodNotificationSubscriptionsAcknowledged
		id := b40StreamID(m)
		if isAck && ackFilter != nil {
			m = b40WithAck(m, ackFilter(b40AckURIs(m)))
		}
		out := []mcp.JSONRPCNotification{m}
		if rewrite != nil {
			out = rewrite(m)
		}
		for _, o := range out {
			h(o)
		}
		if isAck {
			s.mu.Lock()
			ch := s.ackChan(id)
			select {
			case <-ch:
			default:
				close(ch)
			}
			s.mu.Unlock()
		}
	}
}

func (s *b40Server) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method != string(mcp.MethodSubscriptionsListen) {
		return s.Interface.SendRequest(ctx, req)
	}
	uris := b40ListenURIs(req.Params)
	id := fmt.Sprint(req.ID.Value())
	s.mu.Lock()
	s.listens++
	s.filters = append(s.filters, uris)
	s.ids = append(s.ids, id)
	refuse, end := s.refuse, s.endAfterAck
	ack := s.ackChan(id)
	s.mu.Unlock()
	if refuse != nil && refuse(uris) {
		return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID,
			Error: &mcp.JSONRPCErrorDetails{Code: mcp.INVALID_PARAMS, Message: "b40: refused"}}, nil
	}
	if end < 0 {
		return s.Interface.SendRequest(ctx, req)
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		resp *transport.JSONRPCResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := s.Interface.SendRequest(ictx, req)
		answered <- answer{resp, err}
	}()
	select {
	case a := <-answered:
		return a.resp, a.err
	case <-ack:
	}
	time.Sleep(end)
	cancel()
	<-answered
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID, Result: json.RawMessage(`{}`)}, nil
}

// b40Rig is a 2026-07-28 client of an mcpsynctest server behind a b40Server.
type b40Rig struct {
	t   *testing.T
	srv *mcpsynctest.Server
	c   *mcpsync.Client
	mu  sync.Mutex
	hs  *b40Server // of the current connection
	// setup is applied to every new b40Server (each connection).
	setup func(s *b40Server)
}

func newB40Rig(t *testing.T, opts mcpsync.ClientOptions, setup func(s *b40Server), uris ...string) *b40Rig {
	t.Helper()
	r := &b40Rig{t: t, srv: mcpsynctest.NewServer(nil), setup: setup}
	for _, u := range uris {
		r.srv.Set(u, "text/markdown", "v1")
	}
	opts.Subject, opts.ProtocolVersion, opts.Seed = alice, "2026-07-28", 1
	c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
		hs := newB40Server(mcpsynctest.NewTransport(r.srv.NewInProcessTransport(), 1))
		if r.setup != nil {
			r.setup(hs)
		}
		r.mu.Lock()
		r.hs = hs
		r.mu.Unlock()
		return hs, nil
	}, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	r.c = c
	return r
}

func (r *b40Rig) server() *b40Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hs
}

// state describes uri as a caller sees it.
func (r *b40Rig) state(uri string) (text string, desc string) {
	sub, err := r.c.Engine().Subscription(uri)
	require.NoError(r.t, err)
	e, err := r.c.Lookup(uri)
	if err == nil && len(e.Contents) > 0 {
		text = e.Contents[0].Text
	}
	return text, fmt.Sprintf("%s %s (%q), degraded %q, server subscribed %v, lookup err %v",
		sub.State, sub.Mode, sub.ModeReason, e.Degraded, r.srv.Subscribed(uri), err)
}
