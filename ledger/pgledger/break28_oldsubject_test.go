package pgledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The earlier release read and served subjects holding NUL or of a few
// kilobytes (it checked only empty and UTF-8), and version 3 stored their
// records. After the upgrade such a version is served to nobody. A subject
// holding NUL is revoked (revocations key it escaped); one beyond what a
// btree entry holds (about 2.7 kB) is refused with ErrInvalidSubject, not
// a PostgreSQL error.
func TestBreak28OldSubject(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00alice",
		"long": break26LongSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			const uri = "file:///a"
			conn, schema, pool := schemaAtVersion3(t)
			cas3 := "SELECT " + pgx.Identifier{schema, "compare_and_swap"}.Sanitize() + "($1, $2, $3, $4, $5, $6, $7, $8)"
			b, err := mcpsync.EncodeRecord(indexed(1, mcpsync.StateActive, subject, mcpsync.VersionServed))
			require.NoError(t, err)
			var first *int64
			require.NoError(t, pool.QueryRow(ctx, cas3, uri, int64(0), b, [][]byte(nil), 1<<16, 1024, nil, nil).Scan(&first))

			l := openIn(t, conn, schema, nil) // upgrades to version 4
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
			require.NoError(t, err)
			// Such a subject is served nothing, by any engine.
			_, err = e.Lookup(subject, uri)
			require.ErrorIs(t, err, mcpsync.ErrInvalidSubject, "the earlier release's version is not served")
			rc, err := e.RevokeSubject(subject)
			if name == "long" {
				require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
				// The record itself stays readable to the ledger's walks.
				r, err := l.Load(ctx, uri)
				require.NoError(t, err)
				require.Equal(t, []string{subject}, r.Subjects())
			} else {
				require.NoError(t, err)
				require.Len(t, rc.Versions, 1, "the earlier release's version is revoked")
				f, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
				require.NoError(t, err)
				_, err = f.Lookup(subject, uri)
				require.ErrorIs(t, err, mcpsync.ErrRevoked, "another engine sees the revocation")
			}
		})
	}
}
