package mcpsync_test

// Spellings: two spellings of one URI (file:///d/a.md and file:///d/%61.md)
// are one key (internal/uri), watched once. Whatever spelling the server
// was told, a URI nobody watches is notified under no spelling once things
// settle, and a watched one under the spelling the caller watches.

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// 2026-07-28. SubscribeAll is given two spellings of each of several URIs,
// and while it is still under way (another URI's first read is held) the
// caller Unsubscribes each of them; Unsubscribe answers CLOSED. Once
// everything settles the listen stream carries none of the spellings: a
// spelling the stream was given for a key goes with the key, whichever
// spelling the caller unsubscribes.
//
// Which Subscribe of a pair takes the key first is the scheduler's choice;
// with one P (GOMAXPROCS 1) the last pair's second spelling takes it first
// in every run, and the quiesce before the Unsubscribes makes the outcome
// depend on that choice alone.
func TestUnsubscribedSpellingsLeaveTheStream(t *testing.T) {
	// One P: the Subscribe SubscribeAll starts last runs first (runnext),
	// so the last pair's second spelling takes its key first in every run.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[1], nil)
		const pairs = 16
		const z = "file:///b37/sp/z.md"
		r.srv.Set(z, "text/markdown", "z")
		uris := []string{z}
		var firsts, seconds []string
		for i := range pairs {
			first := fmt.Sprintf("file:///b37/sp/a%d.md", i)
			second := fmt.Sprintf("file:///b37/sp/%%61%d.md", i)
			r.srv.Set(first, "text/markdown", "v1")
			r.srv.Set(second, "text/markdown", "v1")
			uris = append(uris, first, second)
			firsts = append(firsts, first)
			seconds = append(seconds, second)
		}
		hold := r.faults().HoldNext("resources/read", z)
		done := goCall(t.Context(), r.c.SubscribeAll, uris)
		synctest.Wait()
		<-hold.Arrived()
		quiesce() // every Subscribe but z's is done; z's waits for its first read
		nf, ns := 0, 0
		for i := range pairs {
			if r.srv.Subscribed(firsts[i]) {
				nf++
			}
			if r.srv.Subscribed(seconds[i]) {
				ns++
			}
		}
		t.Logf("before the Unsubscribes the stream carries %d first and %d second spellings", nf, ns)
		for _, u := range firsts {
			sub, err := r.c.Unsubscribe(t.Context(), u)
			require.NoError(t, err)
			require.Equal(t, ledger.StateClosed, sub.State, u)
		}
		hold.Release()
		require.NoError(t, (<-done).err)
		quiesce()

		var carried []string
		for i := range pairs {
			for _, u := range []string{firsts[i], seconds[i]} {
				if r.srv.Subscribed(u) {
					carried = append(carried, u)
				}
			}
		}
		require.True(t, r.srv.Subscribed(z))
		require.Empty(t, carried, "unsubscribed (CLOSED), yet still on the listen stream")
	})
}

// 2025-11-25. A Subscribe of spelling A of a URI is cancelled while its
// resources/subscribe is stuck before the server; a Subscribe of spelling B
// (the same key) then opens the URI, and the stuck request then reaches the
// server, which records A. The caller Unsubscribes the URI. Half an hour
// later the server notifies neither spelling: nobody watches the URI.
func TestCancelledSpellingIsUnsubscribedWithTheURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const a, b = "file:///b42/sp/a.md", "file:///b42/sp/%61.md"
		r := buildRig(t, eras[0], rigConfig{uris: []string{a, b}})
		hold := r.faults().HoldNextRequest(string(mcp.MethodResourcesSubscribe), a)
		ctx, cancel := context.WithCancel(t.Context())
		done := goCall(ctx, r.c.Subscribe, a)
		<-hold.Arrived()
		cancel()
		require.ErrorIs(t, (<-done).err, context.Canceled)
		quiesce()

		sub, err := r.c.Subscribe(t.Context(), b)
		require.NoError(t, err)
		t.Logf("B: %s %s", sub.State, sub.Mode)
		quiesce()
		hold.Release()
		quiesce()
		t.Logf("while B watched: server subscribed A %v, B %v; subscribe calls %d", r.srv.Subscribed(a), r.srv.Subscribed(b), r.srv.SubscribeCalls())

		_, err = r.c.Unsubscribe(t.Context(), b)
		require.NoError(t, err)
		r.sixRevalidations()
		require.False(t, r.srv.Subscribed(b), "B")
		require.False(t, r.srv.Subscribed(a),
			"half an hour after the URI's Unsubscribe, the server still notifies spelling %s, which nobody watches", a)
	})
}

// 2025-11-25. Two spellings A and B of one key are subscribed and
// unsubscribed alternately while the server fails some subscribes and
// unsubscribes (each spelling's unsubscribe fails while faulty). Then the
// faults end. Once settled, the server notifies exactly the spelling the
// caller watches last (or none), the key is open (in push mode, or polling
// with a reason), and it serves the server's current content.
func TestAlternatingSpellingsUnderFailuresEndOnTheLastWatched(t *testing.T) {
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
		eachCase(t, []string{"unsub", "both"}, func(failing string) string { return fmt.Sprintf("%s/%s", p.name, failing) }, func(t *testing.T, failing string) {
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
			minutes(10)
			r.srv.Set(a, "text/markdown", "v2")
			r.srv.Set(b, "text/markdown", "v2")
			minutes(7)
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
			push := p.last != "" && sub.Mode == ledger.ModePush
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
	}
}

// The caller Unsubscribes spelling A of a URI and, before the URI's pass
// ran (the Unsubscribe's wait was given up at once), Subscribes spelling B:
// the pass sees both changes together. Once settled the server notifies
// B, the spelling the caller watches, and not A; once B is unsubscribed
// too, the server notifies neither spelling.
func TestSpellingSwappedBeforeItsPassLeavesNoOtherSpellingNotified(t *testing.T) {
	// One P: the worker the Unsubscribe wakes runs only once the caller
	// blocks, in the Subscribe that follows.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	eachEra(t, func(t *testing.T, w wiring) {
		const a, b = "file:///swap/sp/a.md", "file:///swap/sp/%61.md"
		r := newRig(t, w, nil)
		r.srv.Set(a, "text/markdown", "v1")
		r.srv.Set(b, "text/markdown", "v1")
		r.watch(a)
		quiesce()
		require.True(t, r.srv.Subscribed(a))

		gone, cancel := context.WithCancel(t.Context())
		cancel()
		_, _ = r.c.Unsubscribe(gone, a) // its pass runs without the caller
		sub, err := r.c.Subscribe(t.Context(), b)
		require.NoError(t, err)
		minutes(2)
		t.Logf("B watched: %s %s (%q); server subscribed A %v, B %v", sub.State, sub.Mode, sub.ModeReason, r.srv.Subscribed(a), r.srv.Subscribed(b))
		assert.False(t, r.srv.Subscribed(a), "the server still notifies %s, which the caller unsubscribed", a)
		assert.True(t, r.srv.Subscribed(b), "the server does not notify %s, the spelling the caller watches", b)

		_, err = r.c.Unsubscribe(t.Context(), b)
		require.NoError(t, err)
		minutes(30)
		require.False(t, r.srv.Subscribed(b), "B")
		require.False(t, r.srv.Subscribed(a), "half an hour after the URI's last Unsubscribe, the server still notifies %s", a)
	})
}

// 2026-07-28. A Subscribe of spelling A gives up while the listen stream
// that would carry A is still coming, and the caller subscribes spelling B
// of the same URI at once, then unsubscribes it. Once settled, the listen
// stream carries neither spelling: nobody watches the URI. Five URIs go
// through it one after the other.
func TestSpellingSwappedWhileItsStreamIsComingLeavesNoSpellingOnTheStream(t *testing.T) {
	// One P: the key's pass that the given-up Subscribe marks runs once
	// the caller blocks in the next Subscribe, as it may on a busy
	// machine, rather than at a moment the scheduler picks.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		var as, bs []string
		for i := range 5 {
			as = append(as, fmt.Sprintf("file:///docs/sp%d/%%61.md", i))
			bs = append(bs, fmt.Sprintf("file:///docs/sp%d/a.md", i))
		}
		r := buildRig(t, eras[1], rigConfig{uris: append(slices.Clone(as), bs...)})
		for i, a := range as {
			b := bs[i]
			hold := r.faults().HoldNextRequest(string(mcp.MethodSubscriptionsListen), "")
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err := r.c.Subscribe(ctx, a)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "the listen stream that carries A is held")
			done := goCall(t.Context(), r.c.Subscribe, b)
			synctest.Wait()
			hold.Release()
			require.NoError(t, (<-done).err)
			sub, err := r.c.Engine().Subscription(b)
			require.NoError(t, err)
			t.Logf("B subscribed: generation %d %s, spelled %q", sub.SubscriptionGeneration, sub.State, sub.RawURI)
			quiesce()
			// While B is watched, its generation is B's and the stream
			// carries B, not A.
			sub, err = r.c.Engine().Subscription(b)
			require.NoError(t, err)
			assert.Equal(t, b, cmp.Or(sub.RawURI, sub.URI), "the watched generation is spelled as the caller watches it")
			assert.True(t, r.srv.Subscribed(b), "the listen stream carries the watched spelling %s", b)
			assert.False(t, r.srv.Subscribed(a), "the listen stream still carries %s, given up", a)
			_, err = r.c.Unsubscribe(t.Context(), b)
			require.NoError(t, err)
			quiesce()
		}
		r.sixRevalidations()
		for i, a := range as {
			assert.False(t, r.srv.Subscribed(a), "half an hour after the Unsubscribe, the listen stream carries %s", a)
			assert.False(t, r.srv.Subscribed(bs[i]), "half an hour after the Unsubscribe, the listen stream carries %s: %s", bs[i], r.describe(bs[i]))
		}
	})
}
