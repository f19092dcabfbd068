// Command pagedtool runs an mcp-go server with a paged search_tickets tool
// and snapshot-bound resource lists, and walks both with a client over the
// in-process transport: pages follow signed cursors, writes between pages
// neither hide nor repeat tickets, an expired cursor is recovered the way
// the caller chose, and every resources/list page names one snapshot.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/pagedserver"
	"github.com/mcpsync/mcpsync/paging"
)

type ticket struct {
	ID        string `json:"id"`
	UpdatedAt string `json:"updated_at"`
	Title     string `json:"title"`
}

var order = []paging.SortField{{Name: "updated_at", Desc: true}, {Name: "id", Desc: true}}

// clock is the program's time: fixed, moved by hand, so runs are identical.
type clock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	now := &clock{t: time.Date(2026, 8, 25, 4, 0, 0, 0, time.UTC)}
	// A real server loads its secret from its key store; rotation adds the
	// new key as current and keeps the old one as previous.
	keys, err := paging.NewKeyring(paging.CursorKey{ID: "2026-08", Secret: []byte("example secret, 32 bytes or more!")})
	if err != nil {
		return err
	}

	// The data: 12 tickets, three per minute, so equal timestamps straddle
	// the page boundaries.
	src, err := paging.NewMemorySource(&paging.MemorySourceOptions[ticket]{
		ID:        func(t ticket) string { return t.ID },
		SortValue: func(t ticket, _ string) string { return t.UpdatedAt },
		Retain:    100,
	})
	if err != nil {
		return err
	}
	at := func(m int) string { return paging.SortTime(now.Now().Add(time.Duration(m) * time.Minute)) }
	for i := range 12 {
		src.Put(ticket{ID: fmt.Sprintf("T-%04d", 1000+i), UpdatedAt: at(i / 3), Title: fmt.Sprintf("ticket %d", i)})
	}
	pages, err := paging.NewPaginator[ticket](src, &paging.PaginatorOptions{Keyring: keys, CursorTTL: 10 * time.Minute, Clock: now.Now})
	if err != nil {
		return err
	}

	lists, err := pagedserver.NewSnapshotLists(&pagedserver.SnapshotListOptions{Keyring: keys, PageSize: 4, Clock: now.Now})
	if err != nil {
		return err
	}
	srv := server.NewMCPServer("tickets", "1.0.0", append(lists.ServerOptions(), server.WithResourceCapabilities(false, true))...)
	tool := mcp.NewTool("search_tickets", append([]mcp.ToolOption{
		mcp.WithDescription("Tickets, newest first, in pages."),
		mcp.WithString("consistency", mcp.Enum("snapshot", "incremental")),
	}, pagedserver.ToolOptions()...)...)
	srv.AddTool(tool, pagedserver.Handler(pages, func(_ context.Context, req mcp.CallToolRequest) (paging.Query, error) {
		return paging.Query{
			Tool: "search_tickets", Sort: order, PageSize: 5,
			Consistency: paging.Consistency(req.GetString("consistency", "snapshot")),
		}, nil
	}))
	for i := range 9 {
		uri := fmt.Sprintf("tickets://export/%02d", i)
		srv.AddResource(mcp.NewResource(uri, fmt.Sprintf("export-%d", i/3)), readText(uri))
	}

	c, err := client.NewInProcessClient(srv)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		return err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "pagedtool-example", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return err
	}

	fmt.Println("== snapshot walk of search_tickets, with a new ticket and a delete between pages")
	fetch := pagedserver.Fetcher[ticket](c, "search_tickets", map[string]any{"consistency": "snapshot"})
	n := 0
	w, err := paging.NewWalker(func(ctx context.Context, r paging.WalkRequest) (*paging.PageEnvelope[ticket], error) {
		env, err := fetch(ctx, r)
		if err == nil {
			fp := env.Fingerprint
			fmt.Printf("page: %d items %s..%s has_more=%t\n", fp.Count, fp.FirstID, fp.LastID, env.Page.HasMore)
			n++
			src.Put(ticket{ID: fmt.Sprintf("T-NEW-%d", n), UpdatedAt: at(60), Title: "new on top"})
			src.Delete(fmt.Sprintf("T-%04d", 1011-n))
		}
		return env, err
	}, &paging.WalkOptions[ticket]{Position: position, Order: order, CheckDigest: true})
	if err != nil {
		return err
	}
	got, err := drain(ctx, w)
	if err != nil {
		return err
	}
	fmt.Printf("read %d tickets, the 12 of the snapshot, none twice: %t\n", len(got), unique(got) && len(got) == 12)

	fmt.Println("== an expired cursor: the caller chose incremental recovery")
	expireOnce := true
	w, err = paging.NewWalker(func(ctx context.Context, r paging.WalkRequest) (*paging.PageEnvelope[ticket], error) {
		env, err := fetch(ctx, r)
		var ce *paging.CursorError
		if errors.As(err, &ce) {
			fmt.Printf("server refused the cursor: %s\n", ce.Code)
		}
		if err == nil && expireOnce {
			expireOnce = false
			now.Advance(11 * time.Minute) // the agent paused longer than the cursor lives
		}
		return env, err
	}, &paging.WalkOptions[ticket]{
		Position: position, Order: order, Recovery: paging.RecoverIncremental,
		OnRecovery: func(r paging.CursorRecovery) {
			fmt.Printf("recovery %s: reason %s, after %s, %d items kept\n", r.Mode, r.Reason, r.Boundary.ID, r.ItemsBefore)
		},
	})
	if err != nil {
		return err
	}
	got, err = drain(ctx, w)
	if err != nil {
		return err
	}
	fmt.Printf("read %d tickets, none twice: %t\n", len(got), unique(got))

	fmt.Println("== a retried request with the same idempotency key")
	call := func() (*paging.PageEnvelope[ticket], error) {
		return fetch(ctx, paging.WalkRequest{IdempotencyKey: "retry-1"})
	}
	a, err := call()
	if err != nil {
		return err
	}
	src.Put(ticket{ID: "T-NEWER", UpdatedAt: at(120), Title: "arrives before the retry"})
	b, err := call()
	if err != nil {
		return err
	}
	fmt.Printf("same fingerprint: %t (first id %s)\n", a.Fingerprint == b.Fingerprint, b.Fingerprint.FirstID)

	fmt.Println("== resources/list: one snapshot id on every page while resources change")
	req := mcp.ListResourcesRequest{}
	ids := map[string]bool{}
	count := 0
	for page := 1; ; page++ {
		res, err := c.ListResourcesByPage(ctx, req)
		if err != nil {
			return err
		}
		ids[fmt.Sprint(res.Meta.AdditionalFields[mcpsync.SnapshotIDMetaKey])] = true
		count += len(res.Resources)
		fmt.Printf("page %d: %d resources\n", page, len(res.Resources))
		srv.AddResource(mcp.NewResource(fmt.Sprintf("tickets://export/new-%d", page), "export-0"), readText("new"))
		srv.DeleteResources(fmt.Sprintf("tickets://export/%02d", 9-page))
		if res.NextCursor == "" {
			break
		}
		req.Params.Cursor = res.NextCursor
	}
	fmt.Printf("%d resources, %d snapshot id(s) across pages\n", count, len(ids))
	return nil
}

func position(t ticket) paging.Position {
	return paging.Position{Sort: []string{t.UpdatedAt}, ID: t.ID}
}

func drain(ctx context.Context, w *paging.Walker[ticket]) ([]string, error) {
	var got []string
	for t, err := range w.All(ctx) {
		if err != nil {
			return got, err
		}
		got = append(got, t.ID)
	}
	return got, nil
}

func unique(ids []string) bool {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return false
		}
		seen[id] = true
	}
	return true
}

func readText(uri string) server.ResourceHandlerFunc {
	return func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: uri}}, nil
	}
}
