package pgledger

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mcpsync/mcpsync/internal/jsontext"
	"github.com/mcpsync/mcpsync/ledger"
)

// indexEntry is what a record is filed under in the records table's
// subjects and unknown columns: the digests of its Record.Subjects (as its
// JSON stores them), and whether it is in UNSUBSCRIBE_UNKNOWN. Every write
// of a record stores it beside the record, in the same statement.
type indexEntry struct {
	subjects [][]byte
	unknown  bool
}

func entryOf(r *ledger.Record) indexEntry {
	var digests [][]byte
	for _, s := range r.Subjects() {
		digests = append(digests, subjectDigest(s))
	}
	return indexEntry{subjects: digests, unknown: r.State == ledger.StateUnsubscribeUnknown}
}

// subjectDigest is what the records' subjects column holds for subject:
// the SHA-256 of the subject as a record's JSON stores it. Text could not
// hold a subject with NUL, nor a GIN entry one of a few kilobytes. Two
// subjects sharing a digest would share their keys; a revocation re-checks
// every record it is given, so it would only visit more of them.
func subjectDigest(subject string) []byte {
	sum := sha256.Sum256([]byte(jsontext.AsStored(subject)))
	return sum[:]
}

// indexColumns are the index entries of many records as the columns of one
// statement: per record its key and whether it is an unknown close; per
// subject, in each record's order, the subject's digest and its record's
// key.
type indexColumns struct {
	keys        []string
	unknown     []bool
	subjects    [][]byte
	subjectKeys []string
}

func (c *indexColumns) add(key string, x indexEntry) {
	c.keys, c.unknown = append(c.keys, key), append(c.unknown, x.unknown)
	for _, s := range x.subjects {
		c.subjects, c.subjectKeys = append(c.subjects, s), append(c.subjectKeys, key)
	}
}

// subjectsByKey is a statement's table (key, subjects) of the subjects
// $subjects beside the keys $keys (indexColumns' subjects and
// subjectKeys), each key's in their order.
func subjectsByKey(subjects, keys string) string {
	return `(SELECT key, array_agg(subject ORDER BY i) AS subjects
		FROM unnest(` + keys + `::text[], ` + subjects + `::bytea[]) WITH ORDINALITY AS u (key, subject, i)
		GROUP BY key)`
}

// setIndex files records under their entries, indexColumns' keys,
// unknown, subjects and subjectKeys.
var setIndex = `UPDATE {{schema}}.records AS r SET unknown = x.unknown, subjects = coalesce(s.subjects, '{}')
	FROM unnest($1::text[], $2::boolean[]) AS x (key, unknown)
	LEFT JOIN ` + subjectsByKey("$3", "$4") + ` AS s USING (key)
	WHERE r.key = x.key`

// backfillStep is how many records backfillIndex reads per query.
const backfillStep = 1024

// backfillIndex files every record of a schema of version 3, which kept no
// index, under its entry: version 4's step in Go, since only the record's
// decoder says what its subjects are. It runs in the migration's
// transaction, so no writer sees the columns before they are filled.
func backfillIndex(ctx context.Context, tx pgx.Tx, n names) error {
	// The first page has no key before it: a record may be stored under
	// the empty key.
	first := n.expand(`SELECT key, revision, record FROM {{schema}}.records ORDER BY key LIMIT $1`)
	page := n.expand(`SELECT key, revision, record FROM {{schema}}.records WHERE key > $1 ORDER BY key LIMIT $2`)
	set := n.expand(setIndex)
	after, started := "", false
	for {
		var rows pgx.Rows
		var err error
		if started {
			rows, err = tx.Query(ctx, page, after, backfillStep)
		} else {
			rows, err = tx.Query(ctx, first, backfillStep)
			started = true
		}
		if err != nil {
			return err
		}
		var cols indexColumns
		var key string
		var rev int64
		var b []byte
		read := 0
		_, err = pgx.ForEachRow(rows, []any{&key, &rev, &b}, func() error {
			read++
			after = key
			r, err := decodeRecord(key, rev, b)
			if err != nil {
				return err
			}
			if x := entryOf(r); x.unknown || len(x.subjects) > 0 {
				cols.add(key, x)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("index the records: %w", err)
		}
		if len(cols.keys) > 0 {
			if _, err := tx.Exec(ctx, set, cols.keys, cols.unknown, cols.subjects, cols.subjectKeys); err != nil {
				return fmt.Errorf("index the records: %w", err)
			}
		}
		if read < backfillStep {
			return nil
		}
	}
}

var _ ledger.Index = (*Ledger)(nil)

// SubjectKeys implements ledger.Index: one query of the records'
// GIN index on subjects.
func (l *Ledger) SubjectKeys(ctx context.Context, subject string) ([]string, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, l.q.subjectKeys, subjectDigest(subject))
	if err != nil {
		return nil, fmt.Errorf("pgledger: keys of %q: %w", subject, err)
	}
	var keys []string
	var key string
	if _, err := pgx.ForEachRow(rows, []any{&key}, func() error {
		keys = append(keys, key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgledger: keys of %q: %w", subject, err)
	}
	return keys, nil
}

// UnknownCloses implements ledger.Index: one query of the records'
// partial index of unknown closes, so one instant.
func (l *Ledger) UnknownCloses(ctx context.Context) ([]string, []*ledger.Record, error) {
	if err := l.usable(ctx); err != nil {
		return nil, nil, err
	}
	rows, err := l.pool.Query(ctx, l.q.unknownCloses)
	if err != nil {
		return nil, nil, fmt.Errorf("pgledger: unknown closes: %w", err)
	}
	keys, recs, err := readRecords(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("pgledger: unknown closes: %w", err)
	}
	return keys, recs, nil
}

// RevokedAfter implements ledger.Index: the generation and the
// subjects revoked_log numbers above gen, in one statement, so they agree.
func (l *Ledger) RevokedAfter(ctx context.Context, gen uint64) ([]string, uint64, error) {
	if err := l.usable(ctx); err != nil {
		return nil, 0, err
	}
	// A generation beyond a bigint is beyond the ledger's too.
	after := int64(min(gen, uint64(1)<<63-1))
	var now int64
	var subjects []string
	if err := l.pool.QueryRow(ctx, l.q.revokedAfter, after).Scan(&now, &subjects); err != nil {
		return nil, 0, fmt.Errorf("pgledger: revoked after %d: %w", gen, err)
	}
	if gen > uint64(now) {
		return nil, 0, fmt.Errorf("pgledger: revoked generation %d is ahead of the ledger's %d", gen, now)
	}
	if len(subjects) == 0 {
		subjects = nil
	}
	for i, k := range subjects {
		subjects[i] = subjectOfText(k)
	}
	return subjects, uint64(now), nil
}
