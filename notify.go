package mcpsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/ledger"
)

// The notification path. mcp-go's handler runs on the transport's read
// loop, so it only queues (noteQueue); one goroutine (pump) handles the
// notifications in arrival order: a resources/updated becomes the engine's
// coalesced read, an acknowledgement or a stream's end marks the keys whose
// stream changed, a lost connection marks the session.

// countListChanged counts a list_changed notification of method, if it is one.
func (c *Client) countListChanged(method string) {
	switch method {
	case string(mcp.MethodNotificationResourcesListChanged):
		// One notification covers resources and their templates.
		c.listChanged[string(mcp.MethodResourcesList)].Add(1)
		c.listChanged[string(mcp.MethodResourcesTemplatesList)].Add(1)
		c.listChanges.notify()
	case string(mcp.MethodNotificationToolsListChanged):
		c.listChanged[string(mcp.MethodToolsList)].Add(1)
	case string(mcp.MethodNotificationPromptsListChanged):
		c.listChanged[string(mcp.MethodPromptsList)].Add(1)
	}
}

// note is one notification as it arrived, stamped with its session.
type note struct {
	gen  uint64
	conn *connection
	n    mcp.JSONRPCNotification
	lost error // set instead of n when the connection was lost
	// streamEnded is set instead of n when the server ended a listen stream.
	streamEnded *listenStream
	streamErr   error // how it ended
}

// noteQueue is an unbounded FIFO: push never blocks, so mcp-go's read loop
// never waits on the client (mcp-go's own buffer drops notifications when
// full, which is one of the losses the revalidation read exists for).
type noteQueue struct {
	mu    sync.Mutex // protects items
	items []note
	ready chan struct{} // holds a token while items is non-empty
}

func (q *noteQueue) init() { q.ready = make(chan struct{}, 1) }

func (q *noteQueue) push(n note) {
	q.mu.Lock()
	q.items = append(q.items, n)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// noteSpareMax is the longest drained batch whose room the queue reuses: a
// burst longer than that gives its memory back once handled.
const noteSpareMax = 1024

// drain returns the queued notifications and queues the next ones in spare,
// the batch drained before and handled since (nil at first), so that
// notifications arriving one at a time allocate nothing for the queue.
func (q *noteQueue) drain(spare []note) []note {
	clear(spare) // the handled notes' maps and connections are not kept
	if cap(spare) > noteSpareMax {
		spare = nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = spare[:0]
	return items
}

// pump handles queued notifications in arrival order.
func (c *Client) pump() {
	var batch []note
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.notes.ready:
		}
		batch = c.notes.drain(batch)
		for _, n := range batch {
			c.handle(n)
		}
	}
}

func (c *Client) handle(n note) {
	c.mu.Lock()
	current := c.conn
	c.mu.Unlock()
	switch {
	case n.lost != nil:
		c.lose(n.conn, n.lost)
		return
	case n.streamEnded != nil:
		if n.conn == current {
			c.streamEnded(n.conn, n.streamEnded, n.streamErr)
		}
		return
	}
	params := n.n.Params.AdditionalFields
	switch n.n.Method {
	case string(mcp.MethodNotificationResourceUpdated):
		uri := notifiedURI(params)
		if n.gen != current.gen {
			c.engine.refuseNotification(uri, n.gen, ReasonGenerationMismatch, n.n.Method)
			return
		}
		if id := streamIDOf(n.n); id != "" && !n.conn.currentStream(id) {
			// A stream this client replaced: the server may still deliver
			// on it for a moment, and the new stream carries the same URIs,
			// so reading again would only amplify.
			c.engine.refuseNotification(uri, n.gen, ReasonGenerationMismatch, "notification of a replaced subscriptions/listen stream")
			return
		}
		// Normalized here, once: the rollout and the engine are handed the
		// key, which they find normalized and keep as it is, allocating
		// nothing.
		key, err := normalizeKey(uri)
		if err != nil {
			c.engine.refuseNotification(uri, n.gen, ReasonNotSubscribed, err.Error())
			return
		}
		if c.skipRefresh(key, ledger.TriggerNotification) {
			return // outside the refresh fraction (rollout.go)
		}
		if err := c.notify(key); err != nil {
			c.engine.refuseNotification(key, n.gen, ReasonNotSubscribed, err.Error())
		}
	case mcp.MethodNotificationSubscriptionsAcknowledged:
		start, left := n.conn.acknowledged(acknowledgedURIs(params), streamIDOf(n.n))
		if start {
			c.markSession(replaceQuiet) // its pass reads the gap (readGap)
		}
		for _, key := range left {
			c.mark(key)
		}
		c.markStream(0) // a replacement may wait for this answer
	}
}

// notify hands the engine a notification of key and sends the read it
// asks for. A pulse the engine could not record (a ledger write failed)
// is owed (owe). It returns the error of a pulse that is moot: key is not
// readable in this session, or another worker holds it.
func (c *Client) notify(key string) error {
	t, ok, err := c.engine.Notify(key)
	switch {
	case err == nil:
		if ok {
			c.dispatch(t)
		}
		return nil
	case errors.Is(err, ErrNotLeaseholder):
		c.report(err)
		return err
	case !writeFailed(err) || !c.owe(key, ledger.TriggerNotification, true, err):
		return err
	}
	return nil
}

// owe records that a read key's notifications asked for could not be
// recorded or issued (err): no pulse is lost to a failed write. The key
// is Degraded, saying why, until a read issued after it is answered
// (settle); OnError hears a *ReadError when the read becomes owed, not
// again for each notification that finds it owed; and the key's passes
// ask for it again (askOwed), after the retry policy's backoff while
// the write still fails. renotify says the notification itself is to be
// recorded again (Notify), not only its read (RequestRead). It reports
// false when key is not watched: nothing is owed then.
func (c *Client) owe(key string, trigger ledger.Trigger, renotify bool, err error) bool {
	// The reads this one may not count on: those issued before it.
	sub, serr := c.engine.Subscription(key)
	c.mu.Lock()
	w := c.watches[key]
	if w == nil {
		c.mu.Unlock()
		return false
	}
	first := w.owed == ""
	if first || w.owed != ledger.TriggerNotification {
		w.owed = trigger // a notification's read counts most
	}
	w.renotify = w.renotify || renotify
	w.owedErr, w.owedAsked = causeText(err), false
	if serr == nil && (first || sub.SubscriptionGeneration > w.owedGen ||
		(sub.SubscriptionGeneration == w.owedGen && sub.LastIssuedOrdinal > w.owedOrdinal)) {
		w.owedGen, w.owedOrdinal = sub.SubscriptionGeneration, sub.LastIssuedOrdinal
	}
	c.mu.Unlock()
	if first {
		c.report(&ReadError{URI: key, Trigger: trigger, Err: err})
	}
	c.mark(key)
	return true
}

// settle records that the fence accepted the answer to t: a read issued
// after the read key owed (owe) settles it, whatever it found.
func (c *Client) settle(t ledger.Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[t.URI]
	if w == nil || w.owed == "" {
		return
	}
	if t.SubscriptionGeneration > w.owedGen || (t.SubscriptionGeneration == w.owedGen && t.ReadOrdinal > w.owedOrdinal) {
		w.owed, w.renotify, w.owedErr, w.owedTries, w.owedAsked = "", false, "", 0, false
	}
}

// oweFollowUp owes the read of a follow-up the engine could not issue
// (err, from FinishRead or Fail), if err says so.
func (c *Client) oweFollowUp(err error) {
	if re, ok := errors.AsType[*ReadError](err); ok {
		c.owe(re.URI, re.Trigger, false, re.Err)
	}
}

// owedReasonLocked says why key's copy may miss a change its server announced,
// or "": a read it owes (owe). c.mu is held.
func (c *Client) owedReasonLocked(key string) string {
	if w := c.watches[key]; w != nil && w.owed != "" {
		return "a read of it could not be recorded: " + w.owedErr
	}
	return ""
}

// askOwed asks again for the read key owes (owe) and returns 0, or,
// while its write still fails, when to try again: after the retry
// policy's backoff. The read it issues settles the debt once answered.
func (c *Client) askOwed(key string, w *watch) time.Duration {
	c.mu.Lock()
	trigger, renotify := w.owed, w.renotify
	asked := w.owedAsked
	c.mu.Unlock()
	if trigger == "" || asked {
		return 0
	}
	var t ledger.Ticket
	var ok bool
	var err error
	if renotify {
		t, ok, err = c.engine.Notify(key)
	} else {
		t, ok, err = c.engine.RequestRead(key, trigger)
	}
	c.mu.Lock()
	switch {
	case writeFailed(err):
		w.owedErr = causeText(err)
		d := c.retry.delay(w.owedTries)
		w.owedTries++
		c.mu.Unlock()
		return d
	case err != nil || !ok:
		// Moot (nothing this session can read is owed), or coalesced
		// into a read not yet sent or a follow-up of the one out, which
		// the engine owes now (a follow-up it cannot issue is owed
		// again: reads.go).
		w.owed, w.renotify, w.owedErr, w.owedTries, w.owedAsked = "", false, "", 0, false
	default:
		// Issued: its answer settles the debt, and nothing is asked
		// again meanwhile (a read that fails is retried by the read
		// path).
		w.owedGen, w.owedOrdinal = t.SubscriptionGeneration, t.ReadOrdinal-1
		w.renotify, w.owedTries, w.owedAsked = false, 0, true
	}
	c.mu.Unlock()
	if ok {
		c.dispatch(t)
	}
	return 0
}

// decodeParams reads notification params into dst through JSON. mcp-go's
// in-process transport (v1.2.1) hands params over as the server's Go values
// (an mcp.SubscriptionFilter, say) rather than decoded JSON, so a type
// assertion on map[string]any would see nothing; a JSON round trip reads
// both alike. A notification that does not decode leaves dst zero.
func decodeParams(params map[string]any, dst any) {
	raw, err := json.Marshal(params)
	if err == nil {
		_ = json.Unmarshal(raw, dst)
	}
}

// streamIDOf returns the subscriptions/listen stream a 2026-07-28
// notification names in _meta, or "" when it names none. mcp-go decodes
// _meta into Params.Meta off the wire; its in-process transport leaves it
// among the other params.
func streamIDOf(n mcp.JSONRPCNotification) string {
	id, ok := n.Params.Meta[mcp.MetaKeySubscriptionID]
	if !ok {
		switch meta := n.Params.AdditionalFields["_meta"].(type) {
		case nil:
		case map[string]any:
			id, ok = meta[mcp.MetaKeySubscriptionID]
		default:
			var m struct {
				Meta map[string]any `json:"_meta"`
			}
			decodeParams(n.Params.AdditionalFields, &m)
			id, ok = m.Meta[mcp.MetaKeySubscriptionID]
		}
	}
	switch id := id.(type) {
	case nil:
		return ""
	case string:
		return id
	}
	if !ok {
		return ""
	}
	return fmt.Sprint(id)
}

// notifiedURI returns the uri of a resources/updated notification's
// params. Off the wire it is a string; only other shapes (typed values an
// in-process transport passes through) take the JSON round trip.
func notifiedURI(params map[string]any) string {
	if uri, ok := params["uri"].(string); ok {
		return uri
	}
	var updated mcp.ResourceUpdatedNotificationParams
	decodeParams(params, &updated)
	return updated.URI
}

// acknowledgedURIs returns the resource URIs a subscriptions/acknowledged
// notification names. It carries every URI of the stream, so the common
// shapes (mcp-go's in-process Go value, a decoded JSON array) are read
// without the JSON round trip of decodeParams.
func acknowledgedURIs(params map[string]any) []string {
	switch f := params["notifications"].(type) {
	case mcp.SubscriptionFilter:
		return f.ResourceSubscriptions
	case map[string]any:
		if uris, ok := stringList(f["resourceSubscriptions"]); ok {
			return uris
		}
	}
	var ack struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	decodeParams(params, &ack)
	return ack.Notifications.ResourceSubscriptions
}

// stringList returns v as a []string if it is a JSON array of strings.
func stringList(v any) ([]string, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// currentStream reports whether id names the newest stream (or there is
// none whose id is known, so there is nothing to compare with).
func (conn *connection) currentStream(id string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.listen == nil || conn.listen.id == "" || conn.listen.id == id
}

// refuseNotification records a notification that triggers nothing: one of
// an older session generation (ReasonGenerationMismatch) or for a URI with no
// open subscription (ReasonNotSubscribed). It changes nothing else.
func (e *Engine) refuseNotification(rawURI string, sessionGen uint64, reason StaleReason, detail string) StaleReceipt {
	key, err := normalizeKey(rawURI)
	if err != nil {
		key = rawURI
	}
	s := StaleReceipt{
		Schema: SchemaStaleReceipt, Reason: reason, URI: key, SessionGeneration: sessionGen,
		Trigger: ledger.TriggerNotification, Detail: detail, At: e.now(),
	}
	e.audit.record(&s)
	return s
}
