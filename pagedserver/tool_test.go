package pagedserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/paging"
)

type ticket struct {
	ID        string `json:"id"`
	UpdatedAt string `json:"updated_at"`
}

func ticketPosition(x ticket) paging.Position {
	return paging.Position{Sort: []string{x.UpdatedAt}, ID: x.ID}
}

var ticketOrder = []paging.SortField{{Name: "updated_at", Desc: true}, {Name: "id", Desc: true}}

// toolServer serves search_tickets over an in-memory source.
type toolServer struct {
	src   *paging.MemorySource[ticket]
	clock *fakeClock
	srv   *server.MCPServer
	c     *client.Client
}

func newToolServer(t *testing.T, n int) *toolServer {
	ts := &toolServer{clock: &fakeClock{t: testT0}}
	var err error
	ts.src, err = paging.NewMemorySource(&paging.MemorySourceOptions[ticket]{
		ID:        func(x ticket) string { return x.ID },
		SortValue: func(x ticket, _ string) string { return x.UpdatedAt },
		Retain:    1000,
	})
	require.NoError(t, err)
	for i := range n {
		ts.src.Put(ticket{ID: fmt.Sprintf("T-%04d", i), UpdatedAt: paging.SortTime(testT0.Add(time.Duration(i/4) * time.Minute))})
	}
	p, err := paging.NewPaginator[ticket](ts.src, &paging.PaginatorOptions{Keyring: keyring(t), Clock: ts.clock.Now, CursorTTL: time.Minute})
	require.NoError(t, err)
	ts.srv = server.NewMCPServer("tickets", "1")
	opts := append([]mcp.ToolOption{mcp.WithDescription("search tickets"), mcp.WithNumber("page_size")}, ToolOptions()...)
	ts.srv.AddTool(mcp.NewTool("search_tickets", opts...), Handler(p, func(_ context.Context, req mcp.CallToolRequest) (paging.Query, error) {
		size := req.GetInt("page_size", 10)
		return paging.Query{Tool: "search_tickets", Sort: ticketOrder, PageSize: size, Consistency: paging.ConsistencySnapshot}, nil
	}))
	ts.c = startClient(t, ts.srv)
	return ts
}

func TestPagedToolWalkOverMCP(t *testing.T) {
	ts := newToolServer(t, 37)
	w, err := paging.NewWalker(Fetcher[ticket](ts.c, "search_tickets", map[string]any{"page_size": 5}), &paging.WalkOptions[ticket]{
		Position: ticketPosition, Order: ticketOrder, CheckDigest: true,
	})
	require.NoError(t, err)
	var got []string
	for x, err := range w.All(context.Background()) {
		require.NoError(t, err)
		got = append(got, x.ID)
		ts.src.Put(ticket{ID: "NEW-" + x.ID, UpdatedAt: paging.SortTime(testT0.Add(time.Hour))})
	}
	assert.Len(t, got, 37)
	assert.Len(t, w.Pages(), 8)
}

// CURSOR_EXPIRED reaches the client as a tool error with its code, and the
// walker applies the chosen recovery instead of restarting silently.
func TestPagedToolExpiredCursorOverMCP(t *testing.T) {
	for _, rec := range []paging.RecoveryMode{paging.RecoverNone, paging.RecoverIncremental} {
		t.Run(string(rec), func(t *testing.T) {
			ts := newToolServer(t, 12)
			fetch := Fetcher[ticket](ts.c, "search_tickets", map[string]any{"page_size": 5})
			calls := 0
			w, err := paging.NewWalker(func(ctx context.Context, r paging.WalkRequest) (*paging.PageEnvelope[ticket], error) {
				calls++
				env, err := fetch(ctx, r)
				if calls == 1 {
					ts.clock.Advance(time.Minute)
				}
				return env, err
			}, &paging.WalkOptions[ticket]{Position: ticketPosition, Order: ticketOrder, Recovery: rec})
			require.NoError(t, err)
			var got []string
			var walkErr error
			for x, err := range w.All(context.Background()) {
				if err != nil {
					walkErr = err
					break
				}
				got = append(got, x.ID)
			}
			if rec == paging.RecoverNone {
				require.ErrorIs(t, walkErr, paging.ErrCursorExpired)
				assert.Len(t, got, 5)
				return
			}
			require.NoError(t, walkErr)
			assert.Len(t, got, 12)
			require.Len(t, w.Recoveries(), 1)
			assert.Equal(t, paging.CursorExpired, w.Recoveries()[0].Reason)
		})
	}
}

func TestToolErrorCarriesCode(t *testing.T) {
	ts := newToolServer(t, 12)
	ctx := context.Background()
	call := func(args map[string]any) *mcp.CallToolResult {
		req := mcp.CallToolRequest{}
		req.Params.Name = "search_tickets"
		req.Params.Arguments = args
		res, err := ts.c.CallTool(ctx, req)
		require.NoError(t, err)
		return res
	}
	first := call(map[string]any{"page_size": 5})
	env, err := DecodeToolResult[ticket](first)
	require.NoError(t, err)

	cases := []struct {
		name string
		args map[string]any
		want error
		code string
	}{
		{"tampered", map[string]any{"page_size": 5, "cursor": env.Page.NextCursor + "x"}, paging.ErrCursorInvalid, "CURSOR_INVALID"},
		{"other page size", map[string]any{"page_size": 6, "cursor": env.Page.NextCursor}, paging.ErrCursorQueryMismatch, "CURSOR_QUERY_MISMATCH"},
		{"unknown version", map[string]any{"page_size": 5, "cursor": "v9.k1.x.y"}, paging.ErrCursorVersionUnsupported, "CURSOR_VERSION_UNSUPPORTED"},
		{"cursor and after", map[string]any{"page_size": 5, "cursor": env.Page.NextCursor, "after": map[string]any{"sort": []string{"x"}, "id": "y"}}, paging.ErrInvalidPageRequest, CodeInvalidPageRequest},
		{"after of wrong type", map[string]any{"page_size": 5, "after": 7}, paging.ErrInvalidPageRequest, CodeInvalidPageRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := call(tc.args)
			require.True(t, res.IsError)
			var body ToolErrorBody
			require.NoError(t, json.Unmarshal(res.RawStructuredContent, &body))
			assert.Equal(t, tc.code, body.Error.Code)
			_, err := DecodeToolResult[ticket](res)
			require.ErrorIs(t, err, tc.want)
		})
	}
	t.Run("idempotency conflict", func(t *testing.T) {
		call(map[string]any{"page_size": 5, "idempotency_key": "k"})
		res := call(map[string]any{"page_size": 5, "idempotency_key": "k", "cursor": env.Page.NextCursor})
		_, err := DecodeToolResult[ticket](res)
		require.ErrorIs(t, err, paging.ErrIdempotencyConflict)
	})
	t.Run("plain tool error", func(t *testing.T) {
		_, err := DecodeToolResult[ticket](mcp.NewToolResultError("boom"))
		var te *ToolCallError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, "boom", te.Text)
	})
	t.Run("cursor too long", func(t *testing.T) {
		res := ToolError(&paging.CursorError{Code: paging.CursorTooLong, Detail: "position of 70000 bytes, more than MaxCursorPosition (65536)"})
		require.NotNil(t, res)
		_, err := DecodeToolResult[ticket](res)
		require.ErrorIs(t, err, paging.ErrCursorTooLong)
	})
	t.Run("not a paging error", func(t *testing.T) {
		assert.Nil(t, ToolError(errors.New("disk on fire")))
	})
}

func TestToolResultCarriesEnvelope(t *testing.T) {
	env := &paging.PageEnvelope[ticket]{
		Items:       []ticket{{ID: "T-1", UpdatedAt: "2026"}},
		Page:        paging.PageInfo{SnapshotID: "s"},
		Consistency: paging.ConsistencySnapshot,
		Fingerprint: paging.PageFingerprint{SnapshotID: "s", FirstID: "T-1", LastID: "T-1", Count: 1},
	}
	res, err := ToolResult(env)
	require.NoError(t, err)
	text, ok := mcp.AsTextContent(res.Content[0])
	require.True(t, ok)
	assert.JSONEq(t, string(res.RawStructuredContent), text.Text)
	// Through the wire form and back, as a client sees it.
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var back mcp.CallToolResult
	require.NoError(t, json.Unmarshal(b, &back))
	got, err := DecodeToolResult[ticket](&back)
	require.NoError(t, err)
	assert.Equal(t, env, got)
}
