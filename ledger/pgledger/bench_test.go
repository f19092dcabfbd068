package pgledger_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mark3labs/mcp-go/client/transport"
	"golang.org/x/time/rate"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// benchRecord is a record as the fence stores one: a version with its
// contents.
func benchRecord(key string, rev uint64) *ledger.Record {
	r := record(key, rev)
	r.Current = &ledger.StoredVersion{
		Version: ledger.ResourceVersion{
			Schema: ledger.SchemaResourceVersion, URI: key, ReadOrdinal: rev, Subject: "user:alice",
			Digest: "sha256:" + strings.Repeat("0f", 32),
		},
		Contents: []ledger.Content{{URI: key, MIMEType: "text/markdown", Text: fmt.Sprintf("version %d of the document", rev)}},
		Status:   ledger.VersionServed,
	}
	return r
}

// BenchmarkAccept compares the ledger's CompareAndSwap of one record with
// one outbox entry - revision check, record, numbering, entry, trim and
// notification in one transaction - with a bare transaction over the same
// pool doing the least an accept needs: a one-row UPDATE guarded by the
// revision and an INSERT of the entry, of the same sizes. Both commit with
// the server's durability settings; run with -count to interleave them.
func BenchmarkAccept(b *testing.B) {
	conn, schema := pgtest.Schema(b)
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	const key = "file:///docs/a.md"
	rec, _ := ledger.EncodeRecord(benchRecord(key, 1))
	ent, _ := ledger.EncodeOutboxEntry(entry(key, 1))
	bare := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	if _, err := l.Pool().Exec(ctx, fmt.Sprintf(`
		CREATE TABLE %s (key text PRIMARY KEY, revision bigint NOT NULL, record bytea NOT NULL);
		CREATE TABLE %s (seq bigint PRIMARY KEY, entry bytea NOT NULL);
		INSERT INTO %[1]s VALUES ('%[3]s', 0, '')`, bare("bare_records"), bare("bare_outbox"), key)); err != nil {
		b.Fatal(err)
	}
	update := "UPDATE " + bare("bare_records") + " SET revision = $2, record = $3 WHERE key = $1 AND revision = $4"
	insert := "INSERT INTO " + bare("bare_outbox") + " (seq, entry) VALUES ($1, $2)"
	var bareRev, rev uint64
	doBare := func(b *testing.B) {
		bareRev++
		err := pgx.BeginFunc(ctx, l.Pool(), func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, update, key, bareRev, rec, bareRev-1)
			if err != nil || tag.RowsAffected() != 1 {
				return fmt.Errorf("update: %v, %d rows", err, tag.RowsAffected())
			}
			_, err = tx.Exec(ctx, insert, bareRev, ent)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	doLedger := func(b *testing.B) {
		rev++
		_, ok, err := l.CompareAndSwap(ctx, key, rev-1, benchRecord(key, rev), []ledger.OutboxEntry{entry(key, rev)})
		if err != nil || !ok {
			b.Fatal("not stored", err)
		}
	}

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doBare(b)
		}
	})
	b.Run("ledger", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doLedger(b)
		}
	})
	// Go runs each sub-benchmark's -count repetitions back to back; this
	// one alternates the two, one of each per iteration, so that both meet
	// the same load on the server and the same state of its files.
	b.Run("interleaved", func(b *testing.B) {
		var bareTime, ledgerTime time.Duration
		n := 0
		for b.Loop() {
			start := time.Now()
			doBare(b)
			mid := time.Now()
			doLedger(b)
			bareTime, ledgerTime, n = bareTime+mid.Sub(start), ledgerTime+time.Since(mid), n+1
		}
		b.ReportMetric(float64(bareTime.Nanoseconds())/float64(n), "bare-ns/op")
		b.ReportMetric(float64(ledgerTime.Nanoseconds())/float64(n), "ledger-ns/op")
		b.ReportMetric(float64(ledgerTime)/float64(bareTime), "ledger/bare")
	})
}

// BenchmarkRevokedGeneration is the read every accept and lookup makes
// twice: one row, one round trip.
func BenchmarkRevokedGeneration(b *testing.B) {
	conn, schema := pgtest.Schema(b)
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.RevokedGeneration(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcceptWorkers measures accepted versions per second (accepts/s)
// with 1, 2 and 3 ledgers, each with its own pool as a worker process has,
// writing distinct keys at once into one schema, one key and one write at
// a time each. Every append takes the outbox numbering's row until its
// transaction ends; the transaction commits without waiting for its flush
// and the ledger waits for it after, so the appends of several workers
// share fsyncs instead of taking turns for them. The no-flush cases run
// the same with synchronous_commit off on every connection: what the
// accepts cost without the WAL flush, the ceiling that shows how much of
// an accept the flush is.
func BenchmarkAcceptWorkers(b *testing.B) {
	for _, c := range []struct {
		workers int
		noFlush bool
	}{{1, false}, {2, false}, {3, false}, {1, true}, {3, true}} {
		name := fmt.Sprintf("workers=%d", c.workers)
		if c.noFlush {
			name += ",no-flush"
		}
		n := c.workers
		b.Run(name, func(b *testing.B) {
			conn, schema := pgtest.Schema(b)
			cfg, err := pgxpool.ParseConfig(conn)
			if err != nil {
				b.Fatal(err)
			}
			if c.noFlush {
				cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
			}
			ls := make([]*pgledger.Ledger, n)
			for i := range ls {
				pool, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pool.Close)
				l, err := pgledger.New(ctx, pool, &pgledger.Options{Schema: schema})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				ls[i] = l
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w, l := range ls {
				wg.Go(func() {
					key := fmt.Sprintf("file:///docs/worker-%d.md", w)
					for rev := uint64(1); left.Add(-1) >= 0; rev++ {
						_, ok, err := l.CompareAndSwap(ctx, key, rev-1, benchRecord(key, rev), []ledger.OutboxEntry{entry(key, rev)})
						if err != nil || !ok {
							failed.Store(fmt.Sprint("not stored: ", err))
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if msg := failed.Load(); msg != nil {
				b.Fatal(msg)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "accepts/s")
		})
	}
}

// BenchmarkConsume is Engine.Consume on the PostgreSQL ledger, per entry:
// backlog reads entries appended before it started, in reads of 256;
// trickle appends one entry at a time and waits for the consumer to be
// handed it (append, notification, the consumer's reads). Each run has a
// ledger of its own.
func BenchmarkConsume(b *testing.B) {
	const key, name = "file:///docs/a.md", "index"
	type run struct {
		l   *pgledger.Ledger
		e   *mcpsync.Engine
		rev uint64
	}
	open := func(b *testing.B) *run {
		conn, schema := pgtest.Schema(b)
		l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Ledger: &ledger.Options{OutboxRetention: 1 << 24}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Acknowledge(ctx, name, 0); err != nil {
			b.Fatal(err)
		}
		return &run{l: l, e: e}
	}
	appendEntries := func(b *testing.B, r *run, n int) {
		entries := make([]ledger.OutboxEntry, n)
		for i := range entries {
			entries[i] = entry(key, r.rev+1)
		}
		r.rev++
		if _, ok, err := r.l.CompareAndSwap(ctx, key, r.rev-1, benchRecord(key, r.rev), entries); err != nil || !ok {
			b.Fatal("not stored", err)
		}
	}
	b.Run("backlog", func(b *testing.B) {
		r := open(b)
		for left := b.N; left > 0; left -= 256 {
			appendEntries(b, r, min(left, 256))
		}
		b.ResetTimer()
		n := 0
		for en, err := range r.e.Consume(ctx, name) {
			if err != nil {
				b.Fatal(err)
			}
			if n++; n == b.N {
				if err := r.e.Acknowledge(ctx, name, en.Seq); err != nil {
					b.Fatal(err)
				}
				break
			}
		}
	})
	b.Run("trickle", func(b *testing.B) {
		r := open(b)
		got := make(chan uint64)
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for en, err := range r.e.Consume(cctx, name) {
				if err != nil {
					return
				}
				got <- en.Seq
			}
		})
		b.ResetTimer()
		for range b.N {
			appendEntries(b, r, 1)
			<-got
		}
		b.StopTimer()
		cancel()
		wg.Wait()
	})
}

// firstSubscription is a key's first record as Client.SubscribeAll writes
// it: a subscription generation opened in a session, nothing read yet.
func firstSubscription(key string, caps *ledger.CapabilityReceipt) *ledger.Record {
	return &ledger.Record{
		Revision: 1, State: ledger.StateSubscribing,
		Sub: &ledger.SubscriptionInfo{
			URI: key, Subject: "user:alice", Server: caps.Server, SessionGeneration: caps.SessionGeneration,
			SessionID: "session-1", Capabilities: caps, Generation: 1, StartedAt: caps.ReceivedAt,
		},
	}
}

// BenchmarkCompareAndSwapAll writes the first subscriptions of n keys the
// ledger has never seen, as Client.SubscribeAll does (its chunks are of
// 256): with one CompareAndSwapAll (all), and, as on a ledger that takes no
// batch, one CompareAndSwap after another (one-at-a-time, the baseline).
// Each iteration does both, on keys of its own, their order alternating
// from one iteration to the next, so that both meet the same load on the
// server; it reports each side's time per batch and the baseline's ratio
// to it.
func BenchmarkCompareAndSwapAll(b *testing.B) {
	caps := &ledger.CapabilityReceipt{
		Schema: "capabilityReceipt.v1", ProtocolVersion: "2025-11-25", Server: ledger.Implementation{Name: "bench", Version: "1"},
		Resources: true, Subscribe: true, SessionGeneration: 1, ReceivedAt: time.Now(),
	}
	for _, n := range []int{64, 256} {
		b.Run(fmt.Sprintf("uris=%d", n), func(b *testing.B) {
			conn, schema := pgtest.Schema(b)
			l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			round := 0
			swaps := func(side string) []ledger.Swap {
				s := make([]ledger.Swap, n)
				for i := range s {
					key := fmt.Sprintf("file:///docs/%s/%d/%03d.md", side, round, i)
					s[i] = ledger.Swap{Key: key, Next: firstSubscription(key, caps)}
				}
				return s
			}
			all := func(b *testing.B, s []ledger.Swap) {
				for i, r := range l.CompareAndSwapAll(ctx, s) {
					if r.Err != nil || !r.OK {
						b.Fatal(s[i].Key, " not stored: ", r.Err)
					}
				}
			}
			oneAtATime := func(b *testing.B, s []ledger.Swap) {
				for _, w := range s {
					if _, ok, err := l.CompareAndSwap(ctx, w.Key, w.Prev, w.Next, w.Entries); err != nil || !ok {
						b.Fatal(w.Key, " not stored: ", err)
					}
				}
			}
			var allTime, oneTime time.Duration
			for b.Loop() {
				round++
				sa, so := swaps("all"), swaps("one")
				timed := func(f func(*testing.B, []ledger.Swap), s []ledger.Swap) time.Duration {
					start := time.Now()
					f(b, s)
					return time.Since(start)
				}
				if round%2 == 0 {
					allTime += timed(all, sa)
					oneTime += timed(oneAtATime, so)
				} else {
					oneTime += timed(oneAtATime, so)
					allTime += timed(all, sa)
				}
			}
			b.ReportMetric(float64(allTime.Nanoseconds())/float64(round), "all-ns/op")
			b.ReportMetric(float64(oneTime.Nanoseconds())/float64(round), "one-at-a-time-ns/op")
			b.ReportMetric(float64(oneTime)/float64(allTime), "one-at-a-time/all")
		})
	}
}

// noBatching is a ledger with CompareAndSwapAll hidden (ledger.Index
// kept): an engine on it writes each first subscription in its URI's pass.
type noBatching struct {
	ledger.Ledger
	ledger.Index
}

// BenchmarkSubscribeAll is a cold Client.SubscribeAll of 1,000 URIs on a
// fresh schema, against an in-process server, until it returns (every URI
// subscribed and read once): on the ledger (all), and on the ledger with
// CompareAndSwapAll hidden (no-batching, the baseline), which is how
// SubscribeAll ran on PostgreSQL before the ledger took batches. Each
// iteration runs both, their order alternating, and reports each side's
// time per URI and the baseline's ratio to it.
func BenchmarkSubscribeAll(b *testing.B) {
	const n = 1000
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, n)
	for i := range uris {
		uris[i] = fmt.Sprintf("file:///docs/all/%04d.md", i)
		srv.Set(uris[i], "text/markdown", fmt.Sprintf("document %d", i))
	}
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		b.Run("era="+era, func(b *testing.B) {
			subscribeAll := func(b *testing.B, batching bool) time.Duration {
				conn, schema := pgtest.Schema(b)
				l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				var on ledger.Ledger = l
				if !batching {
					on = noBatching{l, l}
				}
				e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: on})
				if err != nil {
					b.Fatal(err)
				}
				c, err := mcpsync.Connect(b.Context(), func(context.Context) (transport.Interface, error) {
					return srv.NewInProcessTransport(), nil
				}, &mcpsync.ClientOptions{Engine: e, Subject: "svc:indexer", ProtocolVersion: era, ReconnectReads: rate.Inf})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				start := time.Now()
				if _, err := c.SubscribeAll(b.Context(), uris); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			var all, alone time.Duration
			round := 0
			for b.Loop() {
				round++
				if round%2 == 0 {
					all += subscribeAll(b, true)
					alone += subscribeAll(b, false)
				} else {
					alone += subscribeAll(b, false)
					all += subscribeAll(b, true)
				}
			}
			b.ReportMetric(float64(all.Microseconds())/float64(round*n), "all-us/uri")
			b.ReportMetric(float64(alone.Microseconds())/float64(round*n), "no-batching-us/uri")
			b.ReportMetric(float64(alone)/float64(all), "no-batching/all")
		})
	}
}
