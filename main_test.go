package mcpsync_test

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// docServerEnv makes the test binary serve newDocServer over stdio instead
// of running tests, so that stdio tests need no other program.
const docServerEnv = "MCPSYNC_TEST_STDIO_SERVER"

// readServerEnv makes the test binary serve faultURI over stdio, that many
// bytes long, for the stdio read benchmark.
const readServerEnv = "MCPSYNC_TEST_STDIO_READ_BYTES"

// deafListenServerEnv makes the test binary serve, over stdio, an
// mcpsynctest server that never answers a cancelled subscriptions/listen
// request (its clean-up never runs), with deafListenURIs.
const deafListenServerEnv = "MCPSYNC_TEST_DEAF_LISTEN_SERVER"

var deafListenURIs = []string{"file:///deaf/a.md", "file:///deaf/b.md", "file:///deaf/c.md"}

// The Client starts goroutines (notification pump, reads, timers); every
// one must be gone when a test is done with it.
func TestMain(m *testing.M) {
	if os.Getenv(docServerEnv) == "1" {
		if err := server.ServeStdio(newDocServer("v1").srv); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if size, err := strconv.Atoi(os.Getenv(readServerEnv)); err == nil {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(faultURI, "text/plain", strings.Repeat("x", size))
		if err := server.ServeStdio(srv.MCPServer()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(pidServerEnv) == "1" {
		servePID()
	}
	if os.Getenv(deafListenServerEnv) == "1" {
		srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{SessionWideListenEnd: true})
		for _, u := range deafListenURIs {
			srv.Set(u, "text/markdown", "v1")
		}
		for range 100_000 {
			srv.HoldNextListenEnd() // never released: the process is ended
		}
		// The held clean-ups keep their handlers: the process ends when
		// its stdin does, rather than wait for them.
		_ = server.NewStdioServer(srv.MCPServer()).Listen(context.Background(), exitAtEOF{os.Stdin}, os.Stdout)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// exitAtEOF ends the process at the end of its reader.
type exitAtEOF struct{ io.Reader }

func (r exitAtEOF) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil {
		os.Exit(0)
	}
	return n, err
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
