package pgledger

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpsync/mcpsync/ledger"
)

// migrations holds the schema's versions: NNN_name.sql is version NNN, with
// {{schema}} standing for the quoted schema name and {{channel}} for the
// wake-up channel. A version, once released, is never edited: a change is a
// new file.
//
//go:embed migrations/*.sql
var migrations embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, name := range names {
		base := path.Base(name)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("pgledger: migration %s has no version", base)
		}
		b, err := migrations.ReadFile(name)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && out[len(out)-1].version >= v {
			return nil, fmt.Errorf("pgledger: migration %s out of order", base)
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	return out, nil
}

// SchemaVersion is the newest schema version this package knows; Open
// refuses a schema migrated beyond it.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// schemaName is what Options.Schema may be: a plain lower-case PostgreSQL
// identifier, so that it needs no case folding and fits a channel name.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// names are the SQL names of one schema, quoted once.
type names struct {
	schema  string // as given
	quoted  string // "schema"
	channel string // LISTEN/NOTIFY channel of outbox appends
	lockKey int64  // advisory lock of migrations
}

func newNames(schema string) (names, error) {
	if !schemaName.MatchString(schema) {
		return names{}, fmt.Errorf("pgledger: schema %q is not a lower-case identifier", schema)
	}
	h := fnv.New64a()
	h.Write([]byte("github.com/mcpsync/mcpsync/ledger/pgledger\x00" + schema))
	sum := h.Sum64()
	return names{
		schema:  schema,
		quoted:  pgx.Identifier{schema}.Sanitize(),
		channel: fmt.Sprintf("mcpsync_outbox_%016x", sum),
		lockKey: int64(sum),
	}, nil
}

// expand fills a statement's {{schema}} and {{channel}}.
func (n names) expand(sql string) string {
	return strings.NewReplacer("{{schema}}", n.quoted, "{{channel}}", n.channel).Replace(sql)
}

// migrate brings the schema to SchemaVersion in one transaction under an
// advisory lock of its own, so that workers opening it at once apply each
// version once; a schema already there costs one short transaction. A
// schema of a newer version is refused with ledger.ErrLedgerSchema.
func migrate(ctx context.Context, pool *pgxpool.Pool, n names) error {
	return migrateTo(ctx, pool, n, math.MaxInt)
}

// migrateTo is migrate stopping at version upto: tests make the schemas
// earlier releases left.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, n names, upto int) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errNoMigrations
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", n.lockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, n.expand(`
			CREATE SCHEMA IF NOT EXISTS {{schema}};
			CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now()
			)`)); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, n.expand(`SELECT coalesce(max(version), 0) FROM {{schema}}.schema_migrations`)).Scan(&current); err != nil {
			return err
		}
		if latest := ms[len(ms)-1].version; current > latest {
			return fmt.Errorf("%w: schema %s is at version %d, this package knows up to %d", ledger.ErrLedgerSchema, n.schema, current, latest)
		}
		for _, m := range ms {
			if m.version <= current || m.version > upto {
				continue
			}
			if _, err := tx.Exec(ctx, n.expand(m.sql)); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if step := steps[m.version]; step != nil {
				if err := step(ctx, tx, n); err != nil {
					return fmt.Errorf("migration %s: %w", m.name, err)
				}
			}
			if _, err := tx.Exec(ctx, n.expand(`INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ($1, $2)`), m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}

// steps are the parts of migrations that SQL cannot say: each runs right
// after its version's file, in its transaction.
var steps = map[int]func(ctx context.Context, tx pgx.Tx, n names) error{
	4: backfillIndex,
}

// errNoMigrations guards a build without its embedded files.
var errNoMigrations = errors.New("pgledger: no migrations embedded")

// Channel returns the LISTEN/NOTIFY channel on which appends to the ledger
// in schema are announced: its payload is the newest entry's number.
func Channel(schema string) string {
	n, err := newNames(schema)
	if err != nil {
		return ""
	}
	return n.channel
}
