package mcpsync_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Break40 (2026-07-28): a server whose acknowledgement of a listen stream
// names a URI z the stream never asked for (here, once: only the first
// acknowledgement does). Connection.acknowledged records the
// acknowledged URIs as they come (s.ackURIs, s.ackSet) without
// intersecting them with what the stream carries (s.uris). A later
// Subscribe(z) then finds, in Client.relisten, "old.isAcked() &&
// old.ackSet[z] == add" and returns at once without sending a stream: z
// opens ACTIVE in ModePush with no Degraded reason, although no
// subscriptions/listen request ever named it and the server never notifies
// it. Its revalidation tick (Client.rehear -> unheard, which looks at
// s.uris) reopens it, and that reopen takes the same shortcut, so z is
// never put on a stream until some other URI's Subscribe happens to
// replace the stream. A change of z is served stale until the next
// revalidation, as if it were polled every RevalidateEvery, under a
// subscription that claims push.
//
// Property violated: Lookup serves a copy it cannot vouch for (push mode,
// no notifications possible) without Degraded saying why; the engine
// accepts the server's word for a URI on a stream it was not asked for.
func TestBreak40AckOfUnaskedURITakenAsSubscribed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, z = "file:///b40/unasked/a.md", "file:///b40/unasked/z.md"
		var forged bool
		r := buildRig(t, eras[1], rigConfig{opts: mcpsync.ClientOptions{RevalidateEvery: time.Hour}, uris: []string{a, z}, wire: func(w *faultWire) {
			w.ackFilter = func(asked []string) []string {
				if forged {
					return asked
				}
				forged = true
				return append(slices.Clone(asked), z)
			}
		}})
		_, err := r.c.Subscribe(t.Context(), a)
		require.NoError(t, err)
		before := r.wire.listens()
		sz, err := r.c.Subscribe(t.Context(), z)
		require.NoError(t, err)
		t.Logf("z: %s %s (%q); listen requests sent for it: %d; filters so far %v",
			sz.State, sz.Mode, sz.ModeReason, r.wire.listens()-before, r.wire.listenFilters())
		quiesce()

		time.Sleep(time.Minute)
		r.srv.Set(z, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()
		got, desc := r.state(z)
		require.True(t, got == "v2" || sz.Mode != mcpsync.ModePush,
			"z serves %q a minute after the server changed it to v2: %s", got, desc)
	})
}
