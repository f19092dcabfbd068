package boltledger_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// break17File is a ledger file an engine used: 200 session generations
// handed out, then closed as a worker that stops.
func break17File(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker.ledger")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	for range 200 {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	return path
}

// break17Child is set in the child process of
// TestBreak17TruncatedFileCrashesTheProcess: the path of the file it opens.
const break17Child = "MCPSYNC_BREAK17_OPEN"

// A ledger file cut short (a disk that filled up, a copy interrupted, a
// backup restored from a partial upload) must be refused with an error the
// caller can act on. boltledger.Open hands it to bbolt, which maps the file
// and reads pages past its end: the process dies with SIGBUS, a fatal error
// no recover() catches. A worker on such a file crash-loops; the command
// (`mcpsync outbox --ledger FILE`) dies with the Go runtime's exit status 2,
// the status it documents for a usage error.
func TestBreak17TruncatedFileCrashesTheProcess(t *testing.T) {
	if path := os.Getenv(break17Child); path != "" {
		l, err := boltledger.Open(path, &boltledger.Options{Timeout: time.Second})
		if err == nil {
			_, err = mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
			_ = l.Close()
		}
		os.Stdout.WriteString("open: " + errString(err) + "\n")
		return
	}
	full, err := os.ReadFile(break17File(t))
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.ledger")
	require.NoError(t, os.WriteFile(cut, full[:len(full)/2], 0o600))

	cmd := exec.Command(os.Args[0], "-test.run=^TestBreak17TruncatedFileCrashesTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), break17Child+"="+cut)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		head := out.String()
		if len(head) > 300 {
			head = head[:300]
		}
		t.Fatalf("opening a ledger file truncated to %d of %d bytes killed the process (%v):\n%s", len(full)/2, len(full), err, head)
	}
	require.NoError(t, err)
	assert.Contains(t, out.String(), "open: ", "the child reports what Open said")
	assert.NotContains(t, out.String(), "open: <nil>", "a truncated file is refused")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
