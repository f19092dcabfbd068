package pgledger_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// A version-3 schema could revoke both `corp\alice` and `corp\\alice`
// (it refused only NUL and subjects beyond MaxSubjectBytes). Migration 4
// doubles the backslashes of every revoked subject in one UPDATE of the
// primary key: `corp\alice` becomes `corp\\alice`, which is still the
// other subject's key when the row is written, so the upgrade fails and
// the ledger can no longer be opened.
func TestBreak31UpgradeCollide(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	for _, subject := range []string{`corp\alice`, `corp\\alice`} {
		b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
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
