// Package pgledger is a ledger.Ledger on PostgreSQL, shared by every
// worker that opens it.
//
// Every decision of the fence is one PostgreSQL transaction: the record, the
// outbox entries it appends and their numbering commit together or not at
// all, in one statement (the schema's compare_and_swap function). Outbox
// numbers come from a one-row counter updated in that transaction, so they
// are consecutive and unique across every process appending, and counters
// (Next) are rows updated in place, so no two workers are ever handed the
// same identity. A write of records commits without waiting for its WAL
// flush, so that the numbering's row and the other locks it holds are let
// go at its commit and other workers' writes do not queue behind its
// fsync; CompareAndSwap returns only once a synchronous commit made after
// it (whose flush covers it) returned, so a write it reports is durable. A connection killed mid-transaction leaves nothing behind:
// PostgreSQL rolls it back, and the pool replaces the connection on the
// next call.
//
// Several ledgers share a database, each in a PostgreSQL schema of its own
// (Options.Schema), which Open creates and migrates: the migrations are
// embedded, versioned, recorded in the schema's schema_migrations table and
// applied under an advisory lock, so workers opening the ledger at once
// apply each of them once. A schema migrated by a newer release is refused.
//
// The ledger implements ledger.Index: each record's row carries the
// subjects it is filed under and whether it is an unknown close, written
// by the statement that writes the record, and revoked_log numbers the
// revoked subjects in the order they joined, so revocations and new
// sessions read the rows they change, not every record.
//
// The ledger implements ledger.Batching: the writes of one
// CompareAndSwapAll go to PostgreSQL together, many to a statement (the
// schema's compare_and_swap_all), so that they share its commit and the
// wait for its flush, each decided on its own.
//
// WaitOutbox sleeps on LISTEN: every appending transaction notifies the
// schema's channel as it commits, so a waiter in any process wakes on an
// append in any other. RevokedGeneration reads one row per call: a value
// cached from notifications could lag a revocation another process already
// committed and returned from, and an engine must never miss that.
//
// Workers that split keys among themselves open the ledger with
// LeaseOptions: every CompareAndSwap of a key then also requires, in its
// transaction, that this worker holds the key's lease at the epoch it took
// it with (Acquire). A worker whose lease was taken over - paused,
// partitioned, presumed dead - can no longer write the key, however late
// its write arrives: the fence, not timing, decides.
package pgledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpsync/mcpsync/ledger"
)

// DefaultSchema is the PostgreSQL schema a ledger lives in when its options
// name none.
const DefaultSchema = "mcpsync"

// trimStep bounds how many outbox entries one transaction deletes, so that
// a writer never pays for a long backlog at once; the rest go with the next
// writes.
const trimStep = 1024

// controlConns is the size of a fenced ledger's pool for lease statements:
// renewal, and a round's bulk acquire or release, at once.
const controlConns = 2

// rangeStep is how many records Range reads per query: fn runs between
// queries, outside any transaction.
const rangeStep = 256

// Options configure Open and New; nil means defaults.
type Options struct {
	// Ledger sets the outbox's retention bound. Every ledger opened on one
	// schema should set the same.
	Ledger *ledger.Options
	// Schema is the PostgreSQL schema holding the ledger's tables: a
	// lower-case identifier; "" means DefaultSchema.
	Schema string
	// Leases, when set, fences every CompareAndSwap with the lease of its
	// key, held by this worker (see Acquire).
	Leases *LeaseOptions
}

// Ledger is a ledger.Ledger stored in a PostgreSQL schema. It is safe for
// concurrent use, and any number of Ledgers, in any number of processes,
// may be opened on one schema.
type Ledger struct {
	pool    *pgxpool.Pool
	ownPool bool // Close closes pool
	// control runs the lease statements apart from pool, so that a worker
	// whose reads and writes queue for pool's connections still renews,
	// takes and hands over its leases on time. nil unless leases is set;
	// Close closes it.
	control *pgxpool.Pool
	names   names
	q       queries
	retain  int64

	leases *leases  // nil unless Options.Leases fences writes
	alive  liveness // held while leases is set
	wait   waiter

	// The calls made while others of their kind are in flight go
	// together, in one statement (see batcher).
	loads   *batcher[string, loaded]
	swaps   *batcher[swap, swapped]
	revGens *batcher[struct{}, int64]

	closed chan struct{} // closed by Close
	once   sync.Once
}

var (
	_ ledger.Ledger   = (*Ledger)(nil)
	_ ledger.Batching = (*Ledger)(nil)
)

// Open connects to the database connString names (a PostgreSQL URL or
// key=value string, as pgxpool.ParseConfig reads it), creates or migrates
// the ledger's schema and returns the ledger, which owns its connection
// pool: Close closes it. ctx bounds the connecting and migrating.
func Open(ctx context.Context, connString string, opts *Options) (*Ledger, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgledger: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgledger: %w", err)
	}
	l, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l.ownPool = true
	return l, nil
}

// New returns the ledger in the schema opts names, over the caller's pool,
// creating or migrating the schema. Close leaves the pool open. WaitOutbox
// listens on a connection of its own, made with the pool's configuration.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Ledger, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	n, err := newNames(o.Schema)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, pool, n); err != nil {
		return nil, fmt.Errorf("pgledger: migrate schema %s: %w", n.schema, err)
	}
	l := &Ledger{
		pool: pool, names: n, q: newQueries(n), retain: int64(o.Ledger.Retention()),
		closed: make(chan struct{}),
	}
	if o.Leases != nil {
		if l.leases, err = newLeases(*o.Leases); err != nil {
			return nil, err
		}
		cfg := pool.Config()
		cfg.MaxConns, cfg.MinConns = controlConns, 0
		if l.control, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("pgledger: lease connections: %w", err)
		}
		l.alive.l = l
		if _, err := l.alive.ensure(ctx); err != nil {
			l.control.Close()
			return nil, err
		}
	}
	l.wait.init(l)
	l.startBatchers()
	return l, nil
}

// Close stops the ledger: calls after it fail with ledger.ErrLedgerClosed,
// waiters in WaitOutbox return it, and the listening connection (and the
// pool, when Open made it) is closed once the calls in progress end. It is
// idempotent and returns nil; the error is there so that a Ledger is an
// io.Closer.
func (l *Ledger) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.stopBatchers()
		l.alive.close()
		l.wait.stop()
		if l.control != nil {
			l.control.Close()
		}
		if l.ownPool {
			l.pool.Close()
		}
	})
	return nil
}

// Schema returns the PostgreSQL schema the ledger lives in.
func (l *Ledger) Schema() string { return l.names.schema }

// Pool returns the ledger's connection pool.
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

func (l *Ledger) usable(ctx context.Context) error {
	select {
	case <-l.closed:
		return ledger.ErrLedgerClosed
	default:
	}
	return ctx.Err()
}

// queries are the ledger's statements in its schema, expanded once.
type queries struct {
	load, loadAll, cas, casAll, rangeFirst, rangeAfter string
	flush                                              string
	next, counter, revokeAdd, revokeReplace, revGen    string
	raiseRevGen, subjectKeys, unknownCloses            string
	revokedAfter                                       string
	revoked, outbox, ack, state, last, trim, counters  string
	acquire, renew, heartbeat, release, members        string
	leave, leases, lockOwn, lockKeys, aliveLock        string
}

func newQueries(n names) queries {
	q := queries{
		load:    n.expand(`SELECT revision, record FROM {{schema}}.records WHERE key = $1`),
		loadAll: n.expand(`SELECT key, revision, record FROM {{schema}}.records WHERE key = ANY($1)`),
		cas:     n.expand(`SELECT {{schema}}.compare_and_swap_unflushed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`),
		casAll:  n.expand(`SELECT {{schema}}.compare_and_swap_all_unflushed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`),
		// A transaction with an id, committed synchronously: its flush
		// covers every commit before it (see compare_and_swap_unflushed).
		flush:      `SELECT txid_current()`,
		rangeFirst: n.expand(`SELECT key, revision, record FROM {{schema}}.records ORDER BY key LIMIT $1`),
		rangeAfter: n.expand(`SELECT key, revision, record FROM {{schema}}.records WHERE key > $2 ORDER BY key LIMIT $1`),
		// A counter's row is made by its first reservation; the WHERE
		// refuses a reservation past the top, returning no row.
		next: n.expand(`INSERT INTO {{schema}}.counters AS c (name, last) VALUES ($1, $2::text::numeric)
			ON CONFLICT (name) DO UPDATE SET last = c.last + excluded.last WHERE c.last <= $3::text::numeric
			RETURNING last::text`),
		counter:       n.expand(`SELECT last::text FROM {{schema}}.counters WHERE name = $1`),
		counters:      n.expand(`SELECT name, last::text FROM {{schema}}.counters`),
		revokeAdd:     n.expand(`INSERT INTO {{schema}}.revoked (subject, revocation) VALUES ($1, $2) ON CONFLICT (subject) DO NOTHING`),
		revokeReplace: n.expand(`UPDATE {{schema}}.revoked SET revocation = $2 WHERE subject = $1`),
		revGen:        n.expand(`SELECT generation FROM {{schema}}.revocation_meta`),
		// The subject that raises the generation to n is numbered n.
		raiseRevGen: n.expand(`WITH g AS (UPDATE {{schema}}.revocation_meta SET generation = generation + 1 RETURNING generation)
			INSERT INTO {{schema}}.revoked_log (generation, subject) SELECT generation, $1 FROM g`),
		revokedAfter: n.expand(`SELECT generation,
			ARRAY(SELECT subject FROM {{schema}}.revoked_log WHERE generation > $1 ORDER BY generation)
			FROM {{schema}}.revocation_meta`),
		subjectKeys:   n.expand(`SELECT key FROM {{schema}}.records WHERE subjects @> ARRAY[$1::bytea] ORDER BY key`),
		unknownCloses: n.expand(`SELECT key, revision, record FROM {{schema}}.records WHERE unknown ORDER BY key`),
		revoked:       n.expand(`SELECT revocation FROM {{schema}}.revoked ORDER BY subject`),
		outbox:        n.expand(`SELECT seq, entry FROM {{schema}}.outbox WHERE seq > $1 ORDER BY seq LIMIT $2`),
		ack:           n.expand(`SELECT {{schema}}.ack($1, $2, $3, $4)`),
		// One statement, one snapshot: the extent and the positions agree.
		state: n.expand(`SELECT last, first, dropped, dropped_through,
			ARRAY(SELECT name FROM {{schema}}.consumers ORDER BY name),
			ARRAY(SELECT position FROM {{schema}}.consumers ORDER BY name)
			FROM {{schema}}.outbox_meta`),
		last: n.expand(`SELECT last FROM {{schema}}.outbox_meta`),
		trim: n.expand(`SELECT {{schema}}.trim_outbox($1, $2)`),
	}
	leaseQueries(n, &q)
	return q
}

// stored turns a number of the ledger into a bigint column's value.
func stored(v uint64, what string) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("pgledger: %s %d beyond what PostgreSQL's bigint holds", what, v)
	}
	return int64(v), nil
}

func decodeRecord(key string, rev int64, b []byte) (*ledger.Record, error) {
	r, err := ledger.DecodeRecord(b)
	if err != nil {
		return nil, fmt.Errorf("record %q: %w", key, err)
	}
	if r.Revision != uint64(rev) {
		return nil, fmt.Errorf("%w: record %q stored at revision %d says %d", ledger.ErrLedgerCorrupt, key, rev, r.Revision)
	}
	return r, nil
}

// encodeEntry is an entry's stored form: its number is the row's seq.
func encodeEntry(e ledger.OutboxEntry) ([]byte, error) {
	e.Seq = 0
	return ledger.EncodeOutboxEntry(e)
}

func decodeEntry(seq int64, b []byte) (ledger.OutboxEntry, error) {
	e, err := ledger.DecodeOutboxEntry(b)
	if err != nil {
		return ledger.OutboxEntry{}, fmt.Errorf("outbox entry %d: %w", seq, err)
	}
	e.Seq = uint64(seq)
	return e, nil
}

// Load implements ledger.Ledger. Loads made while others are in flight
// share one query.
func (l *Ledger) Load(ctx context.Context, key string) (*ledger.Record, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	got, err := l.loads.do(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("pgledger: load %s: %w", key, err)
	}
	if !got.found {
		return nil, nil
	}
	r, err := decodeRecord(key, got.rev, got.record)
	if err != nil {
		return nil, fmt.Errorf("pgledger: load: %w", err)
	}
	return r, nil
}

// CompareAndSwap implements ledger.Ledger in one statement: the revision
// check, the record and its index entry, its outbox entries, their
// numbering, the trim and the notification of waiters commit together. On
// a fenced ledger it also requires this worker's lease of key (a
// *LeaseError otherwise, matching ErrNotLeaseholder).
func (l *Ledger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []ledger.OutboxEntry) (uint64, bool, error) {
	s, err := l.newSwap(ctx, ledger.Swap{Key: key, Prev: prev, Next: next, Entries: entries})
	if err != nil {
		return 0, false, err
	}
	got, err := l.swaps.do(ctx, s)
	r := l.swapResult(s, got, err)
	return r.FirstSeq, r.OK, r.Err
}

// LoadAll implements ledger.Batching: every key is handed to the reads'
// batcher at once, so that they share statements (up to maxBatch keys
// each).
func (l *Ledger) LoadAll(ctx context.Context, keys []string) ([]*ledger.Record, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	got, errs := l.loads.doAll(ctx, keys)
	records := make([]*ledger.Record, len(keys))
	for i, key := range keys {
		if errs[i] != nil {
			return nil, fmt.Errorf("pgledger: load %s: %w", key, errs[i])
		}
		if !got[i].found {
			continue
		}
		r, err := decodeRecord(key, got[i].rev, got[i].record)
		if err != nil {
			return nil, fmt.Errorf("pgledger: load: %w", err)
		}
		records[i] = r
	}
	return records, nil
}

// CompareAndSwapAll implements ledger.Batching: every swap is handed to
// the writes' batcher at once, so that they share statements (up to
// maxBatch writes each, one commit and one wait for its flush), and each
// is decided as CompareAndSwap would decide it. A key an earlier swap of
// the call named is refused with an error.
func (l *Ledger) CompareAndSwapAll(ctx context.Context, swaps []ledger.Swap) []ledger.SwapResult {
	results := make([]ledger.SwapResult, len(swaps))
	ws := make([]swap, 0, len(swaps))
	at := make([]int, 0, len(swaps)) // ws[j] is swaps[at[j]]
	seen := make(map[string]bool, len(swaps))
	for i, sw := range swaps {
		if seen[sw.Key] {
			results[i].Err = fmt.Errorf("pgledger: %s: written twice in one batch", sw.Key)
			continue
		}
		seen[sw.Key] = true
		s, err := l.newSwap(ctx, sw)
		if err != nil {
			results[i].Err = err
			continue
		}
		ws, at = append(ws, s), append(at, i)
	}
	if len(ws) == 0 {
		return results
	}
	got, errs := l.swaps.doAll(ctx, ws)
	for j, s := range ws {
		results[at[j]] = l.swapResult(s, got[j], errs[j])
	}
	return results
}

// newSwap checks and encodes one compare-and-swap, with the epoch of its
// key's lease on a fenced ledger.
func (l *Ledger) newSwap(ctx context.Context, sw ledger.Swap) (swap, error) {
	key, prev, next := sw.Key, sw.Prev, sw.Next
	if next == nil || next.Revision != prev+1 {
		return swap{}, fmt.Errorf("pgledger: %s: revision must go from %d to %d", key, prev, prev+1)
	}
	if err := l.usable(ctx); err != nil {
		return swap{}, err
	}
	p, err := stored(prev, "revision")
	if err != nil || prev == math.MaxInt64 {
		return swap{}, fmt.Errorf("pgledger: %s: revision %d beyond what PostgreSQL's bigint holds", key, prev+1)
	}
	rec, err := ledger.EncodeRecord(next)
	if err != nil {
		return swap{}, err
	}
	bodies := make([][]byte, len(sw.Entries))
	for i, e := range sw.Entries {
		if bodies[i], err = encodeEntry(e); err != nil {
			return swap{}, err
		}
	}
	epoch, err := l.fence(key)
	if err != nil {
		return swap{}, err
	}
	return swap{key: key, prev: p, record: rec, entries: bodies, epoch: epoch, index: entryOf(next)}, nil
}

// swapResult is what CompareAndSwap returns for s, which the batcher
// answered with got or err.
func (l *Ledger) swapResult(s swap, got swapped, err error) ledger.SwapResult {
	switch {
	case err != nil:
		return ledger.SwapResult{Err: fmt.Errorf("pgledger: store %s: %w", s.key, err)}
	case got.fenced:
		return ledger.SwapResult{Err: fmt.Errorf("pgledger: store %s: %w", s.key, l.lost(s.key, s.epoch))}
	case !got.stored:
		return ledger.SwapResult{}
	}
	return ledger.SwapResult{FirstSeq: uint64(got.first), OK: true}
}

// Range implements ledger.Ledger. It reads rangeStep records per query and
// calls fn between queries.
func (l *Ledger) Range(ctx context.Context, fn func(key string, r *ledger.Record) bool) error {
	var after *string
	for {
		if err := l.usable(ctx); err != nil {
			return err
		}
		var rows pgx.Rows
		var err error
		if after == nil {
			rows, err = l.pool.Query(ctx, l.q.rangeFirst, rangeStep)
		} else {
			rows, err = l.pool.Query(ctx, l.q.rangeAfter, rangeStep, *after)
		}
		if err != nil {
			return fmt.Errorf("pgledger: range: %w", err)
		}
		keys, recs, err := readRecords(rows)
		if err != nil {
			return fmt.Errorf("pgledger: range: %w", err)
		}
		for i, k := range keys {
			if !fn(k, recs[i]) {
				return nil
			}
		}
		if len(keys) < rangeStep {
			return nil
		}
		after = &keys[len(keys)-1]
	}
}

// Next implements ledger.Ledger: one statement reserves the values, so
// every worker on the schema draws from the same counter.
func (l *Ledger) Next(ctx context.Context, c ledger.Counter, n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("pgledger: reserve 0 values of %s", c)
	}
	if err := l.usable(ctx); err != nil {
		return 0, err
	}
	num := func(v uint64) string { return strconv.FormatUint(v, 10) }
	var last string
	err := l.pool.QueryRow(ctx, l.q.next, string(c), num(n), num(math.MaxUint64-n)).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		// Refused as past the top: say how far it is.
		if err = l.pool.QueryRow(ctx, l.q.counter, string(c)).Scan(&last); err == nil {
			var held uint64
			if held, err = strconv.ParseUint(last, 10, 64); err == nil {
				_, err = ledger.Reserve(c, held, n)
			}
		}
		return 0, fmt.Errorf("pgledger: next %s: %w", c, err)
	}
	if err != nil {
		return 0, fmt.Errorf("pgledger: next %s: %w", c, err)
	}
	v, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pgledger: next %s: %w: %w", c, ledger.ErrLedgerCorrupt, err)
	}
	return v - n + 1, nil
}

// Revoke implements ledger.Ledger: a new subject raises the generation,
// and is numbered with it (RevokedAfter), in the transaction that stores
// it.
func (l *Ledger) Revoke(ctx context.Context, r ledger.RevokedSubject) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	b, err := encodeRevoked(r)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, keysEscaped); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, l.q.revokeAdd, subjectText(r.Subject), b)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			_, err = tx.Exec(ctx, l.q.revokeReplace, subjectText(r.Subject), b)
			return err
		}
		_, err = tx.Exec(ctx, l.q.raiseRevGen, subjectText(r.Subject))
		return err
	})
	if tooLong(err) {
		return fmt.Errorf("pgledger: revoke a subject of %d bytes: %w: PostgreSQL keys no revocation by it (%w)",
			len(r.Subject), ledger.ErrInvalidSubject, err)
	}
	if err != nil {
		return fmt.Errorf("pgledger: revoke %q: %w", r.Subject, err)
	}
	return nil
}

// keysEscaped tells, in its transaction, the trigger that guards table
// revoked that its writer keys subjects by subjectText: a writer of an
// earlier release, which does not, is refused.
const keysEscaped = `SELECT set_config('mcpsync.revocations', 'escaped', true)`

// subjectText is subject as the revoked and revoked_log tables key it:
// PostgreSQL text holds no NUL, so each backslash is doubled and each NUL
// written as a backslash and a zero (subjectOfText reverses it).
func subjectText(subject string) string {
	if !strings.ContainsAny(subject, "\\\x00") {
		return subject
	}
	return strings.NewReplacer("\\", "\\\\", "\x00", "\\0").Replace(subject)
}

// subjectOfText is the subject subjectText wrote as k.
func subjectOfText(k string) string {
	if !strings.Contains(k, "\\") {
		return k
	}
	return strings.NewReplacer("\\\\", "\\", "\\0", "\x00").Replace(k)
}

// tooLong says err is PostgreSQL's refusal of an index entry over its size
// (a btree entry holds about 2.7 kB), naming a table of revocations.
func tooLong(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "54000" && strings.Contains(pgErr.Message, "revoked")
}

// RevokedGeneration implements ledger.Ledger with a one-row read. Nothing
// cheaper is exact: once another process's Revoke has returned, an engine
// here must see the subject, and only the database knows it at once.
func (l *Ledger) RevokedGeneration(ctx context.Context) (uint64, error) {
	if err := l.usable(ctx); err != nil {
		return 0, err
	}
	gen, err := l.revGens.do(ctx, struct{}{})
	if err != nil {
		return 0, fmt.Errorf("pgledger: revoked generation: %w", err)
	}
	return uint64(gen), nil
}

// Revoked implements ledger.Ledger.
func (l *Ledger) Revoked(ctx context.Context) ([]ledger.RevokedSubject, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	out, err := readRevoked(ctx, l.pool, l.q.revoked)
	if err != nil {
		return nil, fmt.Errorf("pgledger: revoked: %w", err)
	}
	return out, nil
}

// readRecords reads rows of (key, revision, record), decoding each record.
func readRecords(rows pgx.Rows) ([]string, []*ledger.Record, error) {
	var keys []string
	var recs []*ledger.Record
	var key string
	var rev int64
	var b []byte
	_, err := pgx.ForEachRow(rows, []any{&key, &rev, &b}, func() error {
		r, err := decodeRecord(key, rev, b)
		keys, recs = append(keys, key), append(recs, r)
		return err
	})
	return keys, recs, err
}

// querier is what reads need: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readRevoked(ctx context.Context, q querier, sql string) ([]ledger.RevokedSubject, error) {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := []ledger.RevokedSubject{}
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&b}, func() error {
		r, err := decodeRevoked(b)
		out = append(out, r)
		return err
	})
	// The table orders keys (subjectText), not subjects.
	slices.SortFunc(out, func(a, b ledger.RevokedSubject) int { return strings.Compare(a.Subject, b.Subject) })
	return out, err
}

// Outbox implements ledger.Ledger.
func (l *Ledger) Outbox(ctx context.Context, after uint64, max int) ([]ledger.OutboxEntry, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	if after >= math.MaxInt64 {
		return nil, nil
	}
	var limit *int
	if max > 0 {
		limit = &max
	}
	out, err := readOutbox(ctx, l.pool, l.q.outbox, int64(after), limit)
	if err != nil {
		return nil, fmt.Errorf("pgledger: outbox: %w", err)
	}
	return out, nil
}

func readOutbox(ctx context.Context, q querier, sql string, after int64, limit *int) ([]ledger.OutboxEntry, error) {
	rows, err := q.Query(ctx, sql, after, limit)
	if err != nil {
		return nil, err
	}
	var out []ledger.OutboxEntry
	var seq int64
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&seq, &b}, func() error {
		e, err := decodeEntry(seq, b)
		out = append(out, e)
		return err
	})
	return out, err
}

// Ack implements ledger.Ledger in one statement (the schema's ack
// function), which trims what every consumer passed.
func (l *Ledger) Ack(ctx context.Context, consumer string, seq uint64) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	// Positions stop at the newest entry, which a bigint holds.
	s := int64(min(seq, math.MaxInt64))
	if _, err := l.pool.Exec(ctx, l.q.ack, consumer, s, l.retain, trimStep); err != nil {
		return fmt.Errorf("pgledger: ack %q: %w", consumer, err)
	}
	return nil
}

// OutboxState implements ledger.Ledger in one statement.
func (l *Ledger) OutboxState(ctx context.Context) (ledger.OutboxState, error) {
	if err := l.usable(ctx); err != nil {
		return ledger.OutboxState{}, err
	}
	st, err := readState(ctx, l.pool, l.q.state)
	if err != nil {
		return ledger.OutboxState{}, fmt.Errorf("pgledger: outbox state: %w", err)
	}
	return st, nil
}

func readState(ctx context.Context, q querier, sql string) (ledger.OutboxState, error) {
	var last, first, dropped, through int64
	var names []string
	var positions []int64
	if err := q.QueryRow(ctx, sql).Scan(&last, &first, &dropped, &through, &names, &positions); err != nil {
		return ledger.OutboxState{}, err
	}
	st := ledger.OutboxState{
		Last: uint64(last), First: uint64(first), Dropped: uint64(dropped), DroppedThrough: uint64(through),
		Consumers: make(map[string]uint64, len(names)),
	}
	for i, name := range names {
		st.Consumers[name] = uint64(positions[i])
	}
	return st, nil
}
