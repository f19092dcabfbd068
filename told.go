package mcpsync

import (
	"context"
	"slices"

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
