package pgledger_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/internal/crashtest"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Environment of the crash worker: the database, with the application name
// its connections carry, and the schema of the ledger it writes.
const (
	envCrashConn   = "MCPSYNC_CRASH_CONN"
	envCrashSchema = "MCPSYNC_CRASH_SCHEMA"
)

// TestCrashWorker is not a test: run by TestCrashConsistency as a child
// process (the os/exec TestHelperProcess pattern), it works on the ledger
// until it is killed, announcing on stdout each step that committed, and
// goes on when its connections are terminated under it.
func TestCrashWorker(t *testing.T) {
	crashtest.Work(t, func() (ledger.Ledger, error) {
		return pgledger.Open(context.Background(), os.Getenv(envCrashConn), &pgledger.Options{Schema: os.Getenv(envCrashSchema)})
	}, connectionLost)
}

// connectionLost reports whether err says that the connection of a call
// died under it: the server terminated its backend (SQLSTATE class 57P,
// operator intervention, or 08, connection exception) or the socket went
// away. What the call wrote committed whole or not at all; it cannot tell
// which.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Crash: a worker on the PostgreSQL ledger is killed with SIGKILL at random
// points of a run with changes, deletions, revocations and derived
// artifacts, and at other random points has its connections terminated
// (pg_terminate_backend) while one of them is inside a transaction. A
// terminated worker goes on, on new connections. After each interruption
// the ledger holds no accepted version without its outbox entry, no entry
// lost or numbered twice, no reused request id, generation or ordinal, no
// version regression, no deletion tombstoned twice, and every revocation
// the worker saw committed.
func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	db := admin(t, l)
	// The schema's name is unique to this test: no other test's
	// connections carry it.
	app := schema
	crashtest.Test{
		Worker:    "TestCrashWorker",
		Env:       []string{envCrashConn + "=" + withApplicationName(conn, app), envCrashSchema + "=" + schema},
		Ledger:    func(*testing.T) (ledger.Ledger, func()) { return l, func() {} },
		Terminate: func(t *testing.T) string { return terminateInTransaction(t, db, app) },
	}.Run(t, crashtest.Kills(20))
}

// terminateInTransaction terminates every connection named app as soon as
// one of them is inside a transaction, and says which it terminated.
func terminateInTransaction(t *testing.T, db *pgx.Conn, app string) string {
	t.Helper()
	// One statement reads the connections and terminates them, so the one
	// found in a transaction is terminated in it; none is unless one is.
	const terminate = `WITH w AS (SELECT pid, state, query FROM pg_stat_activity WHERE application_name = $1)
		SELECT state || ' in ' || left(query, 60) FROM w
		WHERE CASE WHEN EXISTS (SELECT FROM w WHERE state IN ('active', 'idle in transaction'))
			THEN pg_terminate_backend(pid) END`
	deadline := time.Now().Add(crashtest.Deadline)
	for time.Now().Before(deadline) {
		rows, err := db.Query(ctx, terminate, app)
		require.NoError(t, err)
		cut, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(cut) > 0 {
			return "terminated its connections: " + strings.Join(cut, "; ")
		}
	}
	t.Fatalf("no connection of %s was inside a transaction within %v", app, crashtest.Deadline)
	return ""
}
