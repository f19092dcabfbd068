package mcpsync_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Bug (progress: no request storm): a 2026-07-28 server that steadily
// refuses any listen stream naming x, and accepts every stream without it,
// gets a new listen request about every second, for ever.
//
// y is watched on an acknowledged stream; Subscribe(x) sends a stream
// [y, x], which replaces (cancels) y's stream and is refused: x falls back
// to polling, and the refused stream's end goes to Client.reestablish.
// After its backoff it reopens every URI the refused stream carried: y's
// reopen opens [y], which the server acknowledges, and an acknowledgement
// resets conn.ends (the backoff "starts afresh once a stream is
// acknowledged"); x's reopen sends [y, x] again, refused again, which
// cancels y's new stream and ends in reestablish again, with a backoff of
// one second since it was just reset. The cycle never stops: each turn
// costs two listen requests, a new generation and a read of y, and y is
// without a stream half of the time. The test counts listen requests over
// one revalidation period (5 minutes) once the fault is steady.
func TestBreak39RefusedURIChurnsListenStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x = "file:///b39/poison/x.md"
		const y = "file:///b39/poison/y.md"
		r := newRig(t, eras[1], nil)
		r.srv.Set(x, "text/markdown", "x1")
		r.srv.Set(y, "text/markdown", "y1")
		r.wire.refuseListens(func(uris []string) bool { return slices.Contains(uris, x) })
		listen := string(mcp.MethodSubscriptionsListen)

		_, err := r.c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		sub, err := r.c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePoll, sub.Mode, "x's stream was refused")

		// Let the fault become steady: ten minutes.
		for range 10 {
			time.Sleep(time.Minute)
			quiesce()
		}
		before, refusedBefore := r.wire.listens(), r.wire.refusals(listen)
		for range 5 {
			time.Sleep(time.Minute)
			quiesce()
		}
		n, nr := r.wire.listens()-before, r.wire.refusals(listen)-refusedBefore
		t.Logf("listen requests in the 5 minutes after the first 10: %d (%d refused); total %d", n, nr, r.wire.listens())
		if n > 10 {
			t.Fatalf("%d listen requests (%d refused) in one revalidation period against a server whose refusal never changes", n, nr)
		}
	})
}
