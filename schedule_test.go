package mcpsync_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// One scheduler drives the periodic reads of every watch: each subscribed
// URI is read once per jittered RevalidateEvery (never sooner than
// (1-Jitter) of it, never later than (1+Jitter)), and an unsubscribed one
// no more.
func TestScheduleRevalidatesEveryWatch(t *testing.T) {
	eachCase(t, []string{"2025-11-25", "2026-07-28"}, nil, func(t *testing.T, era string) {
		const every, jitter = time.Minute, 0.2
		srv := mcpsynctest.NewServer(nil)
		uris := make([]string, 20)
		for i := range uris {
			uris[i] = fmt.Sprintf("file:///sched/%02d.txt", i)
			srv.Set(uris[i], "text/plain", "v1")
		}
		c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: era, RevalidateEvery: every, Jitter: jitter, Seed: 7})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		for _, u := range uris {
			_, err := c.Subscribe(t.Context(), u)
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Second) // the reads after listen stream replacements
		quiesce()
		reads := func() map[string]int {
			m := map[string]int{}
			for _, u := range uris {
				m[u] = srv.Reads(u)
			}
			return m
		}
		start := reads()
		time.Sleep(time.Duration(float64(every)*(1-jitter)*0.99) - 5*time.Second)
		quiesce()
		assert.Equal(t, start, reads(), "no revalidation before (1-Jitter) of the interval")
		time.Sleep(time.Duration(float64(every) * 2 * jitter * 1.02))
		quiesce()
		for _, u := range uris {
			assert.Equal(t, start[u]+1, srv.Reads(u), "%s revalidated once within (1+Jitter) of the interval", u)
		}

		_, err = c.Unsubscribe(t.Context(), uris[0])
		require.NoError(t, err)
		gone := srv.Reads(uris[0])
		time.Sleep(3 * every)
		quiesce()
		assert.Equal(t, gone, srv.Reads(uris[0]), "an unsubscribed URI is not revalidated")
		assert.GreaterOrEqual(t, srv.Reads(uris[1]), start[uris[1]]+3, "the others go on")
	})
}

// A server without the subscribe capability gets a read every jittered
// PollEvery, not every RevalidateEvery.
func TestSchedulePollsWithoutSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const poll = 10 * time.Second
		srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{NoSubscribe: true})
		srv.Set(faultURI, "text/plain", "v1")
		c, err := mcpsync.Connect(t.Context(), srv.Dialer(), &mcpsync.ClientOptions{Subject: alice, ProtocolVersion: "2025-11-25", PollEvery: poll, Jitter: 0.1, RevalidateEvery: time.Hour})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		sub, err := c.Subscribe(t.Context(), faultURI)
		require.NoError(t, err)
		require.Equal(t, ledger.ModePoll, sub.Mode)
		quiesce()
		before := srv.Reads(faultURI)
		time.Sleep(10 * poll)
		quiesce()
		n := srv.Reads(faultURI) - before
		assert.GreaterOrEqual(t, n, 9, "about one poll per PollEvery")
		assert.LessOrEqual(t, n, 11, "about one poll per PollEvery")
	})
}
