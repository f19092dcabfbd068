package workqueue

import (
	"testing"

	"go.uber.org/goleak"
)

// The queue starts a goroutine only when its timer fires; none may be left
// running when a test is done with the queue.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
