// Package paging pages tool results by keyset with signed, expiring cursors: a Paginator serves pages of a KeysetSource, a Walker follows them on the client.
package paging
