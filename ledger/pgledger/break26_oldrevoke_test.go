package pgledger_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// break26Read has subject read uri through e, accepted.
func break26Read(t *testing.T, e *mcpsync.Engine, uri, subject, text string) {
	t.Helper()
	_, err := e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, mcpsync.TriggerInitial)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: text}}))
	require.NoError(t, err)
	require.True(t, out.Accepted)
}

// A worker of the earlier release (schema version 3) still running after
// the upgrade revokes a subject: its Revoke stores the subject and raises
// revocation_meta.generation, but knows nothing of revoked_log, so an
// engine of this release would read the raised generation, ask
// RevokedAfter, get no subject, and keep serving the revoked subject's
// version. The revocation is refused instead (SQLSTATE MCF02), leaving
// nothing behind, and the same revocation by this release is seen.
func TestBreak26OldReleaseRevokeUnseen(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	l := openIn(t, conn, schema, nil) // upgrades to version 4

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const uri, subject = "file:///secret.md", "user:mallory"
	break26Read(t, e, uri, subject, "secret")
	_, err = e.Lookup(subject, uri)
	require.NoError(t, err)

	// The earlier release's Revoke, statement for statement (schema version 3:
	// revokeAdd, then raiseRevGen, in one transaction).
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
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
