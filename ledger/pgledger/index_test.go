package pgledger_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// indexed is a record whose current version subject read (none when ""),
// with status, holding an artifact derived from a version of each of
// artifacts.
func indexed(rev uint64, state ledger.SubscriptionState, subject string, status ledger.VersionStatus, artifacts ...string) *ledger.Record {
	r := &ledger.Record{Revision: rev, State: state}
	if subject != "" {
		r.Current = &ledger.StoredVersion{Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, Subject: subject}, Status: status}
	}
	for i, s := range artifacts {
		r.Artifacts = append(r.Artifacts, ledger.DerivedArtifact{Schema: ledger.SchemaDerivedArtifact, Index: "vectors",
			ArtifactID: fmt.Sprint(i), Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, Subject: s}})
	}
	return r
}

// schemaAtVersion3 is a fresh schema migrated to version 3, the last that
// kept no index: its connection string, its name, and a pool on it that is
// closed when the test ends.
func schemaAtVersion3(t *testing.T) (conn, schema string, pool *pgxpool.Pool) {
	t.Helper()
	conn, schema = pgtest.Schema(t)
	pool, err := pgxpool.New(ctx, conn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pgledger.MigrateTo(ctx, pool, schema, 3))
	return conn, schema, pool
}

// A schema of version 3, which kept no index, with records of every kind
// (several subjects, a revoked version, artifacts, unknown closes, more
// records than the upgrade reads at once) and revocations, upgraded to
// version 4: the index answers what a walk of every record says, the
// revoked subjects join in subject order, writes after the upgrade keep it,
// and a writer of the earlier release is refused instead of leaving the
// index behind.
func TestUpgradeIndexesRecords(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)

	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	cas3 := "SELECT " + table("compare_and_swap") + "($1, $2, $3, $4, $5, $6, $7, $8)"
	store := func(key string, r *ledger.Record) {
		b, err := ledger.EncodeRecord(r)
		require.NoError(t, err)
		var first *int64
		require.NoError(t, pool.QueryRow(ctx, cas3, key, int64(r.Revision-1), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
		require.NotNil(t, first, key)
	}
	store("file:///a", indexed(1, ledger.StateActive, "user:alice", ledger.VersionServed, "user:bob", "user:carol"))
	store("file:///b", indexed(1, ledger.StateActive, "user:bob", ledger.VersionRevoked, "user:alice"))
	store("file:///c", indexed(1, ledger.StateUnsubscribeUnknown, "user:dave", ledger.VersionServed))
	store("file:///d", indexed(1, ledger.StateUnsubscribeUnknown, "", ""))
	store("file:///e", indexed(1, ledger.StateDiscovered, "", ""))
	// Beyond one page of the upgrade's reads.
	for i := range 1100 {
		store(fmt.Sprintf("file:///many/%04d", i), indexed(1, ledger.StateActive, fmt.Sprint("user:", i%3), ledger.VersionServed))
	}
	for _, s := range []string{"user:zed", "user:bob"} {
		b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: s})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+table("revoked")+" VALUES ($1, $2)", s, b)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
		require.NoError(t, err)
	}

	l := openIn(t, conn, schema, nil)
	requireIndexed(t, l, "user:alice", "user:bob", "user:carol", "user:dave", "user:0", "user:1", "user:2", "user:zed")
	requireRevokedAfter(t, l, 0, []string{"user:bob", "user:zed"}, 2)

	// Writes of this release keep the index, and so does a revocation.
	_, ok, err := l.CompareAndSwap(ctx, "file:///a", 1, indexed(2, ledger.StateUnsubscribeUnknown, "user:alice", ledger.VersionRevoked, "user:carol"), nil)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = l.CompareAndSwap(ctx, "file:///c", 1, indexed(2, ledger.StateClosed, "user:dave", ledger.VersionServed), nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, l.Revoke(ctx, ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: "user:alice"}))
	requireIndexed(t, l, "user:alice", "user:bob", "user:carol", "user:dave")
	requireRevokedAfter(t, l, 2, []string{"user:alice"}, 3)

	// A writer of the earlier release still running writes nothing.
	b, err := ledger.EncodeRecord(indexed(3, ledger.StateActive, "user:erin", ledger.VersionServed))
	require.NoError(t, err)
	var first *int64
	err = pool.QueryRow(ctx, cas3, "file:///a", int64(2), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "MCF02", pgErr.Code)
	requireIndexed(t, l, "user:alice", "user:erin")
}

// requireIndexed requires l's index to say, of subjects and of unknown
// closes, what a walk of every record says.
func requireIndexed(t *testing.T, l *pgledger.Ledger, subjects ...string) {
	t.Helper()
	bySubject := map[string][]string{}
	var unknown []string
	recs := map[string]*ledger.Record{}
	require.NoError(t, l.Range(ctx, func(key string, r *ledger.Record) bool {
		for _, s := range r.Subjects() {
			bySubject[s] = append(bySubject[s], key)
		}
		if r.State == ledger.StateUnsubscribeUnknown {
			unknown = append(unknown, key)
			recs[key] = r
		}
		return true
	}))
	for _, s := range subjects {
		keys, err := l.SubjectKeys(ctx, s)
		require.NoError(t, err)
		require.Equal(t, bySubject[s], keys, s)
	}
	keys, got, err := l.UnknownCloses(ctx)
	require.NoError(t, err)
	require.Equal(t, unknown, keys, "unknown closes")
	for i, k := range keys {
		require.Equal(t, recs[k], got[i], k)
	}
}

func requireRevokedAfter(t *testing.T, l *pgledger.Ledger, gen uint64, want []string, now uint64) {
	t.Helper()
	got, n, err := l.RevokedAfter(ctx, gen)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, now, n)
	g, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	require.Equal(t, now, g)
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, int(now))
	_, _, err = l.RevokedAfter(ctx, now+1)
	require.Error(t, err, "a generation ahead of the ledger's")
}
