package mcpsync

import (
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// The pump hands each drained batch back to the queue: the notes come out
// once each and in order, the batch handed back keeps none of them, and a
// batch longer than noteSpareMax is let go instead of kept.
func TestNoteQueueReusesBatches(t *testing.T) {
	var q noteQueue
	q.init()
	mk := func(gen uint64) note {
		return note{gen: gen, n: mcp.JSONRPCNotification{Notification: mcp.Notification{Method: "m"}}}
	}
	var batch []note
	next := uint64(1)
	for round := range 5 {
		for range round + 1 {
			q.push(mk(next))
			next++
		}
		prev := batch
		batch = q.drain(batch)
		if len(batch) != round+1 || batch[0].gen != next-uint64(round+1) || batch[len(batch)-1].gen != next-1 {
			t.Fatalf("round %d: drained %+v", round, batch)
		}
		for _, n := range prev[:cap(prev)] {
			if n.gen != 0 || n.n.Method != "" {
				t.Fatalf("round %d: a handed-back batch still holds %+v", round, n)
			}
		}
	}
	if n := len(q.drain(batch)); n != 0 {
		t.Fatalf("drained %d notes twice", n)
	}

	long := make([]note, noteSpareMax+1)
	q.drain(long)
	q.push(mk(1))
	if got := q.drain(nil); len(got) != 1 || cap(got) > noteSpareMax {
		t.Fatalf("after a long batch: drained %d notes into room for %d", len(got), cap(got))
	}
}
