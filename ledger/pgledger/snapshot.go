package pgledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/mcpsync/mcpsync/ledger"
)

func encodeRevoked(r ledger.RevokedSubject) ([]byte, error) { return json.Marshal(r) }

func decodeRevoked(b []byte) (ledger.RevokedSubject, error) {
	var r ledger.RevokedSubject
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: decode revocation: %w", ledger.ErrLedgerCorrupt, err)
	}
	if r.Schema != ledger.SchemaRevokedSubject {
		return r, fmt.Errorf("%w: revocation schema %q", ledger.ErrLedgerSchema, r.Schema)
	}
	return r, nil
}

// Export implements ledger.Ledger: one REPEATABLE READ transaction, so
// every query reads the same instant and no record is torn from its entries.
func (l *Ledger) Export(ctx context.Context) (ledger.Snapshot, error) {
	if err := l.usable(ctx); err != nil {
		return ledger.Snapshot{}, err
	}
	snap := ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{},
		Counters: map[ledger.Counter]uint64{}, Outbox: []ledger.OutboxEntry{},
	}
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, l.names.expand(`SELECT key, revision, record FROM {{schema}}.records`))
		if err != nil {
			return err
		}
		var key string
		var rev int64
		var b []byte
		if _, err := pgx.ForEachRow(rows, []any{&key, &rev, &b}, func() error {
			r, err := decodeRecord(key, rev, b)
			snap.Records[key] = r
			return err
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, l.q.counters)
		if err != nil {
			return err
		}
		var name, last string
		if _, err := pgx.ForEachRow(rows, []any{&name, &last}, func() error {
			v, err := strconv.ParseUint(last, 10, 64)
			snap.Counters[ledger.Counter(name)] = v
			return err
		}); err != nil {
			return err
		}
		if snap.Revoked, err = readRevoked(ctx, tx, l.q.revoked); err != nil {
			return err
		}
		entries, err := readOutbox(ctx, tx, l.q.outbox, 0, nil)
		if err != nil {
			return err
		}
		snap.Outbox = append(snap.Outbox, entries...)
		snap.State, err = readState(ctx, tx, l.q.state)
		return err
	})
	if err != nil {
		return ledger.Snapshot{}, fmt.Errorf("pgledger: export: %w", err)
	}
	return snap, nil
}

// Restore implements ledger.Ledger: one transaction, into an empty schema.
// It locks the ledger's tables against writers first, so that nothing
// lands between its check that they are empty and its commit; a number of
// the snapshot beyond what a bigint holds is refused.
func (l *Ledger) Restore(ctx context.Context, snap ledger.Snapshot) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	snap, err := snap.ForRestore()
	if err != nil {
		return fmt.Errorf("pgledger: restore: %w", err)
	}
	rows, err := restoreRows(snap)
	if err != nil {
		return fmt.Errorf("pgledger: restore: %w", err)
	}
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		// In the order every writer takes them (records before
		// outbox_meta before consumers), so that no writer deadlocks it.
		if _, err := tx.Exec(ctx, l.names.expand(`LOCK TABLE {{schema}}.records, {{schema}}.outbox_meta,
			{{schema}}.consumers, {{schema}}.outbox, {{schema}}.counters, {{schema}}.revoked,
			{{schema}}.revocation_meta, {{schema}}.revoked_log IN EXCLUSIVE MODE`)); err != nil {
			return err
		}
		var used bool
		if err := tx.QueryRow(ctx, l.names.expand(`SELECT EXISTS (SELECT FROM {{schema}}.records)
			OR EXISTS (SELECT FROM {{schema}}.counters) OR EXISTS (SELECT FROM {{schema}}.revoked)
			OR EXISTS (SELECT FROM {{schema}}.consumers) OR (SELECT last FROM {{schema}}.outbox_meta) > 0`)).Scan(&used); err != nil {
			return err
		}
		if used {
			return ledger.ErrLedgerNotEmpty
		}
		b := &pgx.Batch{}
		b.Queue(l.names.expand(`INSERT INTO {{schema}}.records (key, revision, record, unknown, subjects, indexed)
			SELECT key, r.revision, r.record, r.unknown, coalesce(s.subjects, '{}'), r.revision
			FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::boolean[]) AS r (key, revision, record, unknown)
			LEFT JOIN `+subjectsByKey("$5", "$6")+` AS s USING (key)`),
			rows.keys, rows.revisions, rows.records, rows.index.unknown, rows.index.subjects, rows.index.subjectKeys)
		b.Queue(l.names.expand(`INSERT INTO {{schema}}.counters (name, last)
			SELECT n, v::numeric FROM unnest($1::text[], $2::text[]) AS u (n, v)`), rows.counters, rows.values)
		b.Queue(keysEscaped)
		b.Queue(l.names.expand(`INSERT INTO {{schema}}.revoked (subject, revocation)
			SELECT * FROM unnest($1::text[], $2::bytea[])`), rows.subjects, rows.revocations)
		// The snapshot's subjects join in its order.
		b.Queue(l.names.expand(`WITH n AS (SELECT coalesce(cardinality($1::text[]), 0) AS n),
			g AS (UPDATE {{schema}}.revocation_meta SET generation = generation + n.n FROM n
				RETURNING generation - n.n AS before)
			INSERT INTO {{schema}}.revoked_log (generation, subject)
			SELECT g.before + i, subject FROM g, unnest($1::text[]) WITH ORDINALITY AS u (subject, i)`), rows.subjects)
		b.Queue(l.names.expand(`INSERT INTO {{schema}}.outbox (seq, entry)
			SELECT * FROM unnest($1::bigint[], $2::bytea[])`), rows.seqs, rows.entries)
		b.Queue(l.names.expand(`INSERT INTO {{schema}}.consumers (name, position)
			SELECT * FROM unnest($1::text[], $2::bigint[])`), rows.consumers, rows.positions)
		b.Queue(l.names.expand(`UPDATE {{schema}}.outbox_meta SET last = $1, first = $2, dropped = $3, dropped_through = $4`),
			rows.last, rows.first, rows.dropped, rows.droppedThrough)
		b.Queue(l.q.trim, l.retain, trimStep)
		// Waiters for restored entries wake when this commits.
		b.Queue(`SELECT pg_notify($1, $2)`, l.names.channel, strconv.FormatInt(rows.last, 10))
		return tx.SendBatch(ctx, b).Close()
	})
	if errors.Is(err, ledger.ErrLedgerNotEmpty) {
		return err
	}
	if tooLong(err) {
		return fmt.Errorf("pgledger: restore: %w: PostgreSQL keys no revocation by a subject this long (%w)", ledger.ErrInvalidSubject, err)
	}
	if err != nil {
		return fmt.Errorf("pgledger: restore: %w", err)
	}
	return nil
}

// snapshotRows is a snapshot as column arrays.
type snapshotRows struct {
	keys                                 []string
	revisions                            []int64
	records                              [][]byte
	index                                indexColumns
	counters, values                     []string
	subjects                             []string
	revocations                          [][]byte
	seqs                                 []int64
	entries                              [][]byte
	consumers                            []string
	positions                            []int64
	last, first, dropped, droppedThrough int64
}

func restoreRows(snap ledger.Snapshot) (snapshotRows, error) {
	var rows snapshotRows
	var errs []error
	num := func(v uint64, what string) int64 {
		n, err := stored(v, what)
		errs = append(errs, err)
		return n
	}
	for key, r := range snap.Records {
		b, err := ledger.EncodeRecord(r)
		errs = append(errs, err)
		rows.keys, rows.revisions, rows.records = append(rows.keys, key), append(rows.revisions, num(r.Revision, "revision")), append(rows.records, b)
		rows.index.add(key, entryOf(r))
	}
	for c, v := range snap.Counters {
		rows.counters, rows.values = append(rows.counters, string(c)), append(rows.values, strconv.FormatUint(v, 10))
	}
	// A subject named twice joins once, where it is first named; the
	// later revocation replaces the earlier.
	at := make(map[string]int, len(snap.Revoked))
	for _, r := range snap.Revoked {
		b, err := encodeRevoked(r)
		errs = append(errs, err)
		if i, ok := at[r.Subject]; ok {
			rows.revocations[i] = b
			continue
		}
		at[r.Subject] = len(rows.subjects)
		rows.subjects, rows.revocations = append(rows.subjects, subjectText(r.Subject)), append(rows.revocations, b)
	}
	for _, e := range snap.Outbox {
		b, err := encodeEntry(e)
		errs = append(errs, err)
		rows.seqs, rows.entries = append(rows.seqs, num(e.Seq, "outbox entry")), append(rows.entries, b)
	}
	for name, pos := range snap.State.Consumers {
		rows.consumers, rows.positions = append(rows.consumers, name), append(rows.positions, num(pos, "consumer position"))
	}
	// One past the last must be a bigint too: it is the first retained
	// when none is.
	rows.last = num(snap.State.Last, "outbox entry")
	if rows.last == math.MaxInt64 {
		errs = append(errs, fmt.Errorf("pgledger: outbox entry %d is the last a bigint holds", rows.last))
	}
	rows.first = rows.last + 1
	if len(snap.Outbox) > 0 {
		rows.first = rows.seqs[0]
	}
	rows.dropped = num(snap.State.Dropped, "dropped count")
	rows.droppedThrough = num(snap.State.DroppedThrough, "outbox entry")
	return rows, errors.Join(errs...)
}
