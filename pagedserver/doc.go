// Package pagedserver adds signed, snapshot-bound pagination to mcp-go servers.
//
// It has two halves. For tools that return paged results, Handler serves the
// page envelope of a paging.Paginator as structured content and turns
// cursor failures into tool errors that carry their code; DecodeToolResult and
// Fetcher undo that on the client, so a paging.Walker can follow the pages
// of a tool. For resources/list and resources/templates/list, SnapshotLists
// replaces mcp-go's own pagination with signed keyset cursors bound to one
// snapshot of the catalog per walk, advertised by the mcpsync snapshot
// extension.
package pagedserver
