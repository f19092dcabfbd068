package mcpsync_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Break40 (2026-07-28): a server that refuses, with a JSON-RPC error, every
// subscriptions/listen stream that names one particular URI p, and accepts
// every other. A is subscribed first and is pushed; then p is subscribed.
//
// Client.relisten cancels the working stream [a] before it sends the
// replacement [a p], which the server refuses: p falls back to polling, and
// a is left with no stream. Client.reestablish, handling the refused
// stream's end, waits out conn.ends and reopens every URI the refused
// stream carried, in order: reopen(a) sends [a], which the server
// acknowledges, and reopen(p) at once sends [a p] again, which cancels [a]
// and is refused again, and so on. conn.ends was meant to slow that down
// (a doubling backoff up to RevalidateEvery), but Connection.acknowledged
// resets it at the acknowledgement of [a] in every round, so each round
// waits only the backoff's first step (1 s +-50%): about two listen
// requests a second, for as long as p is watched. (a's changes are still
// read within seconds, but only because every round reopens, and re-reads,
// a; between rounds a has no stream at all.)
//
// Property violated: no request storm (a bounded number of listen
// requests per revalidation period with a steady fault); URIs the server
// accepts keep their stream whatever it does to another URI.
func TestBreak40PoisonURIKnocksOutAcceptedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, p = "file:///b40/poison/a.md", "file:///b40/poison/p.md"
		r := buildRig(t, eras[1], rigConfig{uris: []string{a, p}, wire: func(w *faultWire) {
			w.refuse = listensWhere(func(uris []string) bool { return slices.Contains(uris, p) })
		}})
		sa, err := r.c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sa.Mode)
		sp, err := r.c.Subscribe(t.Context(), p)
		require.NoError(t, err)
		t.Logf("p: %s (%s)", sp.Mode, sp.ModeReason)
		quiesce()

		before := r.wire.listens()
		var late []string
		for i := range 40 {
			// Changes of a, 47 s apart over half an hour: each must be
			// pushed, and read within a few seconds.
			time.Sleep(47 * time.Second)
			want := fmt.Sprintf("v%d", i+2)
			r.srv.Set(a, "text/markdown", want)
			time.Sleep(5 * time.Second)
			quiesce()
			if got, desc := r.state(a); got != want {
				late = append(late, fmt.Sprintf("change %d (t=%v): serves %q, server has %q; %s", i, time.Duration(i+1)*52*time.Second, got, want, desc))
			}
		}
		listens := r.wire.listens() - before
		f := r.wire.listenFilters()
		t.Logf("%d listen requests in %v; the last four: %v", listens, 40*52*time.Second, f[len(f)-4:])
		require.Empty(t, late, "changes of an accepted URI not pushed while the server refuses another one")
		// 40*52 s is about 7 revalidation periods of 5 minutes.
		require.LessOrEqual(t, listens, 7*4, "a steady refusal of one URI drew a listen storm")
	})
}
