// Command manyworkers is a RAG ingestion worker that runs as several
// processes on one PostgreSQL database. The processes share one fenced
// ledger (ledger/pgledger) and split the MCP server's resources between them
// by lease (pgledger.Shard); when one dies, the others take its resources
// over once its leases expire, and the fence refuses anything it still
// tries to write. All of them read the one invalidation outbox as the
// consumer "indexer" and apply it to an index table in the same database.
// Applying an entry is idempotent and never moves a row back to an older
// version, so whichever worker gets to an entry first does the work, and an
// entry delivered again (to another worker, or after a crash) changes
// nothing.
//
// With -worker it is one such process; start as many as you like:
//
//	DATABASE_URL=postgres://indexer@db/rag manyworkers -worker -url https://docs.example/mcp
//
// Without arguments it demonstrates itself (demo.go): it serves twelve
// documents over streamable HTTP, runs itself as three workers on a schema
// of its own, changes documents, kills one worker with SIGKILL, shows its
// documents taken over, and checks that every change reached the outbox and
// the index and that the dead worker holds nothing. It needs PostgreSQL: the
// server MCPSYNC_TEST_POSTGRES names, else the one at 127.0.0.1:5432;
// without one it says so and exits 0 (1 when MCPSYNC_REQUIRE_POSTGRES=1).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

const (
	// consumer is the outbox consumer every worker reads as: one name and
	// one acknowledged position, shared, so a worker started later begins
	// where the others are, and what one acknowledged the others pass.
	consumer  = "indexer"
	principal = "svc:indexer"
	// indexTable is the derived index, in the ledger's schema.
	indexTable = "rag_index"
)

func main() {
	worker := flag.Bool("worker", false, "run as one worker (without it: the demonstration)")
	ledger := flag.String("ledger", os.Getenv("DATABASE_URL"), "PostgreSQL URL of the shared ledger (default $DATABASE_URL)")
	schema := flag.String("schema", pgledger.DefaultSchema, "PostgreSQL schema of the ledger and the index")
	url := flag.String("url", "", "streamable HTTP endpoint of the MCP server")
	ttl := flag.Duration("ttl", pgledger.DefaultLeaseTTL, "lease TTL: how long a dead worker's resources wait for another")
	untilEOF := flag.Bool("until-eof", false, "stop when standard input closes, as it does when whoever started the worker ends")
	flag.Parse()
	if !*worker {
		os.Exit(demonstrate())
	}
	if *ledger == "" || *url == "" {
		fmt.Fprintln(os.Stderr, "manyworkers: -worker needs -ledger (or DATABASE_URL) and -url")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *untilEOF {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	if err := work(ctx, *ledger, *schema, *url, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "manyworkers:", err)
		os.Exit(1)
	}
}

// work is one worker: it keeps its share of the server's resources and
// applies the outbox to the index until ctx ends. Then it lets its
// resources go, so the others take them without waiting for the TTL.
func work(ctx context.Context, conn, schema, url string, ttl time.Duration) error {
	var mu sync.Mutex // protects stdout, which several goroutines write
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	ledger, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: ttl}})
	if err != nil {
		return err
	}
	defer ledger.Close()
	if err := createIndex(ctx, ledger.Pool(), schema); err != nil {
		return err
	}
	ix := &index{db: ledger.Pool(), table: pgx.Identifier{schema, indexTable}.Sanitize()}
	engine, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: ledger})
	if err != nil {
		return err
	}
	client, err := mcpsync.Connect(ctx, mcpsync.HTTPDialer(url, nil), &mcpsync.ClientOptions{
		Engine: engine, Subject: principal,
		// The shard decides what this worker subscribes, a reconnect not.
		NoResume: true,
		OnError:  func(err error) { say("error: %v", err) },
	})
	if err != nil {
		return err
	}
	defer client.Close()
	shard, err := pgledger.NewShard(ledger, client, &pgledger.ShardOptions{
		// Every resource the server lists, scanned again each minute.
		URIs: func(ctx context.Context) ([]string, error) {
			cat, err := client.Scan(ctx, mcpsync.KindResources)
			if err != nil {
				return nil, err
			}
			var uris []string
			for d := range cat.Items() {
				uris = append(uris, d.URI)
			}
			return uris, nil
		},
		OnChange: func(uri string, owned bool) {
			if owned {
				say("took %s (lease epoch %d)", uri, ledger.Owned()[uri])
			} else {
				say("let go %s", uri)
			}
		},
		OnError: func(err error) { say("error: %v", err) },
	})
	if err != nil {
		return err
	}
	// The first line says who this worker is (the demonstration reads it).
	say("worker %s", ledger.Worker())

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = shard.Run(ctx) })
	for {
		err := consume(ctx, engine, ix, say)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, mcpsync.ErrOutboxGap):
			// The retention bound dropped entries nobody applied: the index
			// must be rebuilt from the ledger, which this example leaves out.
			return err
		}
		// The entry that failed comes again, from the acknowledged position.
		say("error: %v; consuming again", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// consume applies every outbox entry after the acknowledged position, then
// each new one as it is appended (by any worker), until ctx ends or an
// entry fails.
func consume(ctx context.Context, engine *mcpsync.Engine, ix *index, say func(string, ...any)) error {
	for e, err := range engine.Consume(ctx, consumer) {
		if err != nil {
			return err
		}
		applied, err := ix.apply(ctx, engine, e)
		if err != nil {
			return err
		}
		if applied != "" {
			say("indexed #%d %s %s: %s", e.Seq, e.Reason, e.URI, applied)
		}
		if err := engine.Acknowledge(ctx, consumer, e.Seq); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// index is the derived index every worker writes: one row per URI with the
// text of the version it was derived from, in the fence's order of versions
// (subscription generation, then read ordinal). A real worker would chunk
// and embed the text; what makes sharing the index safe is the same: a row
// only ever moves to a later version.
type index struct {
	db    *pgxpool.Pool
	table string // quoted
}

// createIndex creates the index table unless it is there. Workers starting
// together would race on PostgreSQL's catalog: the advisory lock lets one
// in at a time.
func createIndex(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, schema string) error {
	table := pgx.Identifier{schema, indexTable}.Sanitize()
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+` (
			uri        text PRIMARY KEY,
			generation bigint NOT NULL,
			ordinal    bigint NOT NULL,
			body       text NOT NULL)`)
		return err
	})
}

// apply brings the row of e's URI up to e and says what it did: "" when
// another worker did it already, or when a later entry supersedes e.
func (ix *index) apply(ctx context.Context, engine *mcpsync.Engine, e mcpsync.OutboxEntry) (string, error) {
	// The entry names a version; the ledger, which every worker's engine
	// reads, gives its exact text or says why there is none.
	r, err := engine.Resolve(ctx, e)
	switch {
	case err != nil:
		return "", err
	case r.Kind == mcpsync.ResolvedSuperseded:
		return "", nil // a later entry carries the newer version
	case r.Kind != mcpsync.ResolvedContents:
		// Deleted, quarantined, revoked or forgotten: what r.Version fed goes.
		tag, err := ix.db.Exec(ctx, "DELETE FROM "+ix.table+" WHERE uri = $1 AND (generation, ordinal) <= ($2, $3)",
			e.URI, int64(r.Version.SubscriptionGeneration), int64(r.Version.ReadOrdinal))
		if err != nil || tag.RowsAffected() == 0 {
			return "", err
		}
		return "deleted", nil
	}
	body := text(r.Contents)
	tag, err := ix.db.Exec(ctx, "INSERT INTO "+ix.table+` AS i VALUES ($1, $2, $3, $4)
		ON CONFLICT (uri) DO UPDATE SET generation = excluded.generation, ordinal = excluded.ordinal, body = excluded.body
		WHERE (i.generation, i.ordinal) < (excluded.generation, excluded.ordinal)`,
		e.URI, int64(r.Version.SubscriptionGeneration), int64(r.Version.ReadOrdinal), body)
	if err != nil || tag.RowsAffected() == 0 {
		return "", err
	}
	return fmt.Sprintf("%q", body), nil
}

func text(contents []mcpsync.Content) string {
	var b strings.Builder
	for _, c := range contents {
		b.WriteString(c.Text)
	}
	return b.String()
}
