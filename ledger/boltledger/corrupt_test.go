package boltledger_test

// Files that are not a sound ledger (another program's bbolt file, a file
// cut short, a counter of the wrong size) are refused with an error the
// caller can act on, and left as they are.

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
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// usedLedgerFile is a ledger file an engine used: 200 session generations
// handed out, then closed as a worker that stops.
func usedLedgerFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker.ledger")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	for range 200 {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	return path
}

// truncatedChild is set in the child process of
// TestTruncatedFileIsRefusedWithoutCrashing: the path of the file it opens.
const truncatedChild = "MCPSYNC_TRUNCATED_LEDGER"

// A ledger file cut short (a disk that filled up, a copy interrupted, a
// backup restored from a partial upload) is refused with an error the
// caller can act on. bbolt maps the file and would read pages past its
// end, killing the process with SIGBUS (a fatal error no recover()
// catches): a worker on such a file would crash-loop, and the command would
// die with the exit status it documents for a usage error. The child
// process opens the cut file; it must live to report a refusal.
func TestTruncatedFileIsRefusedWithoutCrashing(t *testing.T) {
	if path := os.Getenv(truncatedChild); path != "" {
		l, err := boltledger.Open(path, &boltledger.Options{Timeout: time.Second})
		if err == nil {
			_, err = mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
			_ = l.Close()
		}
		os.Stdout.WriteString("open: " + errString(err) + "\n")
		return
	}
	full, err := os.ReadFile(usedLedgerFile(t))
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.ledger")
	require.NoError(t, os.WriteFile(cut, full[:len(full)/2], 0o600))

	cmd := exec.Command(os.Args[0], "-test.run=^TestTruncatedFileIsRefusedWithoutCrashing$", "-test.count=1")
	cmd.Env = append(os.Environ(), truncatedChild+"="+cut)
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

// The counters bucket holds each identity counter as 8 bytes. A value of
// any other length (a torn or hand-edited file) is refused as
// ledger.ErrLedgerCorrupt, by Open or by the Next that reads it, rather
// than read as 0 so that session generations, close epochs and request ids
// "never reused across restarts" start again from 1.
func TestGarbageCounterValueIsRefusedAsCorrupt(t *testing.T) {
	path := usedLedgerFile(t)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("counters"))
		require.Len(t, c.Get([]byte(ledger.CounterSession)), 8)
		return c.Put([]byte(ledger.CounterSession), []byte{0xff, 0xff}) // not 8 bytes
	}))
	require.NoError(t, db.Close())

	l, err := boltledger.Open(path, nil)
	if err != nil {
		assert.ErrorIs(t, err, ledger.ErrLedgerCorrupt)
		return
	}
	defer l.Close()
	first, err := l.Next(ctx, ledger.CounterSession, 1)
	if err != nil {
		assert.ErrorIs(t, err, ledger.ErrLedgerCorrupt)
		return
	}
	t.Errorf("a garbage session counter was read as 0: Next handed out session generation %d again (200 were already used)", first)
}

// A bbolt file that is not a ledger (another tool's database, a wrong
// --ledger path) has no schema key. Open refuses it with
// ledger.ErrLedgerSchema and writes nothing into it: the other program's
// file keeps exactly its own buckets.
func TestOpenRefusesAForeignBoltFileAndLeavesItAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other-app.db")
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte(`{"admin":true}`))
	}))
	require.NoError(t, db.Close())

	l, err := boltledger.Open(path, nil)
	if err == nil {
		_ = l.Close()
	}
	assert.ErrorIs(t, err, ledger.ErrLedgerSchema, "a bbolt file of another program is not a ledger")

	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var buckets []string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			buckets = append(buckets, string(name))
			return nil
		})
	}))
	assert.Equal(t, []string{"users"}, buckets, "the other program's file was written to")
}
