package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Two watch --all processes on one PostgreSQL ledger split the server's
// URIs between them, each reading its share; outbox lists what they
// announced, from the same database.
func TestWatchAllSplitsURIsOnASharedLedger(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	if !strings.Contains(conn, "://") {
		t.Skip("--ledger takes a postgres:// URL; the test server's connection string is not one")
	}
	spec := withQuery(conn, "schema="+schema)
	f := newFixture(t, nil)
	for i := range 9 {
		f.srv.Set(fmt.Sprintf("file:///docs/more-%d.md", i), "text/plain", "more")
	}
	const uris = 12

	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() {
			results[i] = runCmd(t.Context(), "watch", "--url", f.url, "--all", "--json", "--duration", "4s", "--ledger", spec)
		})
	}
	wg.Wait()
	read := map[string]bool{}
	for i, r := range results {
		require.Equal(t, exitOK, r.code, r)
		evs := events(t, r.stdout)
		assert.NotEmpty(t, ofKind(evs, "took"), "watch %d took a share", i)
		for _, v := range ofKind(evs, "version") {
			read[v["uri"].(string)] = true
		}
	}
	assert.Len(t, read, uris, "every URI read by one of them")

	r := runCmd(t.Context(), "outbox", "--ledger", spec, "--json")
	require.Equal(t, exitOK, r.code, r)
	announced := map[string]bool{}
	for line := range strings.Lines(r.stdout) {
		en, err := ledger.DecodeOutboxEntry([]byte(line))
		require.NoError(t, err)
		announced[en.URI] = true
	}
	assert.Len(t, announced, uris, "the outbox announced every URI's first version")
}

// withQuery adds a query parameter to a connection URL.
func withQuery(conn, param string) string {
	if strings.Contains(conn, "?") {
		return conn + "&" + param
	}
	return conn + "?" + param
}
