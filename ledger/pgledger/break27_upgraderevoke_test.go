package pgledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// A revocation by a worker of the earlier release (version 3) already
// under way when the upgrade to version 4 begins is not refused: it has
// raised revocation_meta.generation before the upgrade created the
// revocations_logged trigger, and commits while the upgrade waits for
// that row. The upgrade numbered the revoked subjects it could see, so
// the subject is in the revoked set but never in revoked_log: the
// generation no longer counts the subjects that joined, and RevokedAfter
// never names it (mcpsync.LedgerIndex: RevokedGeneration is the number of
// subjects that joined).
func TestBreak27UpgradeRacesOldRevoke(t *testing.T) {
	conn, schema, pool := schemaAtVersion3(t)
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }

	// One subject revoked before, by the earlier release.
	revocation := func(subject string) []byte {
		b, err := json.Marshal(mcpsync.RevokedSubject{Schema: mcpsync.SchemaRevokedSubject, Subject: subject})
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
	break26WaitBlocked(t, watch, old.PgConn().PID())
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
