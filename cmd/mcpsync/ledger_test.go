package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

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
	engine, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
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
	assert.Equal(t, mcpsync.StateClosed, sub.State)
	for sub, err := range engine.ResumableSubscriptions() {
		require.NoError(t, err)
		assert.Fail(t, "resumable subscription left by read", sub.URI)
	}
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

	st, err := openEngine(t, path).OutboxState(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(3), st.Last)
	assert.Equal(t, uint64(1), st.First, "nothing acknowledged, nothing discarded")
	assert.Empty(t, st.Consumers)
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
		"read": {"read", "--url", f.url, "--ledger", path, "file:///docs/a.md"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCmd(t.Context(), args...)
			assert.Equal(t, exitFailure, r.code, r)
			assert.Empty(t, r.stdout)
			assert.Equal(t, "mcpsync: ledger "+path+" is in use by another process (one process opens a ledger at a time)\n", r.stderr)
		})
	}
}
