package pgledger_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// indexBenchRecords is how many records the ledger of BenchmarkIndex holds.
const indexBenchRecords = 10_000

// BenchmarkIndex measures, on a ledger of indexBenchRecords records, the
// engine's two passes that look for a few records among all of them: a
// revocation of a subject that read one URI (RevokeSubject: the join, the
// keys to sweep, the sweep of that one record, the sweep recorded done),
// and a new session (BeginSession: a session generation, and the unknown
// closes it ends, of which there are none). Each goes beside the bare
// statement that finds the same keys.
func BenchmarkIndex(b *testing.B) {
	conn, schema := pgtest.Schema(b)
	l, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	snap := ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{}, Counters: map[ledger.Counter]uint64{},
	}
	for i := range indexBenchRecords {
		key := fmt.Sprintf("file:///docs/%05d.md", i)
		r := benchRecord(key, 1)
		r.Current.Version.Subject = fmt.Sprintf("user:%d", i%100)
		snap.Records[key] = r
	}
	if err := l.Restore(ctx, snap); err != nil {
		b.Fatal(err)
	}
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		b.Fatal(err)
	}
	records := pgx.Identifier{schema, "records"}.Sanitize()
	bySubject := "SELECT key FROM " + records + " WHERE subjects @> ARRAY[$1::text] ORDER BY key"
	unknown := "SELECT key, revision, record FROM " + records + " WHERE unknown ORDER BY key"

	// read has subject read a URI of its own, so that a revocation of it
	// has one record to sweep.
	n := 0
	read := func(b *testing.B) string {
		n++
		uri, subject := fmt.Sprintf("file:///revoked/%05d.md", n), fmt.Sprintf("user:revoked-%d", n)
		if _, err := e.Subscribe(uri, subject); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Activate(uri, ledger.ModePush); err != nil {
			b.Fatal(err)
		}
		tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
		if err != nil {
			b.Fatal(err)
		}
		out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: "body"}}))
		if err != nil || !out.Accepted {
			b.Fatal("not accepted: ", err)
		}
		return subject
	}
	b.Run("RevokeSubject", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			subject := read(b)
			b.StartTimer()
			rc, err := e.RevokeSubject(subject)
			if err != nil || len(rc.Versions) != 1 {
				b.Fatal("revoked ", len(rc.Versions), " versions: ", err)
			}
		}
	})
	b.Run("RevokeSubject/bare", func(b *testing.B) {
		subject := read(b)
		for b.Loop() {
			rows, err := l.Pool().Query(ctx, bySubject, subject)
			if err != nil {
				b.Fatal(err)
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(keys) != 1 {
				b.Fatal(len(keys), " keys: ", err)
			}
		}
	})
	b.Run("BeginSession", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("BeginSession/bare", func(b *testing.B) {
		for b.Loop() {
			rows, err := l.Pool().Query(ctx, unknown)
			if err != nil {
				b.Fatal(err)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
