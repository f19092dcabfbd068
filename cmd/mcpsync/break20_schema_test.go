package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// schemaExists reports whether the test database has schema.
func schemaExists(t *testing.T, conn, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var ok bool
	require.NoError(t, c.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok))
	return ok
}

// outbox inspects a ledger, and for a ledger file it refuses a path with
// no ledger ("creating an empty file would only hide a mistyped path"). On
// PostgreSQL, a mistyped ?schema= is created, migrated, and reported as an
// empty outbox with exit 0: the operator checking what the workers
// announced is told "nothing", from a ledger nobody uses.
func TestBreak20OutboxOfAMistypedSchemaIsRefused(t *testing.T) {
	conn, typo := pgtest.Schema(t) // a schema nobody created
	if !strings.Contains(conn, "://") {
		t.Skip("--ledger takes a postgres:// URL")
	}
	r := runCmd(t.Context(), "outbox", "--ledger", withQuery(conn, "schema="+typo))
	assert.False(t, schemaExists(t, conn, typo), "outbox created schema %s to inspect it", typo)
	assert.Equal(t, exitFailure, r.code, "outbox of a ledger that is not there must fail, as it does for a file: %+v", r)
}
