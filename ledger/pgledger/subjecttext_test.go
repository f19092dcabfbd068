package pgledger_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A subject a version-3 schema revoked keeps its revocation through the
// upgrade, backslashes and all: RevokedAfter names it as it was, and
// revoking it again adds nothing.
func TestUpgradeKeepsRevokedSubjects(t *testing.T) {
	const subject = `corp\alice\0`
	conn, schema, pool := schemaAtVersion3(t)
	b, err := json.Marshal(ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject})
	require.NoError(t, err)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	_, err = pool.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2)", subject, b)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
	require.NoError(t, err)

	l := openIn(t, conn, schema, nil) // upgrades to version 4
	after, gen, err := l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{subject}, after)
	require.Equal(t, uint64(1), gen)

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.RevokeSubject(subject)
	require.NoError(t, err)
	now, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), now, "a subject revoked again joins no second time")
	revoked, err := l.Revoked(ctx)
	require.NoError(t, err)
	require.Len(t, revoked, 1)
	require.Equal(t, subject, revoked[0].Subject)
}

// longSubject returns a subject of a few kilobytes, incompressible.
func longSubject(t *testing.T) string {
	raw := make([]byte, 3000)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return "user:" + base64.RawURLEncoding.EncodeToString(raw) // incompressible, ~4 kB
}

// requireFiledUnder checks that the engine refuses subject for a read, and
// that a record read by it, written straight to the ledger, is stored and
// found by SubjectKeys.
func requireFiledUnder(t *testing.T, subject string) {
	t.Helper()
	const uri = "file:///doc.md"
	l := open(t, nil)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.Subscribe(uri, subject)
	require.ErrorIs(t, err, ledger.ErrInvalidSubject, "a subject some ledger could not revoke")

	rec := &ledger.Record{Revision: 1, Current: &ledger.StoredVersion{
		Version: ledger.ResourceVersion{URI: uri, Subject: subject}, Status: ledger.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	keys, err := l.(ledger.Index).SubjectKeys(ctx, subject)
	require.NoError(t, err)
	require.Equal(t, []string{uri}, keys)
}

// A long subject (a few kilobytes, as a principal carrying a token or a
// certificate chain may be) does not fit a GIN entry (about 2.7 kB). The
// engine refuses it for a read (MaxSubjectBytes), and a record holding one
// written straight to the ledger is still stored and filed under it.
func TestLongSubjectIsRefusedForAReadYetFiled(t *testing.T) {
	requireFiledUnder(t, longSubject(t))
}

// A schema of version 3 holding a record read by such a subject (version 3
// stored it) still upgrades: the ledger opens.
func TestUpgradeWithALongSubjectRecordOpens(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	b, err := ledger.EncodeRecord(indexed(1, ledger.StateActive, longSubject(t), ledger.VersionServed))
	require.NoError(t, err)
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first, "version 3 stores the record")

	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(t, err, "open of a version-3 ledger")
	require.NoError(t, l.Close())
}

// A subject holding a NUL character cannot be stored as PostgreSQL text.
// The engine refuses it for a read, and a record holding one written
// straight to the ledger (as version 3 stored it, the record being bytea)
// is still stored and filed under it: the index holds digests.
func TestNulSubjectIsRefusedForAReadYetFiled(t *testing.T) {
	requireFiledUnder(t, "user:\x00alice")
}

// A schema of version 3 holding a record read by such a subject (which
// version 3 stored) still upgrades, and the ledger opens.
func TestUpgradeWithANulSubjectRecordOpens(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
	b, err := ledger.EncodeRecord(indexed(1, ledger.StateActive, "user:\x00alice", ledger.VersionServed))
	require.NoError(t, err)
	var first *int64
	require.NoError(t, pool.QueryRow(ctx, cas3, "file:///a", int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))
	require.NotNil(t, first, "version 3 stores the record")

	for try := range 2 {
		l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
		require.NoError(t, err, "open %d of a version-3 ledger", try)
		require.NoError(t, l.Close())
	}
}

// A record written straight to the ledger with a subject that is not UTF-8
// (version 3 stored it: its JSON holds U+FFFD there, and the bolt ledger
// files it under that stored form) is stored and filed under the subject
// its record is read back with, rather than refused on every try.
func TestNonUTF8SubjectIsFiledUnderItsStoredForm(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	const doc, stored = "file:///docs/a.md", "\uFFFDbob"
	rec := &ledger.Record{Revision: 1, Current: &ledger.StoredVersion{
		Version: ledger.ResourceVersion{URI: doc, Subject: "\xffbob"}, Status: ledger.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, doc, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	require.Equal(t, []string{stored}, r.Subjects(), "the record as stored")
	keys, err := l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	require.Equal(t, []string{doc}, keys)
}

// revokeAfterARead has subject read uri through an engine on l, served,
// then revokes the subject: when the engine takes the read, the
// revocation must be stored and the version refused by every engine on l;
// otherwise the subject is refused for reading (ErrInvalidSubject) and
// nothing is served. It reports whether the read was taken.
func revokeAfterARead(t *testing.T, l ledger.Ledger, subject string) bool {
	t.Helper()
	const uri = "file:///doc.md"
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	if _, err := e.Subscribe(uri, subject); err != nil {
		require.ErrorIs(t, err, ledger.ErrInvalidSubject)
		_, err = e.Lookup(subject, uri)
		require.Error(t, err, "nothing served to a refused subject")
		return false
	}
	readAs(t, e, uri, subject, "body")
	_, err = e.Lookup(subject, uri)
	require.NoError(t, err, "the subject's read is served")

	if _, err = e.RevokeSubject(subject); err != nil {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("a subject whose read was accepted and served cannot be revoked: %s", msg)
	}

	// An engine opened on the ledger later refuses the subject too.
	f, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = f.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = f.Lookup(subject, uri)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "a revoked subject's version served by the next engine")
	return true
}

// A subject holding NUL cannot be stored as PostgreSQL text, so it could
// not be revoked there: every ledger refuses it for a read.
func TestNulSubjectIsRefusedByEveryLedger(t *testing.T) {
	const subject = "user:\x00alice"
	require.False(t, revokeAfterARead(t, ledger.NewMemory(nil), subject))
	require.False(t, revokeAfterARead(t, open(t, nil), subject))
}

// A subject of a few kilobytes does not fit the btree entries that key a
// revocation (about 2.7 kB): every ledger refuses it for a read, and the
// longest subject it takes (MaxSubjectBytes, incompressible) is revoked.
func TestLongSubjectIsRefusedAndTheLongestIsRevoked(t *testing.T) {
	subject := longSubject(t)
	require.False(t, revokeAfterARead(t, ledger.NewMemory(nil), subject))
	require.False(t, revokeAfterARead(t, open(t, nil), subject))
	longest := subject[:mcpsync.MaxSubjectBytes]
	require.True(t, revokeAfterARead(t, ledger.NewMemory(nil), longest))
	require.True(t, revokeAfterARead(t, open(t, nil), longest))
}

// RecordDerived names an artifact's subject in Version.Subject, and for a
// version of an earlier generation that subject is checked as Subscribe
// checks a reader: an artifact named for a subject holding NUL, or longer
// than MaxSubjectBytes, is refused (ErrInvalidSubject), or the revocation
// of that subject succeeds and names the artifact. No artifact escapes
// every revocation.
func TestDerivedArtifactOfAnUnrevocableSubjectIsRefused(t *testing.T) {
	for name, bad := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": longSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			const uri = "file:///doc.md"
			l := open(t, nil)
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
			require.NoError(t, err)
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			readAs(t, e, uri, "user:alice", "one")
			first, err := e.Lookup("user:alice", uri)
			require.NoError(t, err)

			// A new session: a new generation of the URI, read again.
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			readAs(t, e, uri, "user:alice", "two")

			v := first.Version
			v.Subject = bad
			err = e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "chunk-1", Version: v})
			if err != nil {
				require.ErrorIs(t, err, ledger.ErrInvalidSubject)
				return
			}
			rc, err := e.RevokeSubject(bad)
			if err != nil {
				msg := err.Error()
				if len(msg) > 200 {
					msg = msg[:100] + " … " + msg[len(msg)-100:]
				}
				t.Fatalf("an artifact was recorded for a subject that can never be revoked (invalid subject: %v): %s",
					errors.Is(err, ledger.ErrInvalidSubject), msg)
			}
			require.Len(t, rc.Artifacts, 1, "the revocation names the artifact")
		})
	}
}

// The earlier release read and served subjects holding NUL or of a few
// kilobytes (it checked only empty and UTF-8), and version 3 stored their
// records. After the upgrade such a version is served to nobody. A subject
// holding NUL is revoked (revocations key it escaped), and another engine
// sees the revocation; one beyond what a btree entry holds (about 2.7 kB)
// is refused with ErrInvalidSubject, not a PostgreSQL error.
func TestEarlierReleasesOddSubjectsAreRevokedOrRefusedClearly(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00alice",
		"long": longSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			const uri = "file:///a"
			conn, schema, pool := schemaAtVersion3(t)
			cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
			b, err := ledger.EncodeRecord(indexed(1, ledger.StateActive, subject, ledger.VersionServed))
			require.NoError(t, err)
			var first *int64
			require.NoError(t, pool.QueryRow(ctx, cas3, uri, int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))

			l := openIn(t, conn, schema, nil) // upgrades to version 4
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
			require.NoError(t, err)
			// Such a subject is served nothing, by any engine.
			_, err = e.Lookup(subject, uri)
			require.ErrorIs(t, err, ledger.ErrInvalidSubject, "the earlier release's version is not served")
			rc, err := e.RevokeSubject(subject)
			if name == "long" {
				require.ErrorIs(t, err, ledger.ErrInvalidSubject)
				// The record itself stays readable to the ledger's walks.
				r, err := l.Load(ctx, uri)
				require.NoError(t, err)
				require.Equal(t, []string{subject}, r.Subjects())
			} else {
				require.NoError(t, err)
				require.Len(t, rc.Versions, 1, "the earlier release's version is revoked")
				f, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
				require.NoError(t, err)
				_, err = f.Lookup(subject, uri)
				require.ErrorIs(t, err, mcpsync.ErrRevoked, "another engine sees the revocation")
			}
		})
	}
}

// RevokeSubject takes any UTF-8 subject, and the memory ledger stores its
// revocation (a subject revoked ahead of any read, such as a principal
// carrying a token of a few kilobytes, or one holding NUL). A snapshot of
// that ledger restored into PostgreSQL keeps the NUL subject's revocation
// (keyed escaped), and refuses one beyond what a btree entry holds with
// ErrInvalidSubject, not with a PostgreSQL error.
func TestRestoreKeepsANulSubjectsRevocationAndRefusesALongOne(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": longSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			src := ledger.NewMemory(nil)
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: src})
			require.NoError(t, err)
			_, err = e.RevokeSubject(subject)
			if err != nil {
				require.ErrorIs(t, err, ledger.ErrInvalidSubject)
				return
			}
			snap, err := ledger.Export(ctx, src)
			require.NoError(t, err)
			l := open(t, nil)
			err = ledger.Restore(ctx, l, snap)
			if name == "long" {
				require.ErrorIs(t, err, ledger.ErrInvalidSubject)
				return
			}
			require.NoError(t, err)
			revoked, err := l.Revoked(ctx)
			require.NoError(t, err)
			require.Len(t, revoked, 1)
			require.Equal(t, subject, revoked[0].Subject)
			after, _, err := l.(ledger.Index).RevokedAfter(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, []string{subject}, after)
		})
	}
}

// The earlier release's RevokeSubject took any UTF-8 subject, and its
// memory ledger stored the revocation (a subject holding NUL, or one of a
// few kilobytes). A snapshot of that ledger restored into PostgreSQL is
// taken, or refused with ErrInvalidSubject, never with a PostgreSQL error.
func TestEarlierReleasesRevocationsOfOddSubjectsRestoreClearly(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": longSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			src := ledger.NewMemory(nil)
			// What the earlier release's RevokeSubject stored.
			require.NoError(t, src.Revoke(ctx, ledger.RevokedSubject{
				Schema: ledger.SchemaRevokedSubject, Subject: subject, At: time.Now(), Engine: "earlier", Swept: true,
			}))
			snap, err := ledger.Export(ctx, src)
			require.NoError(t, err)
			err = ledger.Restore(ctx, open(t, nil), snap)
			if err != nil && !errors.Is(err, ledger.ErrInvalidSubject) {
				msg := err.Error()
				if len(msg) > 200 {
					msg = msg[:100] + " … " + msg[len(msg)-100:]
				}
				t.Fatalf("an earlier release's snapshot holding a revocation of %s is refused with a PostgreSQL error, not ErrInvalidSubject: %s", name, msg)
			}
		})
	}
}

// docs/workers.md: "Ledgers move between kinds with ledger.Export and ledger.Restore
// (memory ↔ bolt ↔ PostgreSQL)". RevokeSubject takes a subject holding NUL
// on the memory ledger (nothing was ever read by it: one call of a
// caller's admin tool), and that ledger still moves to PostgreSQL: its
// snapshot is restored whole.
func TestEveryLedgerMovesToPostgreSQL(t *testing.T) {
	src := ledger.NewMemory(nil)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: src})
	require.NoError(t, err)
	_, err = e.RevokeSubject("user:\x00mallory")
	require.NoError(t, err, "this release revokes the subject on the memory ledger")

	snap, err := ledger.Export(ctx, src)
	require.NoError(t, err)
	err = ledger.Restore(ctx, open(t, nil), snap)
	require.NoError(t, err, "a memory ledger this release wrote no longer moves to PostgreSQL")
}

// A subject of about 1,500 incompressible bytes: beyond MaxSubjectBytes,
// yet well inside what a PostgreSQL btree entry holds (about 2.7 kB), so a
// text primary key like the revoked table's keys it. The earlier release
// read and served such a subject (it checked only empty and UTF-8) and
// recorded an artifact derived from the version. RevokeSubject "takes any
// subject a ledger can key it by": the revocation succeeds and invalidates
// the artifact.
func TestSubjectPostgreSQLCanKeyIsRevoked(t *testing.T) {
	const uri = "file:///doc.md"
	raw := make([]byte, 1100)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	subject := "user:" + base64.RawURLEncoding.EncodeToString(raw)
	require.Greater(t, len(subject), mcpsync.MaxSubjectBytes)

	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil)
	pool, err := pgxpool.New(ctx, conn)
	require.NoError(t, err)
	defer pool.Close()
	probe := pgx.Identifier{schema, "break30_probe"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+probe+" (subject text PRIMARY KEY)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+probe+" VALUES ($1)", subject)
	require.NoError(t, err, "PostgreSQL keys a text primary key of %d bytes", len(subject))

	v := ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, URI: uri, Subject: subject, Digest: "sha256:00"}
	rec := &ledger.Record{Revision: 1, State: ledger.StateActive,
		Current: &ledger.StoredVersion{Version: v, Status: ledger.VersionServed},
		Artifacts: []ledger.DerivedArtifact{{Schema: ledger.SchemaDerivedArtifact, Index: "search",
			ArtifactID: "doc#0", Version: v, RecordedAt: time.Now()}},
	}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	rc, err := e.RevokeSubject(subject)
	if err != nil {
		msg := err.Error()
		if len(msg) > 240 {
			msg = msg[:60] + " … " + msg[len(msg)-150:]
		}
		t.Fatalf("PostgreSQL keys a revocation by a %d-byte subject, yet RevokeSubject is refused and the served version and its artifact stay unrevoked: %s", len(subject), msg)
	}
	require.Len(t, rc.Artifacts, 1, "the derived artifact is invalidated")
}
