// Package mcpsync keeps a provably consistent local copy of MCP resources:
// protocol events become versions that only move forward, each decision leaves
// a receipt, and the copy says how fresh and how complete it is.
//
// The Engine holds the copy and is independent of the wire. Its heart is the
// fence (AcceptResourceVersion): the one place that accepts a read result,
// raises a watermark, stores a version and appends to the invalidation
// outbox. Everything else refuses with a receipt. The Client drives an Engine
// over an mcp-go connection: subscriptions in both protocol eras, coalesced
// reads, revalidation, reconnects and discovery scans (Client.Scan, Catalog).
//
// # Protocol facts the code relies on
//
// Measured with mcp-go v1.2.1 and the official Go SDK v1.8.0; each is
// handled where the code says so.
//
//   - notifications/resources/updated carries a URI only, may be lost
//     (mcp-go drops notifications when a session buffer is full), duplicated,
//     reordered or arrive from a session that is gone: notifications only
//     trigger fenced reads, and revalidation reads bound the staleness of
//     lost ones.
//   - mcp-go runs notification handlers on the transport's read loop, and
//     its in-process transport hands params over as the server's Go values,
//     not decoded JSON: the Client only queues them, and reads them through
//     JSON.
//   - mcp-go flattens JSON-RPC errors of unknown codes into plain errors;
//     internal/wire keeps the code for the methods the sync depends on.
//   - Resource-not-found is -32002 before 2026-07-28 and -32602 from then
//     on; go-sdk v1.7.0 and later send -32602 on every revision. Both count,
//     for resources/read only, and a not-found only makes a subscription
//     TOMBSTONE_PENDING until list reconciliation confirms it.
//   - From 2026-07-28 "" is a valid cursor and only an absent nextCursor ends
//     a listing. mcp-go's typed results cannot tell the two apart and its
//     requests omit an empty cursor, so pages are read from the raw result
//     and a server that hands out "" is caught by cycle detection.
//   - 2026-07-28 replaces resources/subscribe with one subscriptions/listen
//     stream per session; a URI is subscribed once the server acknowledges
//     it, and a stream the server ends takes every subscription it carried
//     with it (they are re-established as new generations and re-read).
//   - Before 2026-07-28, notifications over streamable HTTP travel on the
//     standalone GET stream only (mcp-go: continuous listening), and a
//     notification sent before that stream is up is lost.
//   - resources/list pages share no snapshot and list_changed is only a
//     SHOULD: without the snapshot extension no scan proves completeness.
package mcpsync
