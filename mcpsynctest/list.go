package mcpsynctest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mark3labs/mcp-go/mcp"
)

// The kit paginates both lists itself. mcp-go's own pagination resumes after
// the last name with a strict ">" on the name alone, so items sharing a name
// across a page boundary are skipped, and it emits a nextCursor whenever a
// page is full, so an exact multiple of the page size ends in an empty page.
// The kit orders by creation sequence, a key no two items share, and offers a
// next cursor only when items remain.

// listItem is one entry of either list with its creation sequence.
type listItem struct {
	seq      uint64
	resource mcp.Resource
	template mcp.ResourceTemplate
}

// cursorState is what an opaque cursor encodes.
type cursorState struct {
	Kind    string `json:"k"`
	Page    int    `json:"p"`           // pages already served in this walk
	After   uint64 `json:"a,omitempty"` // live walk: last creation sequence served
	Version uint64 `json:"v,omitempty"` // snapshot walk: the set version of the walk
	Offset  int    `json:"o,omitempty"` // snapshot walk: position in that set
}

func encodeCursor(c cursorState) mcp.Cursor {
	b, _ := json.Marshal(c)
	return mcp.Cursor(base64.RawURLEncoding.EncodeToString(b))
}

func decodeCursor(kind string, cur mcp.Cursor) (cursorState, bool) {
	if cur == "" {
		return cursorState{Kind: kind}, true
	}
	b, err := base64.RawURLEncoding.DecodeString(string(cur))
	if err != nil {
		return cursorState{}, false
	}
	var c cursorState
	if json.Unmarshal(b, &c) != nil || c.Kind != kind || c.Page < 1 {
		return cursorState{}, false
	}
	return c, true
}

// invalidCursor is not standard base64, so mcp-go's own decoding, which runs
// between the hooks, rejects it with -32602: the hooks cannot fail a request.
const invalidCursor = "%invalid%"

// beforeList takes the client's cursor out of the request before mcp-go sees
// it: with no pagination limit configured, mcp-go then builds the whole list
// and the after hook replaces it with the kit's page.
func (s *Server) beforeList(req any, cursor *mcp.Cursor) {
	kind := KindResources
	if _, ok := req.(*mcp.ListResourceTemplatesRequest); ok {
		kind = KindTemplates
	}
	c, ok := decodeCursor(kind, *cursor)
	if ok && c.Version != 0 {
		s.mu.Lock()
		_, ok = s.snapshots[snapshotKey{kind, c.Version}]
		s.mu.Unlock()
	}
	if !ok {
		*cursor = invalidCursor
		return
	}
	s.pending.Store(req, c)
	*cursor = ""
}

// afterList cuts the page for the cursor beforeList stashed, writes the
// cursor and snapshot id into res, and runs the OnPage hook.
func (s *Server) afterList(kind string, req any, res *mcp.PaginatedResult) ([]listItem, bool) {
	v, ok := s.pending.LoadAndDelete(req)
	if !ok {
		return nil, false
	}
	c := v.(cursorState)

	s.mu.Lock()
	items, next, snapshotID := s.cutLocked(kind, c)
	hook := s.onPage
	s.mu.Unlock()

	res.NextCursor = ""
	if next != nil {
		res.NextCursor = encodeCursor(*next)
	}
	if snapshotID != "" {
		res.EnsureResultMeta().SetMetaField(SnapshotIDKey, snapshotID)
	}
	if hook != nil {
		hook(kind, c.Page+1)
	}
	return items, true
}

// cutLocked returns the page after c. A live walk resumes after the last
// creation sequence served, so it sees changes made between pages; a snapshot
// walk reads the set frozen at its first page, so the snapshot id is honest.
func (s *Server) cutLocked(kind string, c cursorState) (items []listItem, next *cursorState, snapshotID string) {
	if s.opts.Snapshot {
		if c.Page == 0 {
			c.Version = s.versions[kind]
			key := snapshotKey{kind, c.Version}
			if _, ok := s.snapshots[key]; !ok {
				s.snapshots[key] = s.currentLocked(kind)
			}
		}
		all := s.snapshots[snapshotKey{kind, c.Version}]
		end := min(c.Offset+s.opts.PageSize, len(all))
		items = all[c.Offset:end]
		if end < len(all) {
			next = &cursorState{Kind: kind, Page: c.Page + 1, Version: c.Version, Offset: end}
		}
		return items, next, fmt.Sprintf("%s@%d", kind, c.Version)
	}

	all := s.currentLocked(kind)
	start, _ := slices.BinarySearchFunc(all, c.After+1, func(it listItem, seq uint64) int {
		switch {
		case it.seq < seq:
			return -1
		case it.seq > seq:
			return 1
		}
		return 0
	})
	end := min(start+s.opts.PageSize, len(all))
	items = all[start:end]
	if end < len(all) {
		next = &cursorState{Kind: kind, Page: c.Page + 1, After: items[len(items)-1].seq}
	}
	return items, next, ""
}

// currentLocked returns the list of kind as it is now, in creation order.
func (s *Server) currentLocked(kind string) []listItem {
	var all []listItem
	if kind == KindTemplates {
		for _, e := range s.templates {
			all = append(all, listItem{seq: e.seq, template: e.tmpl})
		}
	} else {
		for _, e := range s.resources {
			all = append(all, listItem{seq: e.seq, resource: e.res})
		}
	}
	slices.SortFunc(all, func(a, b listItem) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return all
}
