package mcpsync_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Break22 (2026-07-28): a server that acknowledges only part of a
// replacement stream. x is subscribed in push mode on an acknowledged
// stream. Subscribe y replaces the stream; the server's acknowledgement
// carries y but no longer x. relisten checks only the URI its caller asked
// for (y), and gapped only intersects the acknowledged sets, so nothing
// notices that x lost its server-side subscription: x stays ModePush, with
// no Degraded reason, although no stream will ever notify it. A change of x
// is then served as the old text until the hourly revalidation.
//
// Property violated: no pretence of real time (DESIGN: a URI without a
// working subscription gets periodic reads with an honest bound) and
// progress ("silently stale ... is a bug"): x must either go to poll mode,
// be marked degraded, or be read after it changes.
func TestBreak22PartialAckDropsCarriedURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///partial/x.md", "file:///partial/y.md"
		r := newRig(t, eras[1], &mcpsync.ClientOptions{RevalidateEvery: time.Hour})
		c, srv := r.c, r.srv
		srv.Set(x, "text/markdown", "v1")
		srv.Set(y, "text/markdown", "v1")

		sx, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sx.Mode)
		time.Sleep(time.Minute)
		quiesce()

		r.wire.leaveOut(x) // the server stops accepting x
		sy, err := c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sy.Mode, sy.ModeReason)
		time.Sleep(time.Minute)
		quiesce()

		srv.Set(x, "text/markdown", "v2")
		time.Sleep(time.Minute)
		quiesce()

		sub, err := c.Engine().Subscription(x)
		require.NoError(t, err)
		e, err := c.Lookup(x)
		require.NoError(t, err)
		text := ""
		if len(e.Contents) > 0 {
			text = e.Contents[0].Text
		}
		assert.True(t, text == "v2" || sub.Mode != mcpsync.ModePush || e.Degraded != "",
			"x is off every acknowledged stream yet still claims push mode, serves %q (server has v2), degraded %q", text, e.Degraded)
	})
}
