package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"

	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// An empty ?schema= (an unset variable in 'postgres://…?schema=$SCHEMA')
// is taken as no schema at all: the command silently opens, creates and
// writes the default schema "mcpsync", shared by every deployment that did
// not name one, instead of refusing the name.
func TestBreak20EmptySchemaParameterIsRefused(t *testing.T) {
	conn := pgtest.ConnString(t)
	if !strings.Contains(conn, "://") {
		t.Skip("--ledger takes a postgres:// URL")
	}
	if schemaExists(t, conn, pgledger.DefaultSchema) {
		t.Skipf("schema %s exists on the test server; not touching it", pgledger.DefaultSchema)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, conn)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{pgledger.DefaultSchema}.Sanitize()+" CASCADE")
	})
	r := runCmd(t.Context(), "outbox", "--ledger", withQuery(conn, "schema="))
	assert.False(t, schemaExists(t, conn, pgledger.DefaultSchema), "?schema= (empty) opened the default schema")
	assert.NotEqual(t, exitOK, r.code, "an empty schema name must be refused: %+v", r)
}
