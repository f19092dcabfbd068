package pgledger

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MigrateTo brings schema to version, as a release whose newest migration
// that is left it.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, version int) error {
	n, err := newNames(schema)
	if err != nil {
		return err
	}
	return migrateTo(ctx, pool, n, version)
}

// MaxBatch is how many writes one statement carries at most.
const MaxBatch = maxBatch
