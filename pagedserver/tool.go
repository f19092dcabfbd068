package pagedserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync/paging"
)

// Names of the paging arguments of a paged tool, next to the tool's own.
const (
	ArgCursor         = "cursor"
	ArgAfter          = "after"
	ArgIdempotencyKey = "idempotency_key"
)

// Codes of tool errors that are not cursor errors.
const (
	CodeInvalidPageRequest  = "INVALID_PAGE_REQUEST"
	CodeIdempotencyConflict = "IDEMPOTENCY_CONFLICT"
)

// PageArguments are the paging arguments of one tools/call.
type PageArguments struct {
	Cursor         string           `json:"cursor,omitempty"`
	After          *paging.Position `json:"after,omitempty"`
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
}

// PageArgumentsOf reads the paging arguments of req. Arguments of the wrong
// type are an error matching paging.ErrInvalidPageRequest.
func PageArgumentsOf(req mcp.CallToolRequest) (PageArguments, error) {
	var a PageArguments
	args := req.GetArguments()
	if args == nil {
		return a, nil
	}
	b, err := json.Marshal(map[string]any{
		ArgCursor: args[ArgCursor], ArgAfter: args[ArgAfter], ArgIdempotencyKey: args[ArgIdempotencyKey],
	})
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		return PageArguments{}, fmt.Errorf("%w: paging arguments: %v", paging.ErrInvalidPageRequest, err)
	}
	return a, nil
}

// Request is the page request of a for query q.
func (a PageArguments) Request(q paging.Query) paging.PageRequest {
	return paging.PageRequest{Query: q, Cursor: a.Cursor, After: a.After, IdempotencyKey: a.IdempotencyKey}
}

// ToolOptions declares the paging arguments in a tool's input schema.
func ToolOptions() []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithString(ArgCursor, mcp.Description("next_cursor of the previous page; omit for the first page")),
		mcp.WithObject(ArgAfter, mcp.Description("start after this confirmed position (sort values and id) instead of a cursor, to resume after an expired cursor")),
		mcp.WithString(ArgIdempotencyKey, mcp.Description("the same key on a retry returns the same page")),
	}
}

// ToolResult returns env as the structured content of a tool result, with
// the same JSON as text for clients that read only text.
func ToolResult[T any](env *paging.PageEnvelope[T]) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		Content:              []mcp.Content{mcp.NewTextContent(string(b))},
		StructuredContent:    env,
		RawStructuredContent: b,
	}, nil
}

// ToolErrorBody is the structured content of a paging tool error.
type ToolErrorBody struct {
	Error ToolErrorDetail `json:"error"`
}

// ToolErrorDetail names the failure by code.
type ToolErrorDetail struct {
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

// ToolError returns the tool error result for a paging failure: a cursor
// error keeps its code (CURSOR_EXPIRED, ...), an invalid request or reused
// idempotency key gets its own code. It returns nil for any other error,
// which the handler should return as a Go error instead.
func ToolError(err error) *mcp.CallToolResult {
	var d ToolErrorDetail
	var ce *paging.CursorError
	switch {
	case errors.As(err, &ce):
		d = ToolErrorDetail{Code: string(ce.Code), Detail: ce.Detail}
	case errors.Is(err, paging.ErrInvalidPageRequest):
		d = ToolErrorDetail{Code: CodeInvalidPageRequest, Detail: err.Error()}
	case errors.Is(err, paging.ErrIdempotencyConflict):
		d = ToolErrorDetail{Code: CodeIdempotencyConflict, Detail: err.Error()}
	default:
		return nil
	}
	text := d.Code
	if d.Detail != "" {
		text += ": " + d.Detail
	}
	body := ToolErrorBody{Error: d}
	raw, _ := json.Marshal(body) // cannot fail: strings only
	return &mcp.CallToolResult{
		Content:              []mcp.Content{mcp.NewTextContent(text)},
		StructuredContent:    body,
		RawStructuredContent: raw,
		IsError:              true,
	}
}

// QueryFunc builds the query of one tools/call from the tool's own arguments.
type QueryFunc func(ctx context.Context, req mcp.CallToolRequest) (paging.Query, error)

// Handler serves the pages of p as a tool. query builds the query from the
// call; paging arguments are read with PageArgumentsOf.
func Handler[T any](p *paging.Paginator[T], query QueryFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		q, err := query(ctx, req)
		if err != nil {
			if res := ToolError(err); res != nil {
				return res, nil
			}
			return nil, err
		}
		args, err := PageArgumentsOf(req)
		if err != nil {
			return ToolError(err), nil
		}
		env, err := p.Page(ctx, args.Request(q))
		if err != nil {
			if res := ToolError(err); res != nil {
				return res, nil
			}
			return nil, err
		}
		return ToolResult(env)
	}
}

// ToolCallError is a tool error result without a paging code.
type ToolCallError struct {
	Text string
}

func (e *ToolCallError) Error() string { return "pagedserver: tool error: " + e.Text }

// DecodeToolResult reads the page envelope from a tool result. A tool error
// with a cursor code becomes the matching *paging.CursorError, so that a
// Walker can recover from CURSOR_EXPIRED; the other paging codes match
// paging.ErrInvalidPageRequest or paging.ErrIdempotencyConflict; any other
// tool error is a *ToolCallError.
func DecodeToolResult[T any](res *mcp.CallToolResult) (*paging.PageEnvelope[T], error) {
	if res == nil {
		return nil, errors.New("pagedserver: no tool result")
	}
	raw := []byte(res.RawStructuredContent)
	if len(raw) == 0 && res.StructuredContent != nil {
		var err error
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return nil, err
		}
	}
	if res.IsError {
		var body ToolErrorBody
		if len(raw) > 0 && json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
			switch code := paging.CursorErrorCode(body.Error.Code); code {
			case paging.CursorInvalid, paging.CursorExpired, paging.CursorQueryMismatch, paging.CursorVersionUnsupported, paging.CursorTooLong:
				return nil, &paging.CursorError{Code: code, Detail: body.Error.Detail}
			}
			switch body.Error.Code {
			case CodeInvalidPageRequest:
				return nil, fmt.Errorf("%w: %s", paging.ErrInvalidPageRequest, body.Error.Detail)
			case CodeIdempotencyConflict:
				return nil, fmt.Errorf("%w: %s", paging.ErrIdempotencyConflict, body.Error.Detail)
			}
		}
		return nil, &ToolCallError{Text: resultText(res)}
	}
	if len(raw) == 0 {
		return nil, errors.New("pagedserver: tool result without structured content")
	}
	var env paging.PageEnvelope[T]
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("pagedserver: page envelope: %w", err)
	}
	return &env, nil
}

func resultText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if t, ok := mcp.AsTextContent(c); ok {
			return t.Text
		}
	}
	return ""
}

// Fetcher returns the paging.FetchPage of a paged tool called through c with
// the tool's own arguments args; the walker's paging arguments are added to
// a copy of args on every call.
func Fetcher[T any](c client.MCPClient, tool string, args map[string]any) paging.FetchPage[T] {
	return func(ctx context.Context, wr paging.WalkRequest) (*paging.PageEnvelope[T], error) {
		a := make(map[string]any, len(args)+3)
		for k, v := range args {
			a[k] = v
		}
		if wr.Cursor != "" {
			a[ArgCursor] = wr.Cursor
		}
		if wr.After != nil {
			a[ArgAfter] = wr.After
		}
		if wr.IdempotencyKey != "" {
			a[ArgIdempotencyKey] = wr.IdempotencyKey
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = tool
		req.Params.Arguments = a
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return nil, err
		}
		return DecodeToolResult[T](res)
	}
}
