package pgledger_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// A subject of about 1,500 incompressible bytes: beyond MaxSubjectBytes,
// yet well inside what a PostgreSQL btree entry holds (about 2.7 kB), so a
// text primary key like the revoked table's keys it (the test shows it).
// The earlier release read and served such a subject (it checked only empty
// and UTF-8) and recorded an artifact derived from the version. The change
// claims RevokeSubject "takes any subject a ledger can key it by", but
// PostgreSQL refuses every subject past 1,024 bytes: the version and its
// artifact, still in a derived index, can never be revoked, on a ledger
// that can store the revocation.
func TestBreak30RevokeKeyable(t *testing.T) {
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

	v := mcpsync.ResourceVersion{Schema: mcpsync.SchemaResourceVersion, URI: uri, Subject: subject, Digest: "sha256:00"}
	rec := &mcpsync.Record{Revision: 1, State: mcpsync.StateActive,
		Current: &mcpsync.StoredVersion{Version: v, Status: mcpsync.VersionServed},
		Artifacts: []mcpsync.DerivedArtifact{{Schema: mcpsync.SchemaDerivedArtifact, Index: "search",
			ArtifactID: "doc#0", Version: v, RecordedAt: time.Now()}},
	}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
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
