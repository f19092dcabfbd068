package mcpsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/wire"
)

// Listing over the Client's session: Scan hands discovery (discovery.go)
// the current session's pages, and Reconcile hands a catalog's verdicts to
// the engine under the client's deletion policy.

// Scan lists kind completely over the current session and says how far the
// result may be trusted.
//
// Where the server negotiated the snapshot extension, one clean pass whose
// pages all carry the same snapshot id gives SNAPSHOT_PROVEN. Otherwise an
// attempt is two consecutive passes A and B; when both are clean, their set
// digests are equal and no list_changed of kind arrived from the start of A
// to the end of B, the catalog is SNAPSHOT_UNPROVEN. Any other attempt
// (list_changed, differing sets, a cursor cycle, an invalid cursor) is
// started over after a jittered exponential backoff, up to
// ScannerOptions.MaxAttempts.
//
// A failed page, the page cap, exhausted attempts, Limits.ScanTimeout and a
// cancelled ctx end the scan with a *ScanError and an UNRECONCILED catalog
// that lists nothing but keeps the receipts. Cancelling ctx stops the wait or
// the page in progress.
//
// A server that declares no resources capability has no resources or
// templates to list: Scan of those kinds returns ErrNoResources and an
// empty catalog, without asking.
func (c *Client) Scan(ctx context.Context, kind ListKind) (Catalog, error) {
	conn, err := c.current()
	if err != nil {
		return Catalog{}, err
	}
	if (kind == KindResources || kind == KindResourceTemplates) && !conn.caps.Resources {
		return Catalog{}, fmt.Errorf("%w (%s %s)", ErrNoResources, conn.caps.Server.Name, conn.caps.Server.Version)
	}
	timeout := c.opts.Limits.ScanTimeout
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		&LimitError{Limit: LimitScanDuration, Max: timeout.Milliseconds(), Observed: timeout.Milliseconds()})
	defer cancel()
	cat, err := c.scanner.Scan(ctx, kind, conn.era, conn.caps, c.pages(conn, kind),
		func() uint64 { return c.ListChanged(kind) })
	if se, ok := errors.AsType[*ScanError](err); ok && errors.Is(se.Err, context.DeadlineExceeded) {
		if cause := context.Cause(ctx); errors.Is(cause, ErrScanTimeout) {
			se.Err = cause // name the limit, not only the deadline
		}
	}
	if err != nil && kind == KindResources {
		// A listing that failed deletes nothing (deletion.go).
		if ferr := c.engine.scanFailed(); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	return cat, err
}

// pages fetches list pages of kind on conn. The cursor goes out untouched;
// the page is read from the raw result, since mcp-go's typed result cannot
// tell an absent nextCursor from "" (see wire.WithRawResult). mcp-go also
// omits an empty cursor from its request (omitempty), so a 2026-07-28 server
// that hands out "" gets its first page again, which the scanner's cycle
// detection reports rather than a short listing.
func (c *Client) pages(conn *connection, kind ListKind) pageFunc {
	return func(ctx context.Context, cursor *string) (listPage, error) {
		ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
		var raw json.RawMessage
		ctx = wire.WithRawResult(ctx, &raw)
		var paged mcp.PaginatedRequest
		if cursor != nil {
			paged.Params.Cursor = mcp.Cursor(*cursor)
		}
		var err error
		switch kind {
		case KindResources:
			_, err = conn.mc.ListResourcesByPage(ctx, mcp.ListResourcesRequest{PaginatedRequest: paged})
		case KindResourceTemplates:
			_, err = conn.mc.ListResourceTemplatesByPage(ctx, mcp.ListResourceTemplatesRequest{PaginatedRequest: paged})
		case KindTools:
			_, err = conn.mc.ListToolsByPage(ctx, mcp.ListToolsRequest{PaginatedRequest: paged})
		case KindPrompts:
			_, err = conn.mc.ListPromptsByPage(ctx, mcp.ListPromptsRequest{PaginatedRequest: paged})
		default:
			return listPage{}, fmt.Errorf("mcpsync: unknown list kind %q", kind)
		}
		if err != nil {
			return listPage{}, err
		}
		return pageFromRaw(kind, raw)
	}
}

// listResult is the part of a list result discovery reads.
type listResult struct {
	Resources []struct {
		URI      string `json:"uri"`
		Name     string `json:"name"`
		MIMEType string `json:"mimeType"`
	} `json:"resources"`
	ResourceTemplates []struct {
		URITemplate string `json:"uriTemplate"`
		Name        string `json:"name"`
		MIMEType    string `json:"mimeType"`
	} `json:"resourceTemplates"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Prompts []struct {
		Name string `json:"name"`
	} `json:"prompts"`
	NextCursor *string        `json:"nextCursor"`
	Meta       map[string]any `json:"_meta"`
}

func pageFromRaw(kind ListKind, raw json.RawMessage) (listPage, error) {
	var r listResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return listPage{}, errorf("%s result: %w", kind.Method(), err)
	}
	p := listPage{NextCursor: r.NextCursor}
	if id, ok := r.Meta[SnapshotIDMetaKey].(string); ok {
		p.SnapshotID = id
	}
	switch kind {
	case KindResources:
		for _, x := range r.Resources {
			p.Items = append(p.Items, Descriptor{URI: x.URI, Name: x.Name, MIMEType: x.MIMEType})
		}
	case KindResourceTemplates:
		for _, x := range r.ResourceTemplates {
			p.Items = append(p.Items, Descriptor{URITemplate: x.URITemplate, Name: x.Name, MIMEType: x.MIMEType})
		}
	case KindTools:
		for _, x := range r.Tools {
			p.Items = append(p.Items, Descriptor{Name: x.Name})
		}
	case KindPrompts:
		for _, x := range r.Prompts {
			p.Items = append(p.Items, Descriptor{Name: x.Name})
		}
	}
	return p, nil
}

// Reconcile hands a resources catalog's verdicts to the engine under the
// client's deletion policy (Catalog.Reconcile) and sends the reads it
// asks for.
func (c *Client) Reconcile(cat Catalog) (Reconciliation, error) {
	rec, err := cat.Reconcile(c.engine, &ReconcileOptions{Deletion: c.opts.Deletion, UnlistedFor: c.opts.UnlistedFor})
	for _, t := range rec.Tickets {
		c.dispatch(t)
	}
	return rec, err
}
