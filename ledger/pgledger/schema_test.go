package pgledger_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// Workers opening a new schema at once: each migration is applied once, and
// every one of them gets a working ledger.
func TestOpenMigratesOnce(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	const n = 4
	ls := make([]*pgledger.Ledger, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ls[i], errs[i] = pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema}) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		defer ls[i].Close()
	}
	var versions, latest int
	require.NoError(t, ls[0].Pool().QueryRow(ctx, "SELECT count(*), max(version) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&versions, &latest))
	assert.Equal(t, pgledger.SchemaVersion(), latest)
	assert.Equal(t, latest, versions, "each version applied once")
	for i, l := range ls {
		_, ok, err := l.CompareAndSwap(ctx, "file:///a", uint64(i), record("file:///a", uint64(i+1)), nil)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// A schema migrated by a newer release is refused, not misread.
func TestOpenRefusesNewerSchema(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	_, err := l.Pool().Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+" (version, name) VALUES ($1, 'from the future')", pgledger.SchemaVersion()+1)
	require.NoError(t, err)
	_, err = pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.ErrorIs(t, err, ledger.ErrLedgerSchema)
}

func TestOpenRefusesSchemaName(t *testing.T) {
	conn := pgtest.ConnString(t)
	for _, name := range []string{"Upper", "with space", `quo"te`, "1digit"} {
		_, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: name})
		assert.Error(t, err, name)
	}
}

// A closed ledger refuses every call, and a waiter returns.
func TestClosed(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(t, err)
	woke := make(chan error, 1)
	go func() { woke <- l.WaitOutbox(ctx, 0) }()
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "idempotent")
	require.ErrorIs(t, <-woke, ledger.ErrLedgerClosed)
	_, err = l.Load(ctx, "file:///a")
	require.ErrorIs(t, err, ledger.ErrLedgerClosed)
	_, _, err = l.CompareAndSwap(ctx, "file:///a", 0, record("file:///a", 1), nil)
	require.ErrorIs(t, err, ledger.ErrLedgerClosed)
}

// A record stored under the empty key (a key version 3, Range, Load and
// CompareAndSwap all take) is indexed by the upgrade's backfill like any
// other: after the upgrade it is found under its subject, as a walk of
// every record finds it.
func TestUpgradeBackfillIndexesTheEmptyKey(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	store := func(key string, r *ledger.Record) {
		b, err := ledger.EncodeRecord(r)
		require.NoError(t, err)
		var first *int64
		require.NoError(t, pool.QueryRow(ctx, cas3, key, int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
		require.NotNil(t, first, key)
	}
	store("", indexed(1, ledger.StateUnsubscribeUnknown, "user:alice", ledger.VersionServed))
	store("file:///b", indexed(1, ledger.StateUnsubscribeUnknown, "user:alice", ledger.VersionServed))

	l := openIn(t, conn, schema, nil)
	var walked []string
	require.NoError(t, l.Range(ctx, func(key string, _ *ledger.Record) bool {
		walked = append(walked, key)
		return true
	}))
	require.Equal(t, []string{"", "file:///b"}, walked, "a walk finds both")
	requireIndexed(t, l, "user:alice")
}

// readAs has subject read uri through e, accepted.
func readAs(t *testing.T, e *mcpsync.Engine, uri, subject, text string) {
	t.Helper()
	_, err := e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: text}}))
	require.NoError(t, err)
	require.True(t, out.Accepted)
}

// A worker of the earlier release (schema version 3) still running after
// the upgrade revokes a subject. It knows nothing of revoked_log, so an
// engine of this release could not learn of that revocation; it is refused
// instead (SQLSTATE MCF02), leaving nothing behind, and the same revocation
// by this release is seen: the subject's version is refused and
// RevokedAfter names it.
func TestEarlierReleasesRevokeAfterTheUpgradeIsRefused(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil) // upgrades to version 4

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const uri, subject = "file:///secret.md", "user:mallory"
	readAs(t, e, uri, subject, "secret")
	_, err = e.Lookup(subject, uri)
	require.NoError(t, err)

	// The earlier release's Revoke, statement for statement (schema version 3:
	// revokeAdd, then raiseRevGen, in one transaction).
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2) ON CONFLICT (subject) DO NOTHING", subject, b)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the earlier release's revocation is refused")
	require.Equal(t, "MCF02", pgErr.Code)

	// Nothing of it is left: the generation and the log agree, and the
	// subject is not in the revoked set.
	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	after, now, err := l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, gen, now)
	require.Empty(t, after)
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	require.Empty(t, revoked)

	// This release's revocation is seen.
	_, err = e.RevokeSubject(subject)
	require.NoError(t, err)
	_, err = e.Lookup(subject, uri)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "a revoked subject's version still served")
	after, _, err = l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{subject}, after)
}

// waitBlocked waits (waitForBackend) for a backend that pid blocks, and
// returns its pid.
func waitBlocked(t *testing.T, watch *pgx.Conn, pid uint32) uint32 {
	t.Helper()
	return uint32(waitForBackend(t, watch,
		`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)) LIMIT 1`, int32(pid)))
}

// A worker of the earlier release whose compare_and_swap is already running
// when the upgrade to version 4 starts (the call resolved version 3's
// function before the upgrade dropped it, and waits for the upgrade's lock
// of records) does not leave the index behind: the record is filed under
// its new subject, not under the previous record's, so a revocation of the
// new subject sweeps it.
func TestUpgradeRacingAnEarlierReleasesWriteKeepsTheIndexRight(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)

	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	cas3 := "SELECT " + table("compare_and_swap") + "($1, $2, $3, $4, $5, $6, $7, $8)"
	encode := func(r *ledger.Record) []byte {
		b, err := ledger.EncodeRecord(r)
		require.NoError(t, err)
		return b
	}
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0),
		encode(indexed(1, ledger.StateActive, "user:alice", ledger.VersionServed)), [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first)

	// Hold the upgrade half way: after it took records, before it drops
	// the old functions.
	blocker, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer blocker.Close(context.Background())
	watch, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer watch.Close(context.Background())
	btx, err := blocker.Begin(ctx)
	require.NoError(t, err)
	_, err = btx.Exec(ctx, "SELECT generation FROM "+table("revocation_meta")+" FOR UPDATE")
	require.NoError(t, err)

	upgraded := make(chan error, 1)
	go func() { upgraded <- pgledger.MigrateTo(ctx, pool, schema, 4) }()
	migrator := waitBlocked(t, watch, blocker.PgConn().PID())

	// The earlier release's write of the record, now filed under erin.
	wrote := make(chan error, 1)
	go func() {
		var first *int64
		err := pool.QueryRow(ctx, cas3, "file:///a", int64(1),
			encode(indexed(2, ledger.StateActive, "user:erin", ledger.VersionServed)), [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first)
		if err == nil && first == nil {
			err = errNotStored
		}
		wrote <- err
	}()
	waitBlocked(t, watch, migrator)
	require.NoError(t, btx.Commit(ctx))
	require.NoError(t, <-upgraded)
	werr := <-wrote

	l := openIn(t, conn, schema, nil)
	r, err := l.Load(ctx, "file:///a")
	require.NoError(t, err)
	if werr != nil {
		// Refused: then the record must be the one the backfill filed.
		require.Equal(t, []string{"user:alice"}, r.Subjects())
	} else {
		require.Equal(t, []string{"user:erin"}, r.Subjects(), "the earlier release's write was stored")
	}
	for _, s := range []string{"user:erin", "user:alice"} {
		want := []string(nil)
		if contains(r.Subjects(), s) {
			want = []string{"file:///a"}
		}
		keys, err := l.SubjectKeys(ctx, s)
		require.NoError(t, err)
		require.Equal(t, want, keys, "SubjectKeys(%q) after an earlier release's write (error %v) raced the upgrade", s, werr)
	}
}

var errNotStored = errorString("not stored")

type errorString string

func (e errorString) Error() string { return string(e) }

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A revocation by a worker of the earlier release (version 3) already under
// way when the upgrade to version 4 begins, which commits while the upgrade
// waits for it: the subject joins revoked_log too, so the revoked
// generation still counts the subjects that joined and RevokedAfter names
// every revoked subject (ledger.Index: RevokedGeneration is the
// number of subjects that joined).
func TestUpgradeRacingAnEarlierReleasesRevokeKeepsItInTheLog(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }

	// One subject revoked before, by the earlier release.
	revocation := func(subject string) []byte {
		b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject})
		require.NoError(t, err)
		return b
	}
	oldRevoke := func(tx pgx.Tx, subject string) {
		tag, err := tx.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2) ON CONFLICT (subject) DO NOTHING", subject, revocation(subject))
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
		_, err = tx.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
		require.NoError(t, err)
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { oldRevoke(tx, "user:alice"); return nil }))

	// The earlier release's Revoke of mallory (schema version 3:
	// revokeAdd, then raiseRevGen, one transaction), its statements run,
	// its commit not yet.
	old, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer old.Close(context.Background())
	watch, err := pgx.Connect(ctx, conn)
	require.NoError(t, err)
	defer watch.Close(context.Background())
	otx, err := old.Begin(ctx)
	require.NoError(t, err)
	oldRevoke(otx, "user:mallory")

	upgraded := make(chan error, 1)
	go func() { upgraded <- pgledger.MigrateTo(ctx, pool, schema, 4) }()
	waitBlocked(t, watch, old.PgConn().PID())
	require.NoError(t, otx.Commit(ctx), "the earlier release's revocation commits")
	require.NoError(t, <-upgraded)

	l := openIn(t, conn, schema, nil)
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	var subjects []string
	for _, r := range revoked {
		subjects = append(subjects, r.Subject)
	}
	require.Equal(t, []string{"user:alice", "user:mallory"}, subjects)
	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	after, now, err := l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, gen, now)
	require.Equal(t, uint64(len(revoked)), gen, "the generation counts the subjects that joined")
	require.ElementsMatch(t, subjects, after, "RevokedAfter(0) names every revoked subject")
}

// design.md: workers of an earlier PostgreSQL schema are refused after the
// upgrade, revocations alike. A worker of the earlier release still running
// after the upgrade revokes `corp\\alice`, its subject written raw, which
// is now the stored key of `corp\alice`, revoked before. Refused or not,
// it does not undo that revocation: `corp\alice` stays in the revoked set,
// and an engine opened afterwards refuses it.
func TestEarlierReleasesRevokeOfAnEscapedSubjectUndoesNoOther(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	// The earlier release's Revoke, statement for statement.
	oldRevoke := func(subject string) error {
		b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject})
		require.NoError(t, err)
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2) ON CONFLICT (subject) DO NOTHING", subject, b)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				_, err = tx.Exec(ctx, "UPDATE "+table("revoked")+" SET revocation = $2 WHERE subject = $1", subject, b)
				return err
			}
			_, err = tx.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
			return err
		})
	}
	require.NoError(t, oldRevoke(`corp\alice`))

	l := openIn(t, conn, schema, nil) // upgrades to version 4
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	require.Equal(t, `corp\alice`, revoked[0].Subject)

	_ = oldRevoke(`corp\\alice`) // refused or not, it must not undo corp\alice

	revoked, err = l.Revoked(ctx)
	require.NoError(t, err)
	var subjects []string
	for _, r := range revoked {
		subjects = append(subjects, r.Subject)
	}
	require.Contains(t, subjects, `corp\alice`, "the earlier revocation is still in the revoked set")
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.Lookup(`corp\alice`, "file:///a")
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "an engine opened afterwards still refuses the revoked subject")
}

// A version-3 schema could revoke both `corp\alice` and `corp\\alice` (it
// refused only NUL and subjects beyond MaxSubjectBytes). Migration 4
// escapes the backslashes of every revoked subject, so `corp\alice` comes
// to the key `corp\\alice` had; the upgrade still succeeds, keeping both
// revocations, both counted in the generation and both named by
// RevokedAfter.
func TestUpgradeOfSubjectsThatCollideWhenEscapedOpens(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	for _, subject := range []string{`corp\alice`, `corp\\alice`} {
		b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2)", subject, b)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
		require.NoError(t, err)
	}

	require.NoError(t, pgledger.MigrateTo(ctx, pool, schema, 4), "the upgrade of a schema holding both revocations")
	l := openIn(t, conn, schema, nil)
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 2)
	require.Equal(t, `corp\\alice`, revoked[0].Subject)
	require.Equal(t, `corp\alice`, revoked[1].Subject)
	after, gen, err := l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), gen)
	require.ElementsMatch(t, []string{`corp\alice`, `corp\\alice`}, after)
}
