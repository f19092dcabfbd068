package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// 2026-07-28, a server that refuses every subscriptions/listen (a steady
// fault), and a SubscribeAll of 40 URIs: each falls back to polling with a
// reason, and retryPush tries a stream again at poll ticks, backing off to
// RevalidateEvery. Measures the listens per revalidation period once
// steady; every URI stays open in poll mode with current content.
func TestBreak42PassingModernSteadyRefusedListensAtScale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		uris := make([]string, n)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///b42/steady/%03d.md", i)
		}
		r := buildRig(t, eras[1], rigConfig{uris: uris, wire: func(w *faultWire) {
			w.refuse = listensWhere(anyURIs)
		}})
		_, err := r.c.SubscribeAll(t.Context(), uris)
		t.Logf("SubscribeAll err: %v", err != nil)
		quiesce()
		time.Sleep(40 * time.Minute)
		quiesce()
		before := r.wire.listens()
		time.Sleep(5 * time.Minute)
		quiesce()
		per := r.wire.listens() - before
		t.Logf("listens: %d in all, %d in the last 5 min", r.wire.listens(), per)
		for _, u := range uris {
			r.srv.Set(u, "text/markdown", "v2")
		}
		time.Sleep(2 * time.Minute)
		quiesce()
		var bad []string
		for _, u := range uris {
			text, desc := r.state(u)
			if text != "v2" {
				bad = append(bad, desc)
			}
		}
		require.Empty(t, bad)
		require.LessOrEqual(t, per, 2*n, "listens per revalidation period under a steady refusal")
	})
}
