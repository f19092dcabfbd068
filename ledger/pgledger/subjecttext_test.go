package pgledger_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A subject a version-3 schema revoked keeps its revocation through the
// upgrade, backslashes and all: RevokedAfter names it as it was, and
// revoking it again adds nothing.
func TestUpgradeKeepsRevokedSubjects(t *testing.T) {
	const subject = `corp\alice\0`
	conn, schema, pool := schemaAtVersion3(t)
	b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
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

	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
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
