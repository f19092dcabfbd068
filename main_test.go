package mcpsync_test

import (
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"
)

// docServerEnv makes the test binary serve newDocServer over stdio instead
// of running tests, so that stdio tests need no other program.
const docServerEnv = "MCPSYNC_TEST_STDIO_SERVER"

// The Client starts goroutines (notification pump, reads, timers); every
// one must be gone when a test is done with it.
func TestMain(m *testing.M) {
	if os.Getenv(docServerEnv) == "1" {
		if err := server.ServeStdio(newDocServer("v1").srv); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// quiesce lets the clients of a testing/synctest bubble finish what they
// started: queued reads wait out the coalescing window (a timer), so
// settling takes rounds of "every goroutine blocked" and a little virtual
// time, not one synctest.Wait.
func quiesce() {
	for range 10 {
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
	}
	synctest.Wait()
}
