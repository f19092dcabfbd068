// Package mcpsync keeps a provably consistent local copy of MCP resources:
// protocol events become versions that only move forward, each decision leaves
// a receipt, and the copy says how fresh and how complete it is.
//
// The heart of the package is the fence (see AcceptResourceVersion): the one
// place that accepts a read result, raises a watermark, stores a version and
// appends to the invalidation outbox. Everything else refuses with a receipt.
package mcpsync
