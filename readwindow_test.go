package mcpsync

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A reconnect's reads go out at most a window at a time: it starts at
// windowStart, grows by one with every answered read up to windowMax, and
// halves (to one at the least) at every read that got no answer, so a
// restarted server that answers fast soon gets reads at full width and one
// that fails gets fewer.
func TestReconnectReadWindowGrowsWithAnswersAndHalvesOnFailures(t *testing.T) {
	var w readWindow
	for range windowStart {
		require.True(t, w.take())
	}
	require.False(t, w.take(), "no room beyond the starting window")

	w.give(true) // one answered: one more fits, and the window grew by one
	require.True(t, w.take())
	require.True(t, w.take())
	require.False(t, w.take())
	require.Equal(t, windowStart+1, w.limit)

	w.give(false)
	require.Equal(t, (windowStart+1)/2, w.limit, "a read without an answer halves the window")
	require.False(t, w.take(), "still as many out as the halved window holds")
	for w.inflight > 0 {
		w.give(false)
	}
	require.Equal(t, 1, w.limit, "never below one")
	require.True(t, w.take())
	for range 2 * windowMax {
		w.give(true)
		require.True(t, w.take())
	}
	require.Equal(t, windowMax, w.limit, "never above windowMax")
}
