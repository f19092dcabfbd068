package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// entriesOf decodes outbox --json output: every line must be an entry in
// its stored form.
func entriesOf(t *testing.T, out string) []mcpsync.OutboxEntry {
	t.Helper()
	var entries []mcpsync.OutboxEntry
	for line := range strings.Lines(out) {
		e, err := ledger.DecodeOutboxEntry([]byte(line))
		require.NoError(t, err, "line %q", line)
		entries = append(entries, e)
	}
	return entries
}

func seqs(entries []mcpsync.OutboxEntry) []uint64 {
	var out []uint64
	for _, e := range entries {
		out = append(out, e.Seq)
	}
	return out
}

// outboxStep is one run of outbox --json on a ledger: what it is given,
// its exit status, the entries it lists and what its stderr says.
type outboxStep struct {
	name   string
	args   []string
	code   int
	listed []uint64
	says   string
}

// runOutboxSteps runs the steps in order, each on what the one before left.
func runOutboxSteps(t *testing.T, ledger string, steps []outboxStep) {
	t.Helper()
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			r := runCmd(t.Context(), append([]string{"outbox", "--ledger", ledger, "--json"}, step.args...)...)
			require.Equal(t, step.code, r.code, r)
			assert.Equal(t, step.listed, seqs(entriesOf(t, r.stdout)))
			assert.Contains(t, r.stderr, step.says)
		})
	}
}

// readVersion runs read --json on the ledger and returns its one event.
func readVersion(t *testing.T, f fixture, ledger, uri string) map[string]any {
	t.Helper()
	r := runCmd(t.Context(), "read", "--url", f.url, "--json", "--ledger", ledger, uri)
	require.Equal(t, exitOK, r.code, r)
	evs := events(t, r.stdout)
	require.Len(t, evs, 1, r)
	return evs[0]
}

// openEngine opens an engine on the ledger file, as a worker restarted on
// it would, and closes both at the end of the test.
func openEngine(t *testing.T, path string) *mcpsync.Engine {
	t.Helper()
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	engine, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	return engine
}

// Two reads on one ledger file are one history: the second run's session
// generation is above the first's, its version replaces the first run's
// (the outbox entry names it as previous), and the outbox numbers the
// entries of both runs without a repeat. The generation read opens for its
// one read is closed again, so nothing is left to resume.
func TestReadWithLedgerCarriesOverToTheNextRun(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "sync.ledger")
	const uri = "file:///docs/a.md"

	first := readVersion(t, f, path, uri)
	f.srv.Set(uri, "text/markdown", "alpha 2")
	second := readVersion(t, f, path, uri)
	assert.Greater(t, second["sessionGeneration"], first["sessionGeneration"], "the ledger allocates session generations")
	assert.Equal(t, "ACCEPTED", second["decision"])
	assert.NotEqual(t, first["digest"], second["digest"])

	engine := openEngine(t, path)
	entries, err := engine.Ledger().Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, []uint64{1, 2}, []uint64{entries[0].Seq, entries[1].Seq})
	assert.Equal(t, first["digest"], entries[0].Version.Digest)
	assert.Equal(t, first["digest"], entries[1].Previous.Digest, "the second run replaced the first run's version")
	assert.Equal(t, second["digest"], entries[1].Version.Digest)

	sub, err := engine.Subscription(uri)
	require.NoError(t, err)
	assert.Equal(t, ledger.StateClosed, sub.State)
	for sub, err := range engine.ResumableSubscriptions() {
		require.NoError(t, err)
		assert.Fail(t, "resumable subscription left by read", sub.URI)
	}
}

// outbox lists what the runs appended, in its stored form or as text, and
// acknowledges it per consumer.
func TestOutboxListsAndAcknowledgesPerConsumer(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "sync.ledger")
	const uri = "file:///docs/a.md"
	first := readVersion(t, f, path, uri)
	f.srv.Set(uri, "text/markdown", "alpha 2")
	second := readVersion(t, f, path, uri)

	r := runCmd(t.Context(), "outbox", "--ledger", path, "--json")
	require.Equal(t, exitOK, r.code, r)
	entries := entriesOf(t, r.stdout)
	require.Equal(t, []uint64{1, 2}, seqs(entries), r)
	assert.Equal(t, first["digest"], entries[1].Previous.Digest)
	assert.Equal(t, second["digest"], entries[1].Version.Digest)
	assert.Contains(t, r.stderr, "listed 2 retained", "with --json the summary goes to stderr")

	r = runCmd(t.Context(), "outbox", "--ledger", path)
	require.Equal(t, exitOK, r.code, r)
	assert.Contains(t, r.stdout, "change       "+uri+"  outbox #1  updated")
	assert.Contains(t, r.stdout, "outbox #2")
	assert.Contains(t, r.stdout, "summary      listed 2 retained; outbox last #2, first retained #1, dropped 0; consumers none")

	runOutboxSteps(t, path, []outboxStep{
		{"a new consumer has everything pending", []string{"--consumer", "indexer"}, exitOK, []uint64{1, 2}, `listed 2 for "indexer" (not registered`},
		{"ack acknowledges what was listed", []string{"--consumer", "indexer", "--ack"}, exitOK, []uint64{1, 2}, `"indexer" acknowledged through #2`},
		{"then nothing is pending", []string{"--consumer", "indexer"}, exitOK, nil, `listed 0 pending for "indexer" after #2`},
		// Registered consumers pin what they have not passed; an
		// unregistered one starts at the oldest entry still retained.
		{"entries every registered consumer passed are gone", []string{"--consumer", "audit"}, exitOK, nil, `outbox last #2, first retained - (none)`},
	})

	// Two more runs number on; a second consumer keeps its own position.
	for _, text := range []string{"alpha 3", "alpha 4"} {
		f.srv.Set(uri, "text/markdown", text)
		readVersion(t, f, path, uri)
	}
	runOutboxSteps(t, path, []outboxStep{
		{"through bounds what is listed and acknowledged", []string{"--consumer", "audit", "--ack", "--through", "3"}, exitOK, []uint64{3}, `"audit" acknowledged through #3`},
		{"the first consumer still has both", []string{"--consumer", "indexer"}, exitOK, []uint64{3, 4}, `consumers "audit" at #3 "indexer" at #2`},
		{"the second resumes from its own position", []string{"--consumer", "audit"}, exitOK, []uint64{4}, `pending for "audit" after #3`},
	})
}

// Each scan on a ledger runs in a session generation above every earlier
// one, so scan receipts of successive runs never share one.
func TestScanWithLedgerAllocatesSessionsFromIt(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "sync.ledger")
	var gens []float64
	for range 2 {
		r := runCmd(t.Context(), "scan", "--url", f.url, "--json", "--ledger", path)
		require.Equal(t, exitOK, r.code, r)
		scans := ofKind(events(t, r.stdout), "scan")
		require.NotEmpty(t, scans, r)
		gens = append(gens, scans[0]["sessionGeneration"].(float64))
	}
	assert.Greater(t, gens[1], gens[0])
}

// A second watch on the ledger finds the versions of the first: the same
// content is unchanged, not new, and the outbox has nothing new. watch
// acknowledges nothing on a ledger: what it appended waits for consumers.
func TestWatchWithLedgerCarriesVersionsOver(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "sync.ledger")
	watch := func() (session, summary map[string]any) {
		r := runCmd(t.Context(), "watch", "--url", f.url, "--all", "--json", "--duration", "300ms", "--ledger", path)
		require.Equal(t, exitOK, r.code, r)
		evs := events(t, r.stdout)
		require.Equal(t, "session", evs[0]["event"], r)
		require.Equal(t, "summary", evs[len(evs)-1]["event"], r)
		return evs[0], evs[len(evs)-1]
	}
	ses1, sum1 := watch()
	assert.EqualValues(t, 3, sum1["versionsAccepted"])
	assert.EqualValues(t, 3, sum1["invalidations"])
	ses2, sum2 := watch()
	assert.Greater(t, ses2["sessionGeneration"], ses1["sessionGeneration"])
	assert.EqualValues(t, 0, sum2["versionsAccepted"], "the first run's versions are current")
	assert.GreaterOrEqual(t, sum2["unchanged"], 3.0)
	assert.EqualValues(t, 0, sum2["invalidations"])

	runOutboxSteps(t, path, []outboxStep{
		{"a consumer finds them", []string{"--consumer", "indexer"}, exitOK, []uint64{1, 2, 3}, "first retained #1, dropped 0; consumers none"},
	})
}

// A consumer the retention bound overtook is told which entries it lost,
// with exit status 3, and --ack does not pass them unless told how far.
func TestOutboxReportsLostEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small.ledger")
	l, err := boltledger.Open(path, &boltledger.Options{Ledger: &ledger.Options{OutboxRetention: 2}})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, l.Ack(ctx, "indexer", 0), "registered before any entry")
	const key = "file:///docs/a.md"
	for rev := uint64(1); rev <= 5; rev++ {
		entry := mcpsync.OutboxEntry{Schema: mcpsync.SchemaInvalidation, URI: key, Reason: ledger.InvalidateUpdated, Subject: "cli"}
		_, ok, err := l.CompareAndSwap(ctx, key, rev-1, &ledger.Record{Revision: rev}, []mcpsync.OutboxEntry{entry})
		require.NoError(t, err)
		require.True(t, ok)
	}
	st, err := l.OutboxState(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), st.First, "entries 1 to 3 dropped")
	require.NoError(t, l.Close())

	runOutboxSteps(t, path, []outboxStep{
		{"everything retained: the loss is shown, not an error", nil, exitOK, []uint64{4, 5}, `"indexer" at #0 (lost #1 to #3)`},
		{"the consumer is told", []string{"--consumer", "indexer"}, exitOutboxGap, []uint64{4, 5}, "lost outbox entries #1 to #3"},
		{"ack does not pass the loss", []string{"--consumer", "indexer", "--ack"}, exitOutboxGap, []uint64{4, 5}, "acknowledged nothing"},
		{"still lost", []string{"--consumer", "indexer"}, exitOutboxGap, []uint64{4, 5}, "--ack --through 3"},
		{"ack through the loss once rebuilt", []string{"--consumer", "indexer", "--ack", "--through", "3"}, exitOK, nil, `"indexer" acknowledged through #3`},
		{"then what is retained is pending", []string{"--consumer", "indexer"}, exitOK, []uint64{4, 5}, `pending for "indexer" after #3`},
	})
}

// bbolt locks a ledger file for one process: a command that finds it held
// says so and names the file, after a short wait.
func TestLedgerInUseIsAClearError(t *testing.T) {
	f := newFixture(t, nil)
	path := filepath.Join(t.TempDir(), "held.ledger")
	held, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	defer held.Close()
	for name, args := range map[string][]string{
		"read":   {"read", "--url", f.url, "--ledger", path, "file:///docs/a.md"},
		"outbox": {"outbox", "--ledger", path},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t.Context(), args...)
			assert.Equal(t, exitFailure, r.code, r)
			assert.Empty(t, r.stdout)
			assert.Equal(t, "mcpsync: ledger "+path+" is in use by another process (one process opens a ledger at a time)\n", r.stderr)
		})
	}
}

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

// outbox inspects a ledger, and refuses one that is not there, for a ledger
// file ("creating an empty file would only hide a mistyped path") as on
// PostgreSQL: a mistyped ?schema= is not created, migrated and reported as
// an empty outbox with exit 0, but fails.
func TestOutboxOfAMistypedSchemaIsRefused(t *testing.T) {
	conn, typo := pgtest.Schema(t) // a schema nobody created
	if !strings.Contains(conn, "://") {
		t.Skip("--ledger takes a postgres:// URL")
	}
	r := runCmd(t.Context(), "outbox", "--ledger", withQuery(conn, "schema="+typo))
	assert.False(t, schemaExists(t, conn, typo), "outbox created schema %s to inspect it", typo)
	assert.Equal(t, exitFailure, r.code, "outbox of a ledger that is not there must fail, as it does for a file: %+v", r)
}

// An empty ?schema= (an unset variable in 'postgres://…?schema=$SCHEMA') is
// refused: the command does not take it as no schema at all and open,
// create and write the default schema "mcpsync", shared by every deployment
// that did not name one.
func TestEmptySchemaParameterIsRefused(t *testing.T) {
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
