package mcpsync_test

import (
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Safety: "a URI nobody watches is not carried on the stream after things
// settle". SubscribeAll is given two spellings of each of several URIs
// (file:///b37/sp/aN.md and file:///b37/sp/%61N.md, one key each, see
// internal/uri), and while it is still under way (another URI's first
// read is held), the caller Unsubscribes each of them. Unsubscribe
// answers CLOSED. Once everything settles the server must notify none of
// the spellings.
//
// Client.wantAll puts the first spelling of each key on conn.want. When
// the Subscribe of the second spelling takes the key first, the watch is
// spelled the second way (w.raw) and its relisten adds that spelling too:
// the stream carries both. Unsubscribe then takes only w.raw off
// (Client.relisten(w.raw, false)); conn.want still holds the first
// spelling, which wantAll put there, so the replacement stream
// Unsubscribe sends carries it again, and its acknowledgement (which
// lacks w.raw) satisfies relisten. When SubscribeAll ends,
// Client.unwantUnwatched takes the first spelling off conn.want, but
// only off the list for a next stream: nothing replaces the stream, and
// the server goes on notifying a URI nobody watches for the rest of the
// session.
//
// Which Subscribe of a pair takes the key first is the scheduler's
// choice. With GOMAXPROCS 1 the last pair goes the second way every time
// (30 of 30 runs, with and without -race); with the default GOMAXPROCS
// some pair does in about 6 runs of 10. The quiesce before the
// Unsubscribes makes the outcome depend on that choice alone.
func TestBreak37TwoSpellingsUnsubscribedLeftOnStream(t *testing.T) {
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
		done := make(chan error, 1)
		go func() {
			_, err := r.c.SubscribeAll(t.Context(), uris)
			done <- err
		}()
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
			require.Equal(t, mcpsync.StateClosed, sub.State, u)
		}
		hold.Release()
		require.NoError(t, <-done)
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
