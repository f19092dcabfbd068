package boltledger_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/internal/crashtest"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// envWorkerLedger is the ledger file the crash worker writes.
const envWorkerLedger = "MCPSYNC_CRASH_WORKER_LEDGER"

// TestCrashWorker is not a test: run by TestCrashConsistency as a child
// process (the os/exec TestHelperProcess pattern), it works on the ledger
// until it is killed, announcing on stdout each step that committed.
func TestCrashWorker(t *testing.T) {
	crashtest.Work(t, func() (ledger.Ledger, error) {
		return boltledger.Open(os.Getenv(envWorkerLedger), &boltledger.Options{Timeout: 10 * time.Second})
	}, nil)
}

// Crash: a worker on the bolt ledger is killed with SIGKILL at random points
// of a run with changes, deletions, revocations and derived artifacts. After
// each kill the file holds no accepted version without its outbox entry, no
// entry lost or numbered twice, no reused request id or session generation,
// no version regression, and every revocation the worker saw committed.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "worker.db")
	crashtest.Test{
		Worker: "TestCrashWorker",
		Env:    []string{envWorkerLedger + "=" + path},
		Ledger: func(t *testing.T) (ledger.Ledger, func()) { return openFile(t, path) },
	}.Run(t, crashtest.Kills(20))
}

// openFile opens the ledger file at path, which no worker has open, and
// returns it with the function that closes it.
func openFile(t *testing.T, path string) (ledger.Ledger, func()) {
	t.Helper()
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	return l, func() { require.NoError(t, l.Close()) }
}

// checkFile checks the ledger file at path with c and returns its export.
func checkFile(t *testing.T, c *crashtest.Checker, path string) ledger.Snapshot {
	t.Helper()
	l, done := openFile(t, path)
	defer done()
	return c.Check(t, l)
}
