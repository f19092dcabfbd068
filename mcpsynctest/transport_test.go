package mcpsynctest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subscribed returns a legacy client subscribed to the given resources, which
// exist on s with text "v0".
func subscribed(t *testing.T, s *Server, seed int64, names ...string) (*client.Client, *Transport, *recorder) {
	t.Helper()
	for _, n := range names {
		s.Set(n, "text/plain", "v0")
	}
	c, tr, rec := connect(t, s.NewInProcessTransport(), seed, legacy)
	subscribe(t, c, names...)
	return c, tr, rec
}

func TestHeldReadReturnsAfterLaterRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)

		hold := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
		readA := make(chan string, 1)
		go func() {
			text, err := read(context.Background(), c, "file:///a")
			assert.NoError(t, err)
			readA <- text
		}()
		<-hold.Arrived()
		s.Set("file:///a", "text/plain", "v2")

		textB, err := read(context.Background(), c, "file:///a")
		require.NoError(t, err)
		assert.Equal(t, "v2", textB, "read B answers first")
		synctest.Wait()
		require.Empty(t, readA, "read A is still held")

		hold.Release()
		assert.Equal(t, "v1", <-readA, "read A returns after B with older content")
		assert.Equal(t, 2, s.Reads("file:///a"))
	})
}

func TestHeldReadEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
		tr.HoldNext(string(mcp.MethodResourcesRead), "")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := read(ctx, c, "file:///a")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestDroppedNotificationNeverArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		_, tr, rec := subscribed(t, s, 1, "file:///a", "file:///b")
		tr.DropNext("file:///a", 1)
		s.Set("file:///a", "text/plain", "v1")
		s.Set("file:///b", "text/plain", "v1")
		s.Set("file:///a", "text/plain", "v2")
		synctest.Wait()
		assert.Equal(t, []string{"file:///b", "file:///a"}, rec.updated(), tr.Log())
		assert.Equal(t, 3, s.NotificationsSent(), "the server sent all three")
	})
}

func TestDuplicateNotificationArrivesTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		_, tr, rec := subscribed(t, s, 1, "file:///a")
		tr.DuplicateNext("file:///a", 1)
		s.Set("file:///a", "text/plain", "v1")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a", "file:///a"}, rec.updated(), tr.Log())
	})
}

func TestReorderSwapsNotifications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		_, tr, rec := subscribed(t, s, 1, "file:///a", "file:///b")
		tr.ReorderNext("file:///a")
		s.Set("file:///a", "text/plain", "v1")
		synctest.Wait()
		assert.Empty(t, rec.updated(), "held until the next one")
		s.Set("file:///b", "text/plain", "v1")
		synctest.Wait()
		assert.Equal(t, []string{"file:///b", "file:///a"}, rec.updated(), tr.Log())
	})
}

func TestDelayedNotification(t *testing.T) {
	t.Run("virtual duration", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := NewServer(nil)
			_, tr, rec := subscribed(t, s, 1, "file:///a", "file:///b")
			tr.DelayNext("file:///a", time.Minute)
			s.Set("file:///a", "text/plain", "v1")
			s.Set("file:///b", "text/plain", "v1")
			synctest.Wait()
			assert.Equal(t, []string{"file:///b"}, rec.updated())
			time.Sleep(time.Minute) // virtual time inside the bubble
			synctest.Wait()
			assert.Equal(t, []string{"file:///b", "file:///a"}, rec.updated(), tr.Log())
		})
	})
	t.Run("until released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := NewServer(nil)
			_, tr, rec := subscribed(t, s, 1, "file:///a")
			tr.DelayNext("", 0)
			s.Set("file:///a", "text/plain", "v1")
			synctest.Wait()
			assert.Empty(t, rec.updated())
			assert.Equal(t, 1, tr.ReleaseNotifications())
			synctest.Wait()
			assert.Equal(t, []string{"file:///a"}, rec.updated())
		})
	})
}

// TestRandomFaultsFollowTheSeed shows the same seed drops and duplicates the
// same notifications, and another seed others.
func TestRandomFaultsFollowTheSeed(t *testing.T) {
	run := func(seed int64) ([]string, []string) {
		var got, log []string
		synctest.Test(t, func(t *testing.T) {
			s := NewServer(nil)
			_, tr, rec := subscribed(t, s, seed, "file:///a")
			tr.SetDropRate(0.3)
			tr.SetDuplicateRate(0.3)
			for i := range 40 {
				s.Set("file:///a", "text/plain", fmt.Sprint(i))
			}
			synctest.Wait()
			got, log = rec.updated(), tr.Log()
		})
		return got, log
	}
	got1, log1 := run(7)
	got2, log2 := run(7)
	_, log3 := run(8)
	assert.Equal(t, got1, got2)
	assert.Equal(t, log1, log2)
	assert.NotEqual(t, log1, log3)
	var drops, dups int
	for _, line := range log1 {
		if strings.Contains(line, ": drop ") {
			drops++
		}
		if strings.Contains(line, ": duplicate ") {
			dups++
		}
	}
	assert.Positive(t, drops)
	assert.Positive(t, dups)
	assert.Len(t, got1, 40-drops+dups)
}

func TestFailedRequests(t *testing.T) {
	s := NewServer(nil)
	s.Set("file:///a", "text/plain", "v1")
	c, tr, _ := connect(t, s.NewInProcessTransport(), 1)

	tr.FailNext(string(mcp.MethodResourcesRead), "file:///a", mcp.INTERNAL_ERROR, "injected")
	_, err := read(context.Background(), c, "file:///a")
	require.ErrorIs(t, err, mcp.ErrInternalError)

	broken := errors.New("connection reset")
	tr.BreakNext(string(mcp.MethodResourcesRead), "", broken)
	_, err = read(context.Background(), c, "file:///a")
	require.ErrorIs(t, err, broken)

	assert.Equal(t, 0, s.Reads("file:///a"), "the server saw neither")
	text, err := read(context.Background(), c, "file:///a")
	require.NoError(t, err)
	assert.Equal(t, "v1", text, "faults apply once")
}

func TestLostUnsubscribeAck(t *testing.T) {
	s := NewServer(nil)
	c, tr, _ := subscribed(t, s, 1, "file:///a")
	tr.LoseNextResponse(string(mcp.MethodResourcesUnsubscribe), "file:///a")
	err := c.Unsubscribe(context.Background(), mcp.UnsubscribeRequest{Params: mcp.UnsubscribeParams{URI: "file:///a"}})
	require.ErrorIs(t, err, ErrResponseLost)
	assert.False(t, s.Subscribed("file:///a"), "the server processed the unsubscribe")
	assert.Equal(t, 1, s.UnsubscribeCalls())
}

func TestDroppedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		c, tr, rec := subscribed(t, s, 1, "file:///a")
		tr.DropSession()
		_, err := read(context.Background(), c, "file:///a")
		require.ErrorIs(t, err, ErrSessionDropped)

		s.Set("file:///a", "text/plain", "v1")
		synctest.Wait()
		assert.Empty(t, rec.updated(), "notifications stop")
		assert.False(t, s.Subscribed("file:///a"), "the server ended the session")

		c2, _, rec2 := subscribed(t, s, 2, "file:///a")
		text, err := read(context.Background(), c2, "file:///a")
		require.NoError(t, err)
		assert.Equal(t, "v0", text, "a new transport reconnects")
		s.Set("file:///a", "text/plain", "v2")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a"}, rec2.updated())
		assert.Empty(t, rec.updated())
	})
}

func TestForgedSnapshotIDs(t *testing.T) {
	tests := []struct {
		name     string
		snapshot bool
		mode     ForgeMode
		same     bool
	}{
		{"id added where the server has none", false, ForgeMissing, true},
		{"id varies per page", true, ForgeVary, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewServer(&ServerOptions{Snapshot: tt.snapshot})
			for i := range 5 {
				s.Set(fmt.Sprintf("file:///%d", i), "text/plain", "x")
			}
			c, tr, _ := connect(t, s.NewInProcessTransport(), 9)
			tr.ForgeSnapshotIDs(tt.mode)
			pages := walk(t, c, 10)
			require.Len(t, pages, 3)
			for _, p := range pages {
				id, _ := snapshotID(p).(string)
				assert.Contains(t, id, "forged-9", tr.Log())
			}
			assert.Equal(t, tt.same, snapshotID(pages[0]) == snapshotID(pages[2]))
			_, declared := c.GetServerCapabilities().Experimental[SnapshotCapability]
			assert.Equal(t, tt.snapshot, declared)
		})
	}
}

func TestCyclicCursor(t *testing.T) {
	s := NewServer(nil)
	for i := range 8 {
		s.Set(fmt.Sprintf("file:///%d", i), "text/plain", "x")
	}
	c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
	tr.CycleCursor(KindResources, 3, 2)

	pages := walk(t, c, 6)
	require.Len(t, pages, 6, "the walk never ends")
	assert.Equal(t, pages[0].NextCursor, pages[2].NextCursor, "page 3 points back at page 2")
	assert.Equal(t, pages[1].Resources, pages[3].Resources)
	assert.Equal(t, pages[2].Resources, pages[4].Resources)

	_, err := c.ListResources(context.Background(), mcp.ListResourcesRequest{})
	require.ErrorIs(t, err, client.ErrRepeatedListCursor, "mcp-go's own walk detects it")
}

func TestDropSessionEndsHeldRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
		hold := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
		done := make(chan error, 1)
		go func() {
			_, err := read(context.Background(), c, "file:///a")
			done <- err
		}()
		<-hold.Arrived()
		tr.DropSession()
		require.ErrorIs(t, <-done, ErrSessionDropped)
		assert.Contains(t, strings.Join(tr.Log(), "\n"), "drop session")
	})
}

func TestOldSessionNotificationAfterReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		_, tr, rec := subscribed(t, s, 1, "file:///a")
		tr.DelayNext("file:///a", 0)
		s.Set("file:///a", "text/plain", "v1")
		synctest.Wait()
		tr.DropSession()

		_, _, rec2 := subscribed(t, s, 2, "file:///a")
		assert.Equal(t, 1, tr.ReleaseNotifications())
		synctest.Wait()
		assert.Equal(t, []string{"file:///a"}, rec.updated(), "the old session's notification arrives after the reconnect")
		assert.Empty(t, rec2.updated())
	})
}

func TestURIEncodingConfusion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		_, tr, rec := subscribed(t, s, 1, "file:///a b")
		tr.MapNotificationURIs(func(uri string) string { return strings.ReplaceAll(uri, " ", "%20") })
		tr.DuplicateNext("file:///a b", 1) // rules match the URI the server sent
		s.Set("file:///a b", "text/plain", "v1")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a%20b", "file:///a%20b"}, rec.updated(), tr.Log())
	})
}

func TestHoldNextRequestKeepsItFromTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
		hold := tr.HoldNextRequest(string(mcp.MethodResourcesRead), "file:///a")
		ctx, cancel := context.WithCancel(context.Background())
		text := make(chan string, 1)
		go func() {
			got, err := read(ctx, c, "file:///a")
			assert.NoError(t, err)
			text <- got
		}()
		synctest.Wait()
		<-hold.Arrived()
		assert.Equal(t, 0, s.Reads("file:///a"), "the server has not seen the request")
		cancel() // a request stuck in a buffer does not watch its context
		s.Set("file:///a", "text/plain", "v2")
		synctest.Wait()
		require.Empty(t, text)
		hold.Release()
		assert.Equal(t, "v2", <-text, "the server answers when the request reaches it")
	})
}

func TestHoldPassedOnlyWhenTheHeldResponseReachedItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
		given := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
		ctx, cancel := context.WithCancel(context.Background())
		failed := make(chan error, 1)
		go func() {
			_, err := read(ctx, c, "file:///a")
			failed <- err
		}()
		<-given.Arrived()
		cancel()
		require.Error(t, <-failed)
		given.Release()
		synctest.Wait()
		select {
		case <-given.Passed():
			t.Fatal("a response its caller gave up on did not pass")
		default:
		}

		late := tr.HoldNext(string(mcp.MethodResourcesRead), "file:///a")
		text := make(chan string, 1)
		go func() {
			got, err := read(context.Background(), c, "file:///a")
			assert.NoError(t, err)
			text <- got
		}()
		<-late.Arrived()
		s.Set("file:///a", "text/plain", "v2")
		late.Release()
		<-late.Passed()
		assert.Equal(t, "v1", <-text, "the held answer is the one the server gave when the request arrived")
	})
}

func TestHeldRequestFailsAfterItsSessionEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		s.Set("file:///a", "text/plain", "v1")
		c, tr, _ := connect(t, s.NewInProcessTransport(), 1)
		hold := tr.HoldNextRequest(string(mcp.MethodResourcesRead), "")
		failed := make(chan error, 1)
		go func() {
			_, err := read(context.Background(), c, "file:///a")
			failed <- err
		}()
		<-hold.Arrived()
		tr.DropSession()
		synctest.Wait()
		require.Empty(t, failed, "the session's end does not end the hold")
		hold.Release()
		require.ErrorIs(t, <-failed, ErrSessionDropped)
		assert.Equal(t, 0, s.Reads("file:///a"))
	})
}

func TestHealStopsEveryFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(nil)
		c, tr, rec := subscribed(t, s, 1, "file:///a")
		tr.DropNext("file:///a", 5)
		tr.SetDuplicateRate(1)
		tr.DelayNext("file:///a", 0)
		tr.FailNext(string(mcp.MethodResourcesRead), "", -32603, "boom")
		hold := tr.HoldNext(string(mcp.MethodResourcesRead), "")
		tr.Heal()
		s.Set("file:///a", "text/plain", "v1")
		synctest.Wait()
		assert.Equal(t, []string{"file:///a"}, rec.updated(), "delivered once, neither dropped, duplicated nor held")
		text, err := read(context.Background(), c, "file:///a")
		require.NoError(t, err, "no request rule is left")
		assert.Equal(t, "v1", text)
		<-hold.release // released, although its request never came
	})
}
