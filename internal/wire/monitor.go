package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
)

// Monitor watches the messages of one session. It knows the requests in
// flight, so that a message refused for one of them fails that request with
// the cause at once: mcp-go (v1.2.1) drops a message it cannot decode or
// route, and the request it answered would otherwise wait out its timeout.
type Monitor struct {
	lim    Limits
	faults Faults      // builds every error the monitor and its transports give
	report func(error) // told of every fault; runs on the transport's read loop
	now    func() time.Time

	mu      sync.Mutex // protects the fields below
	pending map[string]*call
	// issued is the highest number sent under each id prefix (see
	// splitID); every id at or below it that is not in flight belongs to
	// a request that ended, however long ago.
	issued   map[string]uint64
	late     [256]string // other ids of requests that ended recently, a ring
	lateNext int
	fatal    error     // set once the session cannot go on
	window   time.Time // start of the current second of notifications
	count    int       // notifications in the current second
	dropped  int64     // notifications dropped over the rate
	// pools are the connection pools of the session's own HTTP clients
	// (SessionHTTPClient), closed with its transport.
	pools []*sessionPool

	// watched: a transport reads its messages through the monitor, which
	// then knows the requests in flight and judges their answers.
	watched atomic.Bool
}

// NewMonitor returns a monitor applying lim, whose errors, and those of the
// transports it bounds, faults builds; report, if set, is told of every
// fault as it happens. report runs on the transport's read loop and must not
// block.
func NewMonitor(lim Limits, faults Faults, report func(error)) *Monitor {
	if report == nil {
		report = func(error) {}
	}
	return &Monitor{lim: lim, faults: faults, report: report, now: time.Now, pending: make(map[string]*call), issued: make(map[string]uint64)}
}

// Limits returns the limits the monitor applies.
func (m *Monitor) Limits() Limits { return m.lim }

type monitorKey struct{}

// WithMonitor returns a context that carries m to a dialer, so that the
// transports the wire layer builds apply its limits at the byte level.
func WithMonitor(ctx context.Context, m *Monitor) context.Context {
	return context.WithValue(ctx, monitorKey{}, m)
}

// MonitorFrom returns the monitor ctx carries, or nil.
func MonitorFrom(ctx context.Context) *Monitor {
	m, _ := ctx.Value(monitorKey{}).(*Monitor)
	return m
}

// Err returns the error that ended the session, or nil.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fatal
}

// call is one request in flight, and the context it is sent under: the
// caller's, ended with the cause when the wire layer fails the request.
type call struct {
	context.Context
	id, method string
	err        error // why the wire layer failed it
	cancel     context.CancelCauseFunc
}

// Value gives the request's id to ownerFrom.
func (c *call) Value(key any) any {
	if _, ok := key.(ownerKey); ok {
		return c.id
	}
	return c.Context.Value(key)
}

type ownerKey struct{}

// ownerFrom returns the id of the request ctx was begun for: an HTTP
// transport sends the request under this context, so its response is read
// knowing which request it must answer.
func ownerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok
}

// begin registers a request in flight. The call is the context to send it
// under: it ends when the wire layer fails the request. finish unregisters
// it.
func (m *Monitor) begin(ctx context.Context, id, method string) *call {
	c := &call{id: id, method: method}
	c.Context, c.cancel = context.WithCancelCause(ctx)
	m.mu.Lock()
	if m.fatal != nil {
		c.err = m.fatal
		c.cancel(c.err)
	} else {
		m.pending[id] = c
		if prefix, n, ok := splitID(id); ok {
			m.issued[prefix] = max(m.issued[prefix], n)
		}
	}
	m.mu.Unlock()
	return c
}

// finish unregisters c and returns why the wire layer failed it, if it did.
func (m *Monitor) finish(c *call) error {
	m.mu.Lock()
	if m.pending[c.id] == c {
		delete(m.pending, c.id)
		if _, _, ok := splitID(c.id); !ok {
			m.late[m.lateNext] = c.id
			m.lateNext = (m.lateNext + 1) % len(m.late)
		}
	}
	err := c.err
	m.mu.Unlock()
	c.cancel(nil)
	return err
}

// watch records that a transport reads its messages through m (a stdio
// framer, an HTTP client's bodies), so that m judges every answer before
// mcp-go sees it.
func (m *Monitor) watch() { m.watched.Store(true) }

// failLocked fails one request in flight with err.
func (m *Monitor) failLocked(id string, err error) bool {
	c := m.pending[id]
	if c == nil || c.err != nil {
		return false
	}
	c.err = err
	c.cancel(err)
	return true
}

// failAllLocked fails every request in flight with err: a message that
// names no request could have answered any of them.
func (m *Monitor) failAllLocked(err error) {
	for id := range m.pending {
		m.failLocked(id, err)
	}
}

// end ends the session with err: every request in flight fails with it, and
// so does every later one.
func (m *Monitor) end(err error) {
	m.mu.Lock()
	if m.fatal == nil {
		m.fatal = err
	}
	m.failAllLocked(err)
	m.mu.Unlock()
	m.report(err)
}

// source says where a message came from, which decides what a refusal of
// it fails.
type source struct {
	// http: the message came over HTTP, where every stream has one
	// reader and a message on it concerns no other request.
	http bool
	// owner is the request whose response body or event stream carried the
	// message (HTTP only; "" for a stream of no request, such as the
	// standalone GET stream).
	owner string
}

// stdioSource is the one stream of a stdio session, which every request
// shares.
var stdioSource = source{}

// refuse fails the request a refused message concerns and reports err.
// Over HTTP that is the request whose stream carried it, or none. On stdio
// it is the request the message's id names, or every request in flight
// when it names none, since any of them may have been the one it answered.
func (m *Monitor) refuse(s source, id string, err error) {
	m.mu.Lock()
	switch {
	case s.http:
		if s.owner != "" {
			m.failLocked(s.owner, err)
		}
	case id == "" || !m.failLocked(id, err):
		m.failAllLocked(err)
	}
	m.mu.Unlock()
	m.report(err)
}

// idKey returns the key mcp-go gives the JSON id raw, as
// transport.JSONRPCRequest.ID.String() spells it.
func idKey(raw []byte) string {
	if raw == nil {
		return ""
	}
	var buf [64]byte
	if key, ok := appendPlainIDKey(buf[:0], raw); ok {
		return string(key)
	}
	var id mcp.RequestId
	if err := json.Unmarshal(raw, &id); err != nil {
		return ""
	}
	return id.String()
}

// requestKey returns id.String(), the key of a request in flight, with
// one allocation where String makes two for the numbers mcp-go (v1.2.1)
// gives its requests (the digits, then the key).
func requestKey(id mcp.RequestId) string {
	if n, ok := id.Value().(int64); ok {
		var buf [32]byte
		return string(strconv.AppendInt(append(buf[:0], "int64:"...), n, 10))
	}
	return id.String()
}

// appendPlainIDKey appends to dst the key of the ids every answer to this
// library carries, spelled without decoding them: an integer of at most 15
// digits (mcp-go decodes a number through float64, exact below 2^53) or a
// string with nothing to unescape. ok is false for any other id, which
// idKey decodes as mcp-go does.
func appendPlainIDKey(dst, raw []byte) (key []byte, ok bool) {
	switch {
	case len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"':
		s := raw[1 : len(raw)-1]
		for _, c := range s {
			if c < 0x20 || c == '"' || c == '\\' {
				return dst, false
			}
		}
		if !utf8.Valid(s) { // decoded, each invalid byte is U+FFFD
			return dst, false
		}
		return append(append(dst, "string:"...), s...), true
	case len(raw) > 0 && len(raw) <= 16:
		digits := raw
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 || len(digits) > 15 || digits[0] == '0' && (len(digits) > 1 || len(raw) > 1) {
			return dst, false // empty, too long, a leading zero, or -0
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return dst, false
			}
		}
		return append(append(dst, "int64:"...), raw...), true
	}
	return dst, false
}

// errSkip is the verdict on a message that is dropped without a fault: a
// blank line, or the late answer to a request that gave up.
var errSkip = errors.New("skip")

// inspect judges one stdio message, and reports whether it may be delivered.
func (m *Monitor) inspect(msg []byte) bool {
	_, err := m.inspectErr(msg)
	return err == nil
}

// allows judges one message from s, and reports whether it may be
// delivered (judge).
func (m *Monitor) allows(s source, msg []byte) bool {
	_, err := m.judge(s, msg)
	return err == nil
}

// inspectErr judges one stdio message: nil if it may be delivered, else
// why not, and whether it is malformed (judge).
func (m *Monitor) inspectErr(msg []byte) (malformed bool, err error) {
	return m.judge(stdioSource, bytes.TrimRight(msg, "\r\n"))
}

// judge judges one message from s before mcp-go sees it: nil if it may be
// delivered, errSkip if it is dropped quietly, or the error that refused
// it, which has failed the request it concerns (see refuse) and been
// reported. malformed: the message is not JSON, or not a JSON-RPC
// message. msg is the message without its framing.
func (m *Monitor) judge(s source, msg []byte) (malformed bool, err error) {
	if len(bytes.TrimSpace(msg)) == 0 {
		return false, errSkip
	}
	f := scanFrame(msg)
	// The id's key (idKey), spelled here for the ids this library's
	// requests carry, so that an answer to one of them allocates none.
	var buf [64]byte
	key, plain := appendPlainIDKey(buf[:0], f.id)
	if !plain {
		key = append(key[:0], idKey(f.id)...)
	}
	refuse := func(err error) (bool, error) {
		m.refuse(s, string(key), err)
		return false, err
	}
	if m.lim.Depth > 0 && f.depth > m.lim.Depth {
		method := m.method(string(key))
		if s.owner != "" {
			method = m.method(s.owner)
		}
		return refuse(m.faults.Limit(LimitDepth, int64(m.lim.Depth), int64(f.depth), method))
	}
	if !valid(msg) {
		var v any
		err := json.Unmarshal(msg, &v) // only for the offset of the error
		var offset int64
		if se, ok := err.(*json.SyntaxError); ok {
			offset = se.Offset
		}
		_, err = refuse(m.faults.Message(FaultMalformed, string(f.id), offset, err))
		return true, err
	}
	switch {
	case !f.object || f.duplicate || f.method == f.answer:
		// Not an object; a member a decoder would take one of several
		// spellings of; neither a request nor an answer; or both at once,
		// which JSON-RPC does not have and mcp-go would route as a
		// request of the server, leaving the request it answers waiting.
		_, err = refuse(m.faults.Message(FaultMalformed, string(f.id), 0, nil))
		return true, err
	case f.method:
		return false, nil // a notification or a request of the server
	}
	if s.http {
		// mcp-go (v1.2.1) takes whatever answer a response body or event
		// stream carries as the answer to the request that opened it,
		// whatever its id, so the id is checked here. A stream of no
		// request carries no answers.
		if s.owner == "" || string(key) != s.owner {
			return refuse(m.faults.Message(FaultUnknownID, string(f.id), 0, nil))
		}
	}
	m.mu.Lock()
	c := m.pending[string(key)]
	late := len(key) > 0 && c == nil && m.isLateLocked(string(key))
	m.mu.Unlock()
	switch {
	case late:
		return false, errSkip // the answer to a request that already gave up
	case c == nil:
		return refuse(m.faults.Message(FaultUnknownID, string(f.id), 0, nil))
	}
	if err = m.lim.checkResult(m.faults, c.method, f.result); err != nil {
		return refuse(err)
	}
	return false, nil
}

func (m *Monitor) method(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.pending[id]; c != nil {
		return c.method
	}
	return ""
}

// isLateLocked reports whether id, not in flight, is of a request that
// ended. The ids this library's requests carry are a fixed prefix and a
// counter: mcp-go (v1.2.1) numbers its requests from an atomic counter
// (client.go, requestID), its pings from its own; ours are
// "mcpsync-ping-N". So an id at or below the highest of its prefix sent was
// sent, and a late answer to it is told from an unknown id no matter how
// many requests ended since. Ids of other shapes are remembered in a ring of
// the last 256.
func (m *Monitor) isLateLocked(id string) bool {
	if prefix, n, ok := splitID(id); ok {
		top, sent := m.issued[prefix]
		return sent && n <= top
	}
	for _, l := range m.late {
		if l == id {
			return true
		}
	}
	return false
}

// allowNotification counts a notification against the rate limit and
// reports whether it may be delivered. The first one over the rate in a
// second reports the session degraded; the rest of that second is dropped,
// so a flood costs a counter, never a queue.
func (m *Monitor) allowNotification() bool {
	limit := m.lim.NotificationsPerSecond
	if limit <= 0 {
		return true
	}
	now := m.now()
	m.mu.Lock()
	if now.Sub(m.window) >= time.Second {
		m.window, m.count = now, 0
	}
	m.count++
	if m.count <= limit {
		m.mu.Unlock()
		return true
	}
	m.dropped++
	first, dropped := m.count == limit+1, m.dropped
	m.mu.Unlock()
	if first {
		m.report(m.faults.Degraded(dropped, m.faults.Limit(LimitNotificationsPerSecond, int64(limit), int64(limit+1), "")))
	}
	return false
}

// Dropped returns how many notifications the rate limit dropped.
func (m *Monitor) Dropped() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// splitID splits an id key (as idKey spells it) into a prefix and the
// decimal counter that ends it, spelled canonically (no leading zeros,
// below 2^63), as a counter prints. ok is false for an id of another shape.
func splitID(id string) (prefix string, n uint64, ok bool) {
	i := len(id)
	for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
		i--
	}
	digits := id[i:]
	if digits == "" || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return "", 0, false
	}
	for _, c := range digits {
		n = n*10 + uint64(c-'0')
	}
	return id[:i], n, true
}
