package mcpsynctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
)

const (
	// SnapshotCapability is the capabilities.experimental key under which a
	// server declares the list snapshot extension.
	SnapshotCapability = "io.github.mcpsync/listSnapshot"
	// SnapshotIDKey is the _meta key that carries the snapshot id on each list
	// page of a server that declares the extension.
	SnapshotIDKey = "io.github.mcpsync/snapshotId"

	// KindResources names the resources/list walk in OnPage and list faults.
	KindResources = string(mcp.MethodResourcesList)
	// KindTemplates names the resources/templates/list walk.
	KindTemplates = string(mcp.MethodResourcesTemplatesList)
)

// ErrLegacyOnly is the error a server built with LegacyOnly answers to every
// request of protocol version 2026-07-28 or later.
var ErrLegacyOnly = errors.New("mcpsynctest: server speaks protocol versions up to 2025-11-25 only")

// ErrModernOnly is the error a server built with ModernOnly answers to every
// request of a protocol version before 2026-07-28.
var ErrModernOnly = errors.New("mcpsynctest: server speaks protocol version 2026-07-28 only")

// ErrSubscribeFailed is the error a server built with FailSubscribe answers
// to resources/subscribe after recording the subscription.
var ErrSubscribeFailed = errors.New("mcpsynctest: subscribe handler failed: client does not support sampling")

// ServerOptions configures a Server. The zero value (or nil) is a
// well-behaved server that declares subscribe and listChanged and answers
// both protocol eras; the fields switch individual features off or turn on
// real-world misbehaviour.
type ServerOptions struct {
	// Name and Version identify the server; defaults "mcpsynctest" and "0.0.0".
	Name    string
	Version string
	// PageSize is the number of items per list page; default 2, so small
	// fixtures already span several pages.
	PageSize int
	// NoSubscribe leaves the resources.subscribe capability undeclared.
	NoSubscribe bool
	// NoListChanged leaves the resources.listChanged capability undeclared
	// and never sends notifications/resources/list_changed.
	NoListChanged bool
	// SuppressListChanged declares listChanged but never sends it, as many
	// real servers do: the capability is only a SHOULD. In the modern era the
	// subscriptions/acknowledged filter then leaves resourcesListChanged out.
	SuppressListChanged bool
	// LegacyOnly makes the server refuse every 2026-07-28 request, including
	// the server/discover probe, so clients fall back to initialize and
	// negotiate 2025-11-25, like a server that predates the modern era.
	LegacyOnly bool
	// ModernOnly makes the server refuse every request without the
	// 2026-07-28 _meta, including initialize, like a server that dropped the
	// handshake. It contradicts LegacyOnly.
	ModernOnly bool
	// Snapshot declares the list snapshot extension: each list page carries
	// _meta[SnapshotIDKey], and every page of a walk is cut from the resource
	// set named by the first page's snapshot id.
	Snapshot bool
	// FailSubscribe makes resources/subscribe record the subscription and
	// then fail, like the widely used test server that sends a sampling
	// request inside its subscribe handler. Legacy era only: the modern era
	// has no resources/subscribe.
	FailSubscribe bool
	// ChangeOnRead makes every read return different text (the stored text
	// with a read counter appended), like a resource that embeds a clock.
	ChangeOnRead bool
	// SessionWideListenEnd makes the end of a subscriptions/listen stream
	// unsubscribe its session from every URI the stream carried, whichever
	// stream subscribed the URI since, as the official Go SDK server
	// (v1.8.0) does: its listen handler subscribes each URI for the session
	// and defers an unsubscribe of each, which runs once that stream's
	// context ends. A client that replaces a stream by one carrying the
	// same URIs, and whose new stream is subscribed before the old one's
	// clean-up runs, is left with an acknowledged, open stream that
	// notifies none of them. HoldNextListenEnd makes the clean-up land
	// after the new stream subscribed. Without it, a stream's end removes
	// that stream's own subscriptions only.
	SessionWideListenEnd bool
}

// Server is an mcp-go server whose resources a test can add, change, delete
// and recreate at any time, including between the pages of a list walk.
// It answers both protocol eras unless told otherwise: reads of a deleted
// resource fail with -32002 (2025-11-25 and before) or -32602 (2026-07-28),
// and resources/updated reaches sessions subscribed by resources/subscribe
// or by an open subscriptions/listen stream. All methods are safe for
// concurrent use.
type Server struct {
	opts ServerOptions // write-once
	mcp  *server.MCPServer

	// pending carries the client's cursor from the before-list hook to the
	// after-list hook, keyed by the request pointer both hooks receive.
	pending sync.Map

	mu        sync.Mutex // protects every field below
	resources map[string]*storedResource
	templates map[string]*storedTemplate
	seq       uint64            // creation sequence; the order of both lists
	versions  map[string]uint64 // set version per list kind; raised on every descriptor change
	snapshots map[snapshotKey][]listItem
	subs      map[subKey]any // value: the subscriptions/listen request id, nil for resources/subscribe
	// streams holds the URIs each open subscriptions/listen stream
	// subscribed, until the stream ends.
	streams map[streamKey][]string
	// endHolds are the HoldNextListenEnd holds not yet taken, in order.
	endHolds []*Hold
	// gone holds the sessions mcp-go unregistered: a request of theirs
	// that arrives late (a transport that still delivers it) subscribes
	// nothing.
	gone     map[server.ClientSession]struct{}
	reads    map[string]int
	subCalls int
	unsubs   int
	notified int
	onPage   func(kind string, page int)
}

type storedResource struct {
	res  mcp.Resource
	text string
	seq  uint64
}

type storedTemplate struct {
	tmpl mcp.ResourceTemplate
	seq  uint64
}

type snapshotKey struct {
	kind    string
	version uint64
}

type subKey struct {
	session server.ClientSession
	uri     string
	listen  string // "" for resources/subscribe
}

type streamKey struct {
	session server.ClientSession
	listen  string
}

// NewServer returns a Server configured by opts; nil means defaults.
func NewServer(opts *ServerOptions) *Server {
	s := &Server{
		resources: map[string]*storedResource{},
		templates: map[string]*storedTemplate{},
		versions:  map[string]uint64{},
		snapshots: map[snapshotKey][]listItem{},
		subs:      map[subKey]any{},
		streams:   map[streamKey][]string{},
		gone:      map[server.ClientSession]struct{}{},
		reads:     map[string]int{},
	}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.LegacyOnly && s.opts.ModernOnly {
		panic("mcpsynctest: ServerOptions.LegacyOnly and ModernOnly contradict each other")
	}
	if s.opts.Name == "" {
		s.opts.Name = "mcpsynctest"
	}
	if s.opts.Version == "" {
		s.opts.Version = "0.0.0"
	}
	if s.opts.PageSize <= 0 {
		s.opts.PageSize = 2
	}

	hooks := &server.Hooks{}
	hooks.AddOnRequestInitialization(s.onRequest)
	hooks.AddAfterSubscribe(func(ctx context.Context, _ any, req *mcp.SubscribeRequest, _ *mcp.EmptyResult) {
		s.addSubs(server.ClientSessionFromContext(ctx), []string{req.Params.URI}, nil)
	})
	hooks.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
		s.removeSubs(func(k subKey) bool {
			return k.session == server.ClientSessionFromContext(ctx) && k.uri == req.Params.URI && k.listen == ""
		})
	})
	hooks.AddBeforeSubscriptionsListen(func(ctx context.Context, id any, req *mcp.SubscriptionsListenRequest) {
		if s.opts.NoSubscribe {
			return // mcp-go drops the URIs from the acknowledged filter too
		}
		s.addSubs(server.ClientSessionFromContext(ctx), req.Params.Notifications.ResourceSubscriptions, id)
	})
	hooks.AddAfterSubscriptionsListen(func(ctx context.Context, id any, _ *mcp.SubscriptionsListenRequest, _ *mcp.SubscriptionsListenResult) {
		s.endListen(ctx, id)
	})
	hooks.AddOnError(func(ctx context.Context, id any, method mcp.MCPMethod, _ any, _ error) {
		if method == mcp.MethodSubscriptionsListen {
			s.endListen(ctx, id)
		}
	})
	hooks.AddOnUnregisterSession(func(_ context.Context, session server.ClientSession) {
		s.mu.Lock()
		s.gone[session] = struct{}{}
		for k := range s.streams {
			if k.session == session {
				delete(s.streams, k)
			}
		}
		s.mu.Unlock()
		s.removeSubs(func(k subKey) bool { return k.session == session })
	})
	hooks.AddBeforeListResources(func(_ context.Context, _ any, req *mcp.ListResourcesRequest) {
		s.beforeList(req, &req.Params.Cursor)
	})
	hooks.AddAfterListResources(func(_ context.Context, _ any, req *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		items, ok := s.afterList(KindResources, req, &res.PaginatedResult)
		if !ok {
			return
		}
		res.Resources = make([]mcp.Resource, 0, len(items))
		for _, it := range items {
			res.Resources = append(res.Resources, it.resource)
		}
	})
	hooks.AddBeforeListResourceTemplates(func(_ context.Context, _ any, req *mcp.ListResourceTemplatesRequest) {
		s.beforeList(req, &req.Params.Cursor)
	})
	hooks.AddAfterListResourceTemplates(func(_ context.Context, _ any, req *mcp.ListResourceTemplatesRequest, res *mcp.ListResourceTemplatesResult) {
		items, ok := s.afterList(KindTemplates, req, &res.PaginatedResult)
		if !ok {
			return
		}
		res.ResourceTemplates = make([]mcp.ResourceTemplate, 0, len(items))
		for _, it := range items {
			res.ResourceTemplates = append(res.ResourceTemplates, it.template)
		}
	})
	if !s.opts.NoListChanged && s.opts.SuppressListChanged {
		// mcp-go sends list_changed from AddResource/DeleteResources whenever
		// the capability is set, so the capability stays off inside mcp-go
		// and is only written into what the client is told.
		hooks.AddAfterInitialize(func(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
			declareListChanged(&res.Capabilities)
		})
		hooks.AddAfterDiscover(func(_ context.Context, _ any, _ *mcp.DiscoverRequest, res *mcp.DiscoverResult) {
			declareListChanged(&res.Capabilities)
		})
	}

	serverOpts := []server.ServerOption{
		server.WithResourceCapabilities(!s.opts.NoSubscribe, !s.opts.NoListChanged && !s.opts.SuppressListChanged),
		server.WithHooks(hooks),
	}
	if s.opts.Snapshot {
		serverOpts = append(serverOpts, server.WithExperimental(map[string]any{SnapshotCapability: map[string]any{}}))
	}
	s.mcp = server.NewMCPServer(s.opts.Name, s.opts.Version, serverOpts...)
	return s
}

func declareListChanged(c *mcp.ServerCapabilities) {
	if c.Resources != nil {
		c.Resources.ListChanged = true
	}
}

// MCPServer returns the underlying mcp-go server, for server.NewStreamableHTTPServer,
// client.NewInProcessClient and the like.
func (s *Server) MCPServer() *server.MCPServer { return s.mcp }

// NewInProcessTransport returns a new in-process client transport to s. Each
// call is a separate session, so a second call is how a test reconnects.
func (s *Server) NewInProcessTransport() *transport.InProcessTransport {
	return transport.NewInProcessTransport(s.mcp)
}

// Dialer returns a dialer of s for mcpsync.Connect: each dial is a new
// in-process transport (NewInProcessTransport), so the client's reconnects
// open sessions of their own.
func (s *Server) Dialer() mcpsync.Dialer {
	return func(context.Context) (transport.Interface, error) { return s.NewInProcessTransport(), nil }
}

// wireRequest is the part of a raw request the kit looks at before mcp-go
// dispatches it.
type wireRequest struct {
	Method string `json:"method"`
	Params struct {
		URI  string `json:"uri"`
		Meta struct {
			ProtocolVersion string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
	} `json:"params"`
}

// onRequest sees every request before mcp-go dispatches it. It is the only
// hook that can refuse a request, so era refusal and the failing subscribe
// live here. mcp-go answers a refusal from this hook with -32600 whatever the
// error, where a real pre-2026 server would answer server/discover with
// -32601; clients fall back to initialize on either.
func (s *Server) onRequest(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok {
		return nil
	}
	var req wireRequest
	if json.Unmarshal(raw, &req) != nil {
		return nil
	}
	modern := mcp.IsModernProtocol(req.Params.Meta.ProtocolVersion)
	if s.opts.LegacyOnly && (modern || req.Method == string(mcp.MethodServerDiscover)) {
		return ErrLegacyOnly
	}
	if s.opts.ModernOnly && !modern {
		return ErrModernOnly
	}
	switch req.Method {
	case string(mcp.MethodResourcesSubscribe), string(mcp.MethodSubscriptionsListen):
		s.mu.Lock()
		s.subCalls++
		s.mu.Unlock()
		if s.opts.FailSubscribe && !modern && !s.opts.NoSubscribe && req.Method == string(mcp.MethodResourcesSubscribe) && req.Params.URI != "" {
			s.addSubs(server.ClientSessionFromContext(ctx), []string{req.Params.URI}, nil)
			return ErrSubscribeFailed
		}
	case string(mcp.MethodResourcesUnsubscribe):
		s.mu.Lock()
		s.unsubs++
		s.mu.Unlock()
	}
	return nil
}

// addSubs records session's subscription to each of uris, by the listen
// stream listenID (nil: resources/subscribe). The stream's key is worked
// out once, and the lock taken once, however many URIs it carries.
func (s *Server) addSubs(session server.ClientSession, uris []string, listenID any) {
	if session == nil {
		return
	}
	var listen string
	if listenID != nil {
		listen = fmt.Sprint(listenID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.gone[session]; gone {
		return
	}
	for _, uri := range uris {
		if uri != "" {
			s.subs[subKey{session: session, uri: uri, listen: listen}] = listenID
		}
	}
	if listenID != nil {
		s.streams[streamKey{session: session, listen: listen}] = uris
	}
}

// HoldNextListenEnd parks the clean-up of the next subscriptions/listen
// stream to end, of any session, until Release: the stream's subscriptions
// stay as they are, and so does its request's answer, since a server
// answers a listen request once its handler returned. Arrived is closed
// when the stream has ended and its clean-up is parked. A client can
// meanwhile open the stream that replaces it, so that with
// SessionWideListenEnd the clean-up, once released, unsubscribes what the
// new stream carries. A parked clean-up keeps the old request's goroutine,
// so a test must release every hold it takes.
func (s *Server) HoldNextListenEnd() *Hold {
	h := newHold()
	s.mu.Lock()
	s.endHolds = append(s.endHolds, h)
	s.mu.Unlock()
	return h
}

// endListen is the clean-up of the stream id of the session in ctx, run
// on the listen request's goroutine once the stream ended, before its
// answer goes out.
func (s *Server) endListen(ctx context.Context, id any) {
	session := server.ClientSessionFromContext(ctx)
	listen := fmt.Sprint(id)
	s.mu.Lock()
	var hold *Hold
	if len(s.endHolds) > 0 {
		hold = s.endHolds[0]
		s.endHolds = s.endHolds[1:]
	}
	s.mu.Unlock()
	if hold != nil {
		hold.arriveOnce.Do(func() { close(hold.arrived) })
		<-hold.release
		hold.pass()
	}
	s.mu.Lock()
	key := streamKey{session: session, listen: listen}
	uris := s.streams[key]
	delete(s.streams, key)
	s.mu.Unlock()
	if !s.opts.SessionWideListenEnd {
		s.removeSubs(func(k subKey) bool { return k.session == session && k.listen == listen })
		return
	}
	carried := make(map[string]bool, len(uris))
	for _, u := range uris {
		carried[u] = true
	}
	s.removeSubs(func(k subKey) bool { return k.session == session && carried[k.uri] })
}

func (s *Server) removeSubs(match func(subKey) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.subs {
		if match(k) {
			delete(s.subs, k)
		}
	}
}

// OnPage installs f, called after each list page is cut and before it is
// returned, so f can change resources between that page and the next. kind
// is KindResources or KindTemplates; page counts from 1 within a walk. f runs
// on the request's goroutine without any kit lock held.
func (s *Server) OnPage(f func(kind string, page int)) {
	s.mu.Lock()
	s.onPage = f
	s.mu.Unlock()
}

// Set adds the resource uri (named uri) or changes its MIME type and text,
// then notifies subscribed sessions with notifications/resources/updated.
func (s *Server) Set(uri, mimeType, text string) {
	s.mu.Lock()
	r := mcp.Resource{URI: uri, Name: uri, MIMEType: mimeType}
	if e, ok := s.resources[uri]; ok {
		r = e.res
		r.MIMEType = mimeType
	}
	s.setLocked(r, text)
	s.mu.Unlock()
	s.notifyUpdated(uri)
}

// SetResource adds or changes a resource with a full descriptor (name,
// title, annotations), then notifies subscribed sessions.
func (s *Server) SetResource(r mcp.Resource, text string) {
	s.mu.Lock()
	s.setLocked(r, text)
	s.mu.Unlock()
	s.notifyUpdated(r.URI)
}

// setLocked registers new resources with mcp-go under s.mu, so a read can
// never find the kit and mcp-go disagreeing about existence. mcp-go takes no
// kit lock on that path, so the order of locks is fixed.
func (s *Server) setLocked(r mcp.Resource, text string) {
	e, ok := s.resources[r.URI]
	if ok {
		if !sameResource(e.res, r) {
			e.res = r
			s.versions[KindResources]++
		}
		e.text = text
		return
	}
	s.seq++
	s.resources[r.URI] = &storedResource{res: r, text: text, seq: s.seq}
	s.versions[KindResources]++
	s.mcp.AddResource(r, s.readHandler(r.URI))
}

func sameResource(a, b mcp.Resource) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Delete removes uri; later reads answer the era's not-found error. Subscribed
// sessions are notified, so they read and learn of the deletion.
func (s *Server) Delete(uri string) {
	s.mu.Lock()
	_, ok := s.resources[uri]
	if ok {
		delete(s.resources, uri)
		s.versions[KindResources]++
		// Unregistering from mcp-go is what makes a read answer the era's
		// not-found code: a handler error always becomes -32603.
		s.mcp.DeleteResources(uri)
	}
	s.mu.Unlock()
	if ok {
		s.notifyUpdated(uri)
	}
}

// Recreate deletes uri and creates it again with the same descriptor and the
// given text. The new incarnation sorts after every existing resource, as in
// a store that lists by creation order, so a walk that already passed uri
// meets it again. A missing uri is created as text/plain.
func (s *Server) Recreate(uri, text string) {
	s.mu.Lock()
	r := mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"}
	if e, ok := s.resources[uri]; ok {
		r = e.res
		delete(s.resources, uri)
		s.versions[KindResources]++
		s.mcp.DeleteResources(uri)
	}
	s.setLocked(r, text)
	s.mu.Unlock()
	s.notifyUpdated(uri)
}

// Text returns the current text of uri and whether it exists.
func (s *Server) Text(uri string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.resources[uri]
	if !ok {
		return "", false
	}
	return e.text, true
}

// SetTemplate adds or replaces a resource template in the templates list.
// Templates are listed only, never registered for reads: mcp-go would route
// reads of deleted URIs matching a template to its handler, and report any
// handler error as -32603 instead of not found.
func (s *Server) SetTemplate(uriTemplate, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := mcp.NewResourceTemplate(uriTemplate, name)
	if e, ok := s.templates[uriTemplate]; ok {
		e.tmpl = t
	} else {
		s.seq++
		s.templates[uriTemplate] = &storedTemplate{tmpl: t, seq: s.seq}
	}
	s.versions[KindTemplates]++
}

// DeleteTemplate removes a resource template from the templates list.
func (s *Server) DeleteTemplate(uriTemplate string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.templates[uriTemplate]; ok {
		delete(s.templates, uriTemplate)
		s.versions[KindTemplates]++
	}
}

func (s *Server) readHandler(uri string) server.ResourceHandlerFunc {
	return func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		e, ok := s.resources[uri]
		if !ok {
			// Only reachable in the instant between mcp-go's lookup and this
			// handler; mcp-go reports it as -32603.
			return nil, fmt.Errorf("resource %q was deleted during the read", uri)
		}
		s.reads[uri]++
		text := e.text
		if s.opts.ChangeOnRead {
			text = fmt.Sprintf("%s (read %d)", text, s.reads[uri])
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: e.res.MIMEType, Text: text}}, nil
	}
}

// notifyUpdated sends notifications/resources/updated for uri to every
// session subscribed to it. mcp-go has no helper for this notification and
// none of its sessions records resource subscriptions, so the kit tracks
// subscriptions from hooks and writes to the session channel itself, without
// blocking, exactly as mcp-go sends its own notifications. Modern-era
// notifications carry the id of the subscriptions/listen stream.
func (s *Server) notifyUpdated(uri string) {
	type target struct {
		session  server.ClientSession
		listenID any
	}
	var targets []target
	s.mu.Lock()
	for k, id := range s.subs {
		if k.uri == uri {
			targets = append(targets, target{k.session, id})
		}
	}
	s.mu.Unlock()

	for _, t := range targets {
		n := mcp.JSONRPCNotification{
			JSONRPC: mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{
				Method: mcp.MethodNotificationResourceUpdated,
				Params: mcp.NotificationParams{AdditionalFields: map[string]any{"uri": uri}},
			},
		}
		if t.listenID != nil {
			n.Params.Meta = map[string]any{mcp.MetaKeySubscriptionID: t.listenID}
		}
		if up, ok := t.session.(server.SessionWithStreamableHTTPConfig); ok {
			up.UpgradeToSSEWhenReceiveNotification()
		}
		select {
		case t.session.NotificationChannel() <- n:
			s.mu.Lock()
			s.notified++
			s.mu.Unlock()
		default:
			// A full session buffer drops, as in mcp-go.
		}
	}
}

// Reads returns how many reads of uri the server has answered with content.
func (s *Server) Reads(uri string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[uri]
}

// SubscribeCalls returns how many resources/subscribe and
// subscriptions/listen requests the server has received, failed ones included.
func (s *Server) SubscribeCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subCalls
}

// UnsubscribeCalls returns how many resources/unsubscribe requests the server
// has received.
func (s *Server) UnsubscribeCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unsubs
}

// NotificationsSent returns how many notifications/resources/updated the
// server has handed to sessions.
func (s *Server) NotificationsSent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notified
}

// Subscribed reports whether any session is subscribed to uri as the server
// recorded it: by resources/subscribe (including a FailSubscribe one) until
// resources/unsubscribe or the session ends, or by an open
// subscriptions/listen stream.
func (s *Server) Subscribed(uri string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.subs {
		if k.uri == uri {
			return true
		}
	}
	return false
}
