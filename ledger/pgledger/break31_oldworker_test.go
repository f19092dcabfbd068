package pgledger_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// design.md: workers of an earlier PostgreSQL schema are refused after
// the upgrade, revocations alike (a transaction that leaves the revoked
// generation apart from revoked_log fails at commit). A worker of the
// earlier release (version 3: revokeAdd ON CONFLICT DO NOTHING; no row
// added, revokeReplace; else raise the generation) still running after
// the upgrade revokes `corp\\alice`, its subject written raw. That text is
// now the key of `corp\alice`, revoked before: nothing is added, so the
// generation is not raised and the commit is not refused, and the
// revocation of `corp\alice` is overwritten by that of `corp\\alice`. The
// revoked set no longer names `corp\alice`: an engine opened afterwards
// serves it again.
func TestBreak31OldWorker(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	// The earlier release's Revoke, statement for statement.
	oldRevoke := func(subject string) error {
		b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
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
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.Lookup(`corp\alice`, "file:///a")
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "an engine opened afterwards still refuses the revoked subject")
}
