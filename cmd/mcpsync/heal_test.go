package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stdioDieOnceEnv names a file: the first stdio fixture to find it
// missing creates it and SIGKILLs itself soon after, as a server that
// crashes; the one started in its place runs on.
const stdioDieOnceEnv = "MCPSYNC_TEST_STDIO_DIE_ONCE"

// dieOnce arms the crash of the first fixture process (see stdioDieOnceEnv).
func dieOnce() {
	marker := os.Getenv(stdioDieOnceEnv)
	if marker == "" {
		return
	}
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // not the first
	}
	_ = f.Close()
	// Long enough for watch to subscribe and read first.
	time.AfterFunc(300*time.Millisecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
}

// watch keeps running when its stdio server is SIGKILLed: the server is
// started again, a session event says so with the new generation, and the
// summary counts the reconnect; the exit is 0.
func TestWatchRunsThroughSIGKILLOfItsStdioServer(t *testing.T) {
	t.Setenv(stdioServerEnv, "1")
	t.Setenv(stdioDieOnceEnv, filepath.Join(t.TempDir(), "died"))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	self, err := os.Executable()
	require.NoError(t, err)

	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	out := newLineWriter()
	done := make(chan int, 1)
	go func() {
		var stderr strings.Builder
		done <- run(ctx, []string{"watch", "--json", "--uri", "file:///docs/a.md", "--ping-every", "100ms",
			"--", self, "-test.run=^$"}, strings.NewReader(""), out, &stderr)
	}()
	out.waitFor(t, "the loss as an error event", func(ev map[string]any) bool {
		msg, _ := ev["message"].(string)
		return ev["event"] == "error" && strings.Contains(msg, "session 1 lost")
	})
	out.waitFor(t, "a session event of the new generation", func(ev map[string]any) bool {
		return ev["event"] == "session" && ev["sessionGeneration"] == 2.0 && ev["reconnects"] == 1.0
	})
	out.waitFor(t, "a version read in the new session", func(ev map[string]any) bool {
		return ev["event"] == "version" && ev["sessionGeneration"] == 2.0
	})
	interrupt()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, out.String())
	case <-time.After(15 * time.Second):
		t.Fatal("watch did not end after the interrupt")
	}
	evs := events(t, out.String())
	sum := evs[len(evs)-1]
	require.Equal(t, "summary", sum["event"])
	assert.EqualValues(t, 1, sum["reconnects"])
	// The same text read in each session: accepted, then unchanged.
	assert.EqualValues(t, 1, sum["versionsAccepted"])
	assert.EqualValues(t, 1, sum["unchanged"])
	assert.Positive(t, sum["degradedMs"])
}
