package mcpsync

import (
	"context"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// What the server was told. Before 2026-07-28 the server is told with
// resources/subscribe and unsubscribe, each counted until the transport is
// done with it (tracked), so that a late one is put right by the key's next
// pass (putRight). From 2026-07-28 on a key's pass declares whether its URI
// is to be carried by the connection's listen stream and reads what the
// stream sync (stream.go) got for it: it never waits on the stream.

// serverSubscribe asks the server for notifications on raw, a spelling of
// key: resources/subscribe before 2026-07-28; from then on the listen
// stream carries raw, and errComing says the stream's answer is not in
// yet (it marks key when it is).
func (c *Client) serverSubscribe(ctx context.Context, conn *connection, key, raw string) error {
	if conn.era != EraLegacy {
		return c.askStream(conn, key, raw, true)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req := mcp.SubscribeRequest{}
	req.Params.URI = raw
	return conn.mc.Subscribe(c.tracked(ctx, conn, key, raw), req)
}

// serverUnsubscribe tells the server to stop notifying raw, a spelling of
// key: resources/unsubscribe before 2026-07-28; from then on the listen
// stream stops carrying raw, errComing until a stream without it is
// acknowledged (or none is left).
func (c *Client) serverUnsubscribe(ctx context.Context, conn *connection, key, raw string) error {
	if conn.era != EraLegacy {
		return c.askStream(conn, key, raw, false)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	req := mcp.UnsubscribeRequest{}
	req.Params.URI = raw
	return conn.mc.Unsubscribe(c.tracked(ctx, conn, key, raw), req)
}

// spelledKey is the key of raw, a spelling the client subscribed, so normalized
// once already.
func spelledKey(raw string) string {
	key, err := normalizeKey(raw)
	if err != nil {
		return raw
	}
	return key
}

// tracked counts a resources/subscribe or unsubscribe of raw as unsettled
// from the moment the transport sends it until it is done with it; one
// the caller gave up on may still reach the server after requests sent
// later, so the server-side subscription of raw is put right by key's next
// pass once the last one settles. One never sent (its context ended first)
// is not counted: nothing would ever settle it.
func (c *Client) tracked(ctx context.Context, conn *connection, key, raw string) context.Context {
	return wire.WithSettled(ctx, func() func(bool) {
		conn.mu.Lock()
		conn.unsettled[raw]++
		conn.mu.Unlock()
		return func(abandoned bool) {
			conn.mu.Lock()
			if abandoned {
				conn.markPutRightLocked(key, raw)
				conn.held[raw] = true
			}
			conn.unsettled[raw]--
			mark := false
			if conn.unsettled[raw] <= 0 {
				delete(conn.unsettled, raw)
				mark = conn.held[raw]
				delete(conn.held, raw)
			}
			conn.mu.Unlock()
			if mark {
				c.mark(key)
			}
		}
	})
}

// deferUntilSettled reports whether raw has unsettled requests; if so, the
// server-side subscription is put right once they settle.
func (conn *connection) deferUntilSettled(key, raw string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.unsettled[raw] == 0 {
		return false
	}
	conn.markPutRightLocked(key, raw)
	conn.held[raw] = true
	return true
}

// markPutRightLocked has raw, a spelling of key, put right by key's next
// pass; conn.mu is held.
func (conn *connection) markPutRightLocked(key, raw string) {
	if conn.putRights[key] == nil {
		conn.putRights[key] = make(map[string]bool)
	}
	conn.putRights[key][raw] = true
}

// toPutRight returns the spellings of key to put right now: marked, and
// with no request still out.
func (conn *connection) toPutRight(key string) []string {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	var raws []string
	for raw := range conn.putRights[key] {
		if conn.unsettled[raw] == 0 {
			raws = append(raws, raw)
		} else {
			conn.held[raw] = true
		}
	}
	slices.Sort(raws)
	return raws
}

// putRightDone takes back the mark of raw, put right.
func (conn *connection) putRightDone(key, raw string) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	delete(conn.putRights[key], raw)
	if len(conn.putRights[key]) == 0 {
		delete(conn.putRights, key)
	}
}

// puttingRight reports whether a spelling of key waits to be put right.
func (conn *connection) puttingRight(key string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return len(conn.putRights[key]) > 0
}

// askStream declares that key's pass wants raw carried by conn's listen
// stream (add) or not, and returns the stream's answer: nil (heard, or
// off every stream the server holds), a refusal (once, to the pass that
// reads it), or errComing, with key recorded as waiting for the answer.
func (c *Client) askStream(conn *connection, key, raw string, add bool) error {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	ask := conn.askedLocked(key, raw, add)
	r, refused := conn.refused[raw]
	delete(conn.refused, raw)
	if conn.stopped {
		// The session is being replaced or closed: its server keeps
		// nothing, and the next session opens the key anew. Until one
		// is up (healing may give up) the ask waits, no stream goes out
		// for it, and it is refused once RequestTimeout old.
		if !add {
			return nil
		}
		if refused && r.add {
			delete(conn.awaiting, key)
			return r.err
		}
		conn.wantLocked(raw)
		conn.awaiting[key] = ask
		c.markStream(0)
		return errComing
	}
	cur := conn.listen
	if add {
		// Wanted again: whatever a pass asked before (to take it off) is
		// void, and the stream sync no longer replaces a stream for it.
		delete(conn.drop, raw)
		if cur != nil && cur.isAcked() && !cur.suspect && cur.ackSet[raw] {
			conn.wantLocked(raw)
			delete(conn.awaiting, key) // answered: the key waits on nothing
			return nil
		}
		if refused && r.add {
			delete(conn.awaiting, key)
			return r.err // taken off the wanted URIs when it was refused
		}
		conn.wantLocked(raw)
		if cur != nil && (!cur.out || (cur.inFlight() && cur.carries(raw))) {
			cur.wait(key, ask) // a stream to be sent carries every wanted URI
			return errComing
		}
	} else {
		conn.unwantLocked(raw)
		if refused && !r.add {
			return r.err
		}
		switch {
		case cur == nil:
			return nil
		case cur.isAcked() && !cur.carries(raw) && !cur.ackSet[raw]:
			delete(conn.drop, raw)
			return nil
		case !cur.out || (cur.inFlight() && !cur.carries(raw)):
			cur.wait(key, ask)
			return errComing
		}
		if cur.carries(raw) {
			conn.drop[raw] = true
		}
	}
	conn.awaiting[key] = ask
	c.markStream(0) // held back there while a burst goes on (holdLocked)
	return errComing
}

// askedLocked returns key's ask of raw, as first asked when it waits for
// the same answer already; conn.mu is held.
func (conn *connection) askedLocked(key, raw string, add bool) streamAsk {
	ask := streamAsk{raw: raw, add: add, at: time.Now()}
	prev, ok := conn.awaiting[key]
	if s := conn.listen; !ok && s != nil {
		prev, ok = s.waiting[key]
	}
	if ok && prev.raw == raw && prev.add == add {
		ask.at = prev.at
	}
	return ask
}

// wantLocked adds raw to the URIs the next stream must carry; conn.mu is
// held.
func (conn *connection) wantLocked(raw string) {
	if !conn.wanted[raw] {
		conn.want = append(conn.want, raw)
		conn.wanted[raw] = true
		conn.wantEdits++
	}
}

// setWanted adds raw to, or removes it from, the URIs the next stream must
// carry, without waiting for an answer.
func (conn *connection) setWanted(raw string, wanted bool) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if wanted {
		conn.wantLocked(raw)
	} else {
		conn.unwantLocked(raw)
	}
}

// unwantLocked takes raw off the URIs the next stream must carry; conn.mu
// is held.
func (conn *connection) unwantLocked(raw string) {
	if conn.wanted[raw] {
		conn.want = slices.DeleteFunc(conn.want, func(u string) bool { return u == raw })
		delete(conn.wanted, raw)
		conn.wantEdits++
	}
}

// wants reports whether the listen stream carries raw or the next one would.
func (conn *connection) wants(raw string) bool {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	return conn.wanted[raw] || (conn.listen != nil && conn.listen.carries(raw))
}

// hearing reports whether the server acknowledged a listen stream of conn
// naming raw (heard), or whether one that will carry it is to be sent or
// in flight (coming). A key that reads coming with wait set waits on that
// stream: its answer marks key.
func (conn *connection) hearing(key, raw string, wait bool) (heard, coming bool) {
	conn.mu.Lock()
	defer conn.mu.Unlock()
	s := conn.listen
	switch {
	case s == nil:
		return false, false
	case s.isAcked():
		return s.ackSet[raw] && !s.suspect, false
	case (!s.out && conn.wanted[raw]) || (s.inFlight() && s.carries(raw)):
		if wait {
			s.wait(key, conn.askedLocked(key, raw, true))
		}
		return false, true
	}
	return false, false
}
