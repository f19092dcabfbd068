package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// HTTPClient returns a client that sends through base (nil: the default
// transport) and holds every response to the session's limits. The
// response of a request, a JSON body or an event stream, and the standalone
// GET stream are inspected message by message, as stdio lines are (see
// Monitor): a message over MessageBytes or MaxDepth, a malformed one, or an
// answer whose id is not the request's, fails the request whose response
// it is with the error naming the cause, and leaves the session (other
// requests, other streams) as it was. Any other body is bounded as a whole.
//
// What counts toward MessageBytes: of a JSON body, the body without the
// whitespace that ends it (encoding/json's Encoder ends it with "\n"); of an
// event, its data as joined from its data lines (what mcp-go decodes).
func HTTPClient(base *http.Client, mon *Monitor) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	rt := c.Transport
	if rt == nil {
		rt = sharedTransport
	}
	c.Transport = boundedTransport{rt: rt, mon: mon}
	mon.watch()
	return c
}

// SessionHTTPClient is HTTPClient for the transport of one session, mon's,
// whose connections are its own and close with it (Transport.Close, Abort):
// base's transport, or sharedTransport when it has none, is cloned for the
// session when it is an *http.Transport. Another RoundTripper, which cannot
// be cloned, is shared as it is.
//
// net/http (go1.26) puts the connection of an answer without a body (202
// to a notification or to the client's answer to a server request, 200 to
// a DELETE) back in its pool before the answer reaches its caller; if the
// caller's context ends in between, it closes that connection under
// whichever request took it, which then fails with the first one's cause
// ("context canceled"). Closing a session ends its requests in flight, so
// on a pool shared between sessions the close of one could fail a request
// of the next: the initialize of a reconnect, or of the session Connect
// dials after abandoning one without the notification stream.
func SessionHTTPClient(base *http.Client, mon *Monitor) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	var pool *sessionPool
	switch t := c.Transport.(type) {
	case nil:
		pool = newSessionPool(sharedTransport)
	case *http.Transport:
		pool = newSessionPool(t)
	}
	if pool != nil {
		c.Transport = pool.t
		mon.mu.Lock()
		mon.pools = append(mon.pools, pool)
		mon.mu.Unlock()
	}
	return HTTPClient(c, mon)
}

// closePools closes the connections of the session's own HTTP clients.
func (m *Monitor) closePools() {
	m.mu.Lock()
	pools := m.pools
	m.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// errPoolClosed fails a request of a session whose connections closed.
var errPoolClosed = errors.New("mcpsync: the session's HTTP connections are closed")

// A sessionPool is the connection pool of one session's HTTP client, with
// every connection it dialed, so that all of them close with the session:
// CloseIdleConnections alone closes those idle then, and those that become
// idle after only until the next request asks for a connection (net/http,
// go1.26), so a request still on its way as the session closed would leave
// one open in the pool for good.
type sessionPool struct {
	t *http.Transport

	mu     sync.Mutex // protects conns and closed
	conns  map[net.Conn]struct{}
	closed bool // no connection is dialed any more
}

func newSessionPool(base *http.Transport) *sessionPool {
	p := &sessionPool{t: base.Clone(), conns: map[net.Conn]struct{}{}}
	dial := p.t.DialContext
	switch {
	case dial == nil && p.t.Dial != nil:
		legacy := p.t.Dial
		dial = func(_ context.Context, network, addr string) (net.Conn, error) { return legacy(network, addr) }
	case dial == nil:
		dial = (&net.Dialer{}).DialContext // net/http's own when a transport names none
	}
	p.t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return p.keep(c)
	}
	if dialTLS := p.t.DialTLSContext; dialTLS != nil {
		// Its connection is handed on as it is (net/http looks for a
		// *tls.Conn), so it is kept until the session closes.
		p.t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialTLS(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if _, err := p.keep(c); err != nil {
				return nil, err
			}
			return c, nil
		}
	}
	return p
}

// keep records c, a connection just dialed, or closes it when the session
// already closed.
func (p *sessionPool) keep(c net.Conn) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return nil, errPoolClosed
	}
	kc := &keptConn{Conn: c, pool: p}
	p.conns[kc] = struct{}{}
	return kc, nil
}

// close closes every connection of the pool, and any dialed after.
func (p *sessionPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.t.CloseIdleConnections()
}

// keptConn is a connection of a sessionPool, which forgets it once closed.
type keptConn struct {
	net.Conn
	pool *sessionPool
}

func (c *keptConn) Close() error {
	c.pool.mu.Lock()
	delete(c.pool.conns, c)
	c.pool.mu.Unlock()
	return c.Conn.Close()
}

// sharedTransport is http.DefaultTransport keeping more idle connections
// to a server: a client sends many requests at once (subscribes, reads),
// and the default of two idle connections per host would close the rest
// after every burst and dial them again for the next. A session's client
// clones it (SessionHTTPClient); a dialer called on its own shares it.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

type boundedTransport struct {
	rt  http.RoundTripper
	mon *Monitor
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	limit := t.mon.lim.MessageBytes
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	owner, isRequest := ownerFrom(req.Context())
	if resp.StatusCode == http.StatusOK && (isRequest || req.Method == http.MethodGet) {
		src := source{http: true, owner: owner}
		switch mt {
		case "application/json":
			resp.Body = &jsonBody{rc: resp.Body, mon: t.mon, src: src, limit: limit}
			return resp, nil
		case "text/event-stream":
			resp.Body = &eventBody{rc: resp.Body, br: newReader(resp.Body), mon: t.mon, src: src, limit: limit}
			return resp, nil
		}
	}
	if limit > 0 {
		resp.Body = &boundedBody{rc: resp.Body, mon: t.mon, limit: limit}
	}
	return resp, nil
}

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// jsonBody is a response body of one JSON-RPC message, read whole and
// judged before mcp-go decodes any of it.
type jsonBody struct {
	rc     io.ReadCloser
	mon    *Monitor
	src    source
	limit  int64
	loaded bool
	out    []byte
	err    error
}

func (b *jsonBody) Read(p []byte) (int, error) {
	if !b.loaded {
		b.loaded = true
		b.load()
	}
	if len(b.out) > 0 {
		n := copy(p, b.out)
		b.out = b.out[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return 0, io.EOF
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// load reads the body and judges its message. Bytes past the limit are
// kept only while they are whitespace that may end the body, so the buffer
// never exceeds the limit.
func (b *jsonBody) load() {
	var buf []byte
	var seen int64 // bytes read
	scratch := make([]byte, 32<<10)
	for {
		n, err := b.rc.Read(scratch)
		data := scratch[:n]
		if b.limit > 0 && int64(len(buf)+len(data)) > b.limit {
			room := int(b.limit) - len(buf)
			extra := data[room:]
			if i := bytes.IndexFunc(extra, func(r rune) bool { return !isSpace(byte(r)) || r >= 0x80 }); i >= 0 {
				lerr := b.mon.faults.Limit(LimitMessageBytes, b.limit, seen+int64(room+i+1), b.mon.method(b.src.owner))
				b.mon.refuse(b.src, "", lerr)
				b.err = lerr
				return
			}
			data = data[:room]
		}
		if need := len(buf) + len(data); need > cap(buf) {
			size := max(2*cap(buf), need, 4<<10)
			if b.limit > 0 {
				size = min(size, int(b.limit))
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		buf = append(buf, data...)
		seen += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.err = err
			return
		}
	}
	if len(bytes.TrimSpace(buf)) == 0 {
		me := b.mon.faults.Message(FaultMalformed, "", 0, io.ErrUnexpectedEOF)
		b.mon.refuse(b.src, "", me)
		b.err = me
		return
	}
	switch _, err := b.mon.judge(b.src, buf); {
	case err == nil:
		b.out = buf
	case errors.Is(err, errSkip):
		b.err = io.EOF
	default:
		b.err = err
	}
}

func (b *jsonBody) Close() error { return b.rc.Close() }

// eventBody is an event stream read event by event: each event's data is
// judged before mcp-go sees the event, and the event is handed on rebuilt
// from what mcp-go (v1.2.1, readSSEWithCursor) reads of it, so that both
// see the same message. A refused event is handed on without its data, so
// that its id still counts for resuming the stream.
type eventBody struct {
	rc    io.ReadCloser
	br    *bufio.Reader
	mon   *Monitor
	src   source
	limit int64
	out   []byte
	err   error

	event, retry string // the event's last event and valid retry field
	id           string // its last id field, if hasID
	hasID        bool
	data         []byte // its data lines, joined as mcp-go joins them
	line         []byte
}

func (b *eventBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.step()
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *eventBody) Close() error { return b.rc.Close() }

// fail ends the stream: an event over the limit cannot be skipped without
// reading it.
func (b *eventBody) fail(observed int64) {
	lerr := b.mon.faults.Limit(LimitMessageBytes, b.limit, observed, b.mon.method(b.src.owner))
	b.mon.refuse(b.src, "", lerr)
	b.err = lerr
}

// step reads one line of the stream.
func (b *eventBody) step() {
	// A line holds at most a message and its field name and terminator.
	lineLimit := b.limit + int64(len("data: \r\n"))
	b.line = b.line[:0]
	var err error
	for {
		var chunk []byte
		chunk, err = b.br.ReadSlice('\n')
		if b.limit > 0 && int64(len(b.line)+len(chunk)) > lineLimit {
			b.fail(int64(len(b.line) + len(chunk)))
			return
		}
		b.line = append(b.line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	if err != nil {
		if err == io.EOF && len(b.data) > 0 {
			// mcp-go dispatches an unfinished event at the end of the
			// stream, but does not count its id.
			b.hasID = false
			b.dispatch()
		}
		b.err = err
		return
	}
	line := strings.TrimRight(string(b.line), "\r\n")
	if cap(b.line) > 1<<20 {
		b.line = nil // a large line is not kept pinned
	}
	switch {
	case line == "":
		b.dispatch()
	case strings.HasPrefix(line, "event:"):
		b.event = line[len("event:"):]
	case strings.HasPrefix(line, "data:"):
		value := strings.TrimPrefix(line[len("data:"):], " ")
		sep := 0
		if len(b.data) > 0 {
			sep = 1 // mcp-go joins data lines with "\n", from the first non-empty one on
		}
		if n := int64(len(b.data) + sep + len(value)); b.limit > 0 && n > b.limit {
			b.fail(n)
			return
		}
		if sep == 1 {
			b.data = append(b.data, '\n')
		}
		b.data = append(b.data, value...)
	case strings.HasPrefix(line, "id:"):
		// The SSE spec ignores an id that contains a NUL character.
		if value := strings.TrimPrefix(line[len("id:"):], " "); !strings.ContainsRune(value, 0) {
			b.id, b.hasID = value, true
		}
	case strings.HasPrefix(line, "retry:"):
		value := strings.TrimPrefix(line[len("retry:"):], " ")
		if _, perr := strconv.ParseUint(value, 10, 31); perr == nil && strings.Trim(value, "0123456789") == "" {
			b.retry = value
		}
	}
}

// dispatch ends the event: it is handed on if its data is judged
// deliverable, and its id and retry fields in any case.
func (b *eventBody) dispatch() {
	var out []byte
	if b.retry != "" {
		out = append(out, "retry: "+b.retry+"\n"...)
	}
	if b.hasID {
		out = append(out, "id: "+b.id+"\n"...)
	}
	if len(b.data) > 0 && b.mon.allows(b.src, b.data) {
		if b.event != "" {
			out = append(out, "event:"+b.event+"\n"...)
		}
		for seg := range bytes.SplitSeq(b.data, []byte("\n")) {
			out = append(out, "data: "...)
			out = append(out, seg...)
			out = append(out, '\n')
		}
	}
	b.out = append(out, '\n')
	b.event, b.retry, b.data, b.hasID = "", "", nil, false
}

// boundedBody fails once the whole body passes the limit: a response that
// is no JSON-RPC message (an HTTP error, a body of another type), which
// mcp-go reads whole.
type boundedBody struct {
	rc    io.ReadCloser
	mon   *Monitor
	limit int64
	n     int64
	err   error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Never hand over more than one byte past the limit, so the caller's
	// buffer stays bounded too.
	if room := b.limit + 1 - b.n; int64(len(p)) > room {
		p = p[:max(room, 1)]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		b.err = b.mon.faults.Limit(LimitMessageBytes, b.limit, b.n, "")
		b.mon.report(b.err)
		return 0, b.err
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
