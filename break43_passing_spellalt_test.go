package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// 2025-11-25. Two spellings A and B of one key are subscribed and
// unsubscribed alternately while the server fails some subscribes and
// unsubscribes (each spelling's unsubscribe fails while faulty). Then the
// faults end. Once settled, the server notifies exactly the spelling the
// caller watches last (or none), the key is open (in push mode, or
// polling with a reason), and it serves the server's current content.
func TestBreak43PassingLegacySpellingsAlternateWithFailures(t *testing.T) {
	const a, b = "file:///b43/alt/a.md", "file:///b43/alt/%61.md"
	patterns := []struct {
		name  string
		steps []string // "+A" subscribe A, "-B" unsubscribe B ...
		last  string   // the spelling watched at the end, "" for none
	}{
		{"A-A+B", []string{"+A", "-A", "+B"}, b},
		{"A-A+B-B", []string{"+A", "-A", "+B", "-B"}, ""},
		{"A-B+B", []string{"+A", "-B", "+B"}, b},
		{"A+B-B+A", []string{"+A", "+B", "-B", "+A"}, a},
		{"A-A+B-B+A", []string{"+A", "-A", "+B", "-B", "+A"}, a},
		{"A-A+B-A+A", []string{"+A", "-A", "+B", "-A", "+A"}, a},
	}
	for _, p := range patterns {
		for _, failing := range []string{"unsub", "both"} {
			t.Run(fmt.Sprintf("%s/%s", p.name, failing), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := buildRig(t, eras[0], rigConfig{uris: []string{a, b}})
					r.wire.refuseWhen(func(method, _ string, n int) bool {
						switch method {
						case string(mcp.MethodResourcesUnsubscribe):
							return true
						case string(mcp.MethodResourcesSubscribe):
							return failing == "both" && n%2 == 0
						}
						return false
					})
					for _, s := range p.steps {
						u := a
						if s[1] == 'B' {
							u = b
						}
						var sub mcpsync.Subscription
						var err error
						if s[0] == '+' {
							sub, err = r.c.Subscribe(t.Context(), u)
						} else {
							sub, err = r.c.Unsubscribe(t.Context(), u)
						}
						t.Logf("%s: %s %s %q, %v", s, sub.State, sub.Mode, sub.ModeReason, err)
						time.Sleep(time.Second)
						quiesce()
					}
					time.Sleep(5 * time.Minute)
					quiesce()
					r.wire.refuseWhen(nil)
					for range 10 {
						time.Sleep(time.Minute)
						quiesce()
					}
					r.srv.Set(a, "text/markdown", "v2")
					r.srv.Set(b, "text/markdown", "v2")
					for range 7 {
						time.Sleep(time.Minute)
						quiesce()
					}
					sub, err := r.c.Engine().Subscription(a)
					e, lerr := r.c.Lookup(a)
					text := ""
					if lerr == nil && len(e.Contents) > 0 {
						text = e.Contents[0].Text
					}
					desc := fmt.Sprintf("key: %s %s %q (err %v); server A %v B %v; serves %q",
						sub.State, sub.Mode, sub.ModeReason, err, r.srv.Subscribed(a), r.srv.Subscribed(b), text)
					t.Log(desc)
					// Before 2026-07-28 a URI whose subscribe failed polls for
					// the session (with its reason): accepted here.
					push := p.last != "" && sub.Mode == mcpsync.ModePush
					require.False(t, p.last != a && r.srv.Subscribed(a), "server's A: "+desc)
					require.False(t, p.last != b && r.srv.Subscribed(b), "server's B: "+desc)
					if push {
						require.True(t, r.srv.Subscribed(p.last), "push but not notified: "+desc)
					}
					if p.last != "" {
						require.True(t, generationOpen(sub.State), desc)
						require.True(t, push || sub.ModeReason != "", desc)
						require.Equal(t, "v2", text, desc)
					}
				})
			})
		}
	}
}
