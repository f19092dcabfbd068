// Package mcpsynctest provides an MCP server with resources a test can change between list pages and a client transport that injects protocol faults deterministically under a seed, in the manner of net/http/httptest.
package mcpsynctest
