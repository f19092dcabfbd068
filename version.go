package mcpsync

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"
	"time"
	"unsafe"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpsync/mcpsync/internal/uri"
	"github.com/mcpsync/mcpsync/ledger"
)

// ReadResult is the answer to one resources/read, prepared for the fence:
// contents are decoded, their URIs normalized and the digest computed once,
// outside every lock. Build one with NewReadResult, ReadResultFromMCP or
// NotFoundResult; the zero value is an empty read, which the fence refuses.
type ReadResult struct {
	notFound     bool
	contents     []Content
	keys         []string // normalized URI of each content item
	digest       string
	bytes        int64
	err          error // why the contents cannot become a version
	lastModified string
}

// NotFoundResult is a read the server answered with resource-not-found.
func NotFoundResult() ReadResult { return ReadResult{notFound: true} }

// WithLastModified returns r carrying the server's lastModified hint.
func (r ReadResult) WithLastModified(hint string) ReadResult {
	r.lastModified = hint
	return r
}

// NotFound reports whether the read said the resource does not exist.
func (r ReadResult) NotFound() bool { return r.notFound }

// Digest returns the content digest, or "" for a not-found or invalid read.
func (r ReadResult) Digest() string { return r.digest }

// Err returns why the contents cannot become a version, or nil.
func (r ReadResult) Err() error { return r.err }

// Contents returns the decoded contents; callers must not modify them.
func (r ReadResult) Contents() []Content { return r.contents }

// NewReadResult prepares decoded contents for the fence.
//
// The content digest is "sha256:" followed by the lower-case hex SHA-256 of
// this canonical form, all integers unsigned 64-bit big-endian:
//
//	"mcpsync.content.v1" 0x00  count
//	then for each item, in the order the server sent them:
//	  kind ('T' text, 'B' blob)  len(uri) uri  len(mime) mime  len(data) data
//
// where uri is the item's normalized URI, data is the UTF-8 text or the
// decoded blob bytes. Item order counts: a reordering is reported as a change
// rather than hidden. Nothing else (_meta, lastModified, annotations) enters
// the digest, so metadata churn never looks like new content.
func NewReadResult(contents []Content) ReadResult {
	r := ReadResult{contents: contents}
	if len(contents) == 0 {
		r.err = &RefusalError{Reason: ReasonEmptyContents, Detail: "read returned no contents"}
		return r
	}
	r.keys = make([]string, len(contents))
	w := hashWriters.Get().(*hashWriter)
	defer hashWriters.Put(w)
	w.h.Reset()
	w.raw("mcpsync.content.v1\x00")
	w.len(len(contents))
	for i, c := range contents {
		key, err := uri.Normalize(c.URI)
		if err != nil {
			r.err = &RefusalError{Reason: ReasonInvalidContent, Detail: fmt.Sprintf("content %d: uri %q", i, c.URI), Err: err}
			return r
		}
		r.keys[i] = key
		kind := "T"
		if c.Binary {
			kind = "B"
		}
		w.raw(kind)
		w.str(key)
		w.str(c.MIMEType)
		if c.Binary {
			w.bytes(c.Data)
			r.bytes += int64(len(c.Data))
		} else {
			w.str(c.Text)
			r.bytes += int64(len(c.Text))
		}
	}
	r.digest = digestString(w.h.Sum(w.n[:0]))
	return r
}

// hashWriters keep SHA-256 states for NewReadResult, which every read
// prepares.
var hashWriters = sync.Pool{New: func() any { return &hashWriter{h: sha256.New()} }}

// digestString spells a SHA-256 sum as a digest: "sha256:" and its
// lower-case hex.
func digestString(sum []byte) string {
	const prefix = "sha256:"
	var b [len(prefix) + 2*sha256.Size]byte
	copy(b[:], prefix)
	hex.Encode(b[len(prefix):], sum[:sha256.Size])
	return string(b[:])
}

// hashWriter writes the length-prefixed fields of the canonical form.
type hashWriter struct {
	h hash.Hash
	n [sha256.Size]byte // a length's 8 bytes; then the sum
}

func (w *hashWriter) len(l int) {
	binary.BigEndian.PutUint64(w.n[:8], uint64(l))
	w.h.Write(w.n[:8])
}

func (w *hashWriter) str(s string) {
	w.len(len(s))
	w.raw(s)
}

// raw hashes the bytes of s without copying them: a hash.Hash, as an
// io.Writer, neither modifies nor retains what it is given, and a 1 MiB
// text would otherwise cost a 1 MiB copy.
func (w *hashWriter) raw(s string) {
	w.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func (w *hashWriter) bytes(b []byte) {
	w.len(len(b))
	w.h.Write(b)
}

// ReadResultFromMCP decodes an mcp-go read result: blobs are base64-decoded
// (standard alphabet, padded, as the MCP schema says). A blob that does not
// decode, or a content item of a type mcp-go does not define, makes the
// result invalid; the fence then refuses it with ReasonInvalidContent.
func ReadResultFromMCP(res *mcp.ReadResourceResult) ReadResult {
	if res == nil {
		return NewReadResult(nil)
	}
	contents := make([]Content, 0, len(res.Contents))
	for i, item := range res.Contents {
		c, err := contentFromMCP(item)
		if err != nil {
			return ReadResult{contents: contents, err: &RefusalError{Reason: ReasonInvalidContent, Detail: fmt.Sprintf("content %d", i), Err: err}}
		}
		contents = append(contents, c)
	}
	return NewReadResult(contents)
}

func contentFromMCP(item mcp.ResourceContents) (Content, error) {
	switch c := item.(type) {
	case mcp.TextResourceContents:
		return Content{URI: c.URI, MIMEType: c.MIMEType, Text: c.Text}, nil
	case *mcp.TextResourceContents:
		return Content{URI: c.URI, MIMEType: c.MIMEType, Text: c.Text}, nil
	case mcp.BlobResourceContents:
		return blobContent(c.URI, c.MIMEType, c.Blob)
	case *mcp.BlobResourceContents:
		return blobContent(c.URI, c.MIMEType, c.Blob)
	default:
		return Content{}, fmt.Errorf("unknown content type %T", item)
	}
}

func blobContent(u, mime, blob string) (Content, error) {
	data, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return Content{}, fmt.Errorf("blob is not base64: %w", err)
	}
	if data == nil {
		data = []byte{}
	}
	return Content{URI: u, MIMEType: mime, Data: data, Binary: true}, nil
}

// Decision is what the fence did with a read result.
type Decision string

// Decisions of version receipts.
const (
	// DecisionAccepted: a new version is visible and the outbox has an entry.
	DecisionAccepted Decision = "ACCEPTED"
	// DecisionUnchanged: the digest equals the current version's; the
	// watermark rose, no outbox entry was written.
	DecisionUnchanged Decision = "UNCHANGED"
	// DecisionTombstonePending: the read said not found; list reconciliation
	// decides between TOMBSTONED and ACTIVE.
	DecisionTombstonePending Decision = "TOMBSTONE_PENDING"
	// DecisionTombstoned: the read said not found of a resource whose
	// tombstone was already confirmed; it stands, with no new outbox entry.
	DecisionTombstoned Decision = "TOMBSTONED"
	// DecisionQuarantined: the content guard refused the content; it is kept
	// out of sight and the previous version is no longer served.
	DecisionQuarantined Decision = "QUARANTINED"
)

// VersionReceipt records a read result that passed the fence.
type VersionReceipt struct {
	Schema         string          `json:"schema"`
	Decision       Decision        `json:"decision"`
	Version        ResourceVersion `json:"version"`
	PreviousDigest string          `json:"previousDigest,omitempty"`
	RequestID      uint64          `json:"requestId"`
	Trigger        ledger.Trigger  `json:"trigger"`
	OutboxSeq      uint64          `json:"outboxSeq,omitempty"`
	GuardReason    string          `json:"guardReason,omitempty"`
	At             time.Time       `json:"at"`
}

// StaleReceipt records a read result the fence refused. Nothing else changed.
type StaleReceipt struct {
	Schema                 string                   `json:"schema"`
	Reason                 StaleReason              `json:"reason"`
	URI                    string                   `json:"uri"`
	SessionGeneration      uint64                   `json:"sessionGeneration"`
	SubscriptionGeneration uint64                   `json:"subscriptionGeneration"`
	ReadOrdinal            uint64                   `json:"readOrdinal"`
	RequestID              uint64                   `json:"requestId"`
	Trigger                ledger.Trigger           `json:"trigger"`
	NotFound               bool                     `json:"notFound,omitempty"`
	State                  ledger.SubscriptionState `json:"state"`
	Watermark              uint64                   `json:"watermark"`
	CloseOrdinal           uint64                   `json:"closeOrdinal,omitempty"`
	Detail                 string                   `json:"detail,omitempty"`
	At                     time.Time                `json:"at"`
}
