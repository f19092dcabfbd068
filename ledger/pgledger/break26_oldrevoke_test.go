package pgledger_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
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
// the upgrade is not refused when it revokes a subject: its Revoke stores
// the subject and raises revocation_meta.generation, but knows nothing of
// revoked_log. An engine of this release then reads the raised generation,
// asks RevokedAfter, gets no subject, and keeps serving the revoked
// subject's version: the revocation that the earlier release made visible
// to every engine (it reread the whole revoked set) is lost.
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

	// The earlier release's Revoke, statement for statement (HEAD~1
	// pgledger.go: revokeAdd, then raiseRevGen in one transaction).
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+table("revoked")+" (subject, revocation) VALUES ($1, $2) ON CONFLICT (subject) DO NOTHING", subject, b)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE "+table("revocation_meta")+" SET generation = generation + 1")
		return err
	}), "the earlier release's revocation is not refused")

	// Either the earlier release is refused, or every engine sees the
	// subject revoked.
	_, err = e.Lookup(subject, uri)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "a revoked subject's version still served")

	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	after, now, err := l.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, gen, now)
	require.Equal(t, []string{subject}, after, "generation %d counts a subject RevokedAfter never names", gen)
}
