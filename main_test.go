package mcpsync_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The Client starts goroutines (notification pump, reads, timers); every
// one must be gone when a test is done with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
