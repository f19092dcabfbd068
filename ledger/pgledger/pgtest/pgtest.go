// Package pgtest gives tests a PostgreSQL server and a schema of their own
// on it, or skips them when there is none.
//
// The server is the one MCPSYNC_TEST_POSTGRES names (a connection string),
// else postgres://postgres@127.0.0.1:5432/test?sslmode=disable. When neither
// answers within two seconds, tests skip with one line, unless
// MCPSYNC_REQUIRE_POSTGRES=1, which makes them fail instead: a run that must
// test PostgreSQL can never pass by skipping it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables the package reads.
const (
	EnvConnString = "MCPSYNC_TEST_POSTGRES"
	EnvRequire    = "MCPSYNC_REQUIRE_POSTGRES"
)

// DefaultConnString is the server tried when EnvConnString is not set.
const DefaultConnString = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// connectTimeout bounds the probe of the server.
const connectTimeout = 2 * time.Second

var probe struct {
	once sync.Once
	conn string
	err  error
}

// ConnString returns the connection string of the test server, probing it
// once per process. Without a server it skips t, or fails it when
// MCPSYNC_REQUIRE_POSTGRES=1.
func ConnString(t testing.TB) string {
	t.Helper()
	probe.once.Do(func() {
		probe.conn = os.Getenv(EnvConnString)
		if probe.conn == "" {
			probe.conn = DefaultConnString
		}
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, probe.conn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		probe.err = err
	})
	if probe.err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("pgtest: no PostgreSQL, and %s=1: %v", EnvRequire, probe.err)
		}
		t.Skipf("pgtest: no PostgreSQL (set %s); skipping", EnvConnString)
	}
	return probe.conn
}

// Schema returns the test server's connection string and the name of a
// schema no other test uses (mcpsync_test_ and random hex), which is dropped
// with everything in it when t ends. The schema is not created: the code
// under test creates it.
func Schema(t testing.TB) (connString, schema string) {
	t.Helper()
	connString = ConnString(t)
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema = "mcpsync_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, connString)
		if err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return connString, schema
}
