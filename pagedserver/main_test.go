package pagedserver

import (
	"testing"

	"go.uber.org/goleak"
)

// The in-process transport starts a notification goroutine per client.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
