package pgledger_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// The earlier release read and served subjects holding NUL or of a few
// kilobytes (it checked only empty and UTF-8), and version 3 stored their
// records. After the upgrade this release still serves such a version
// (Lookup), and RevokeSubject of its subject fails with a PostgreSQL error,
// neither ErrInvalidSubject nor a revocation: the version is served by
// every engine for ever, with no way to withdraw it.
func TestBreak28OldSubject(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00alice",
		"long": break26LongSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			const uri = "file:///a"
			conn, schema := pgtest.Schema(t)
			pool, err := pgxpool.New(ctx, conn)
			require.NoError(t, err)
			defer pool.Close()
			require.NoError(t, pgledger.MigrateTo(ctx, pool, schema, 3))
			cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
			b, err := mcpsync.EncodeRecord(indexed(1, mcpsync.StateActive, subject, mcpsync.VersionServed))
			require.NoError(t, err)
			var first *int64
			require.NoError(t, pool.QueryRow(ctx, cas3, uri, int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))

			l := openIn(t, conn, schema, nil) // upgrades to version 4
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
			require.NoError(t, err)
			_, err = e.Lookup(subject, uri)
			require.NoError(t, err, "the earlier release's version is served")

			_, err = e.RevokeSubject(subject)
			if err != nil {
				msg := err.Error()
				if len(msg) > 200 {
					msg = msg[:100] + " … " + msg[len(msg)-100:]
				}
				t.Fatalf("a served subject can never be revoked (invalid subject: %v): %s",
					errors.Is(err, mcpsync.ErrInvalidSubject), msg)
			}
			f, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
			require.NoError(t, err)
			_, err = f.Lookup(subject, uri)
			require.ErrorIs(t, err, mcpsync.ErrRevoked, "the next engine still serves the revoked subject")
		})
	}
}
