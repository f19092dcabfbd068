package wire

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// A request kept open for its server's answer is given its time from when
// its caller gave up, not from when it was sent: however long the caller
// waits, the request stays open while it does, and ends d after the
// caller's context does.
func TestKeptRequestCountsItsTimeFromWhenItsCallerGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 30 * time.Second
		ctx, giveUp := context.WithCancel(t.Context())
		kept, cancel := outlive(ctx, d)
		defer cancel()
		time.Sleep(10 * d) // a stream the server keeps open for minutes
		synctest.Wait()
		assert.NoError(t, kept.Err(), "ended while its caller still waited")
		giveUp()
		start := time.Now()
		<-kept.Done()
		assert.Equal(t, d, time.Since(start), "open for d once its caller gave up")
	})
}

// A request that ends before its caller gives up ends its kept context at
// once and leaves no timer to fire later.
func TestKeptRequestThatEndsLeavesNothingRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, giveUp := context.WithCancel(t.Context())
		kept, cancel := outlive(ctx, time.Minute)
		cancel()
		assert.Error(t, kept.Err())
		giveUp() // after its end: starts nothing
		synctest.Wait()
	})
}
