package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// The reference PostgreSQL server, @modelcontextprotocol/server-postgres
// 0.6.2 (pinned in testdata/npm/package.json), on
// @modelcontextprotocol/sdk 1.0.1, which answers protocol 2024-11-05 only.
// It takes a database URL as its one argument and declares resources
// without subscribe or list_changed. Its listing is every table of the
// schema public, one resource per table: the URI is the database URL
// without its password with the path replaced by "/<table>/schema" (the
// database name is lost), and the contents are the JSON array of the
// table's column names and types. A read of a table that does not exist
// is not an error: it answers an empty array. It does not exit when its
// stdin closes while its pool holds an idle connection (10 s), so Close
// gives it the grace period and then SIGTERM.
const postgresPkg = "@modelcontextprotocol/server-postgres"

// pgReview is the review interval of the kept scan below, and pgPoll the
// poll interval of its subscriptions: the server cannot subscribe, so
// polls are what keeps a listed table's copy fresh.
const (
	pgReview = 2 * time.Second
	pgPoll   = 500 * time.Millisecond
)

// pgDatabase is a database of its own on the test server, dropped when the
// test ends: the server lists the schema public, so tests that run at once
// need a database each.
type pgDatabase struct {
	url  string    // for the server
	conn *pgx.Conn // for the test's DDL
}

// newPGDatabase creates the database, or skips t without a PostgreSQL
// server (pgtest).
func newPGDatabase(t *testing.T) *pgDatabase {
	t.Helper()
	connString := pgtest.ConnString(t)
	cfg, err := pgx.ParseConfig(connString)
	require.NoError(t, err)
	var b [8]byte
	_, err = rand.Read(b[:])
	require.NoError(t, err)
	name := "mcpsync_interop_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	admin, err := pgx.Connect(ctx, connString)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err, "the test role needs CREATEDB")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		admin, err := pgx.Connect(ctx, connString)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		// FORCE: the server's pool may still hold a connection.
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})

	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	u, err := databaseURL(connString, cfg)
	require.NoError(t, err)
	return &pgDatabase{url: u, conn: conn}
}

// databaseURL is connString pointed at cfg's database, as a URL: the only
// form the server's driver (node-postgres) reads.
func databaseURL(connString string, cfg *pgx.ConnConfig) (string, error) {
	if u, err := url.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path, u.RawPath = "/"+cfg.Database, ""
		return u.String(), nil
	}
	// A keyword/value string.
	u := &url.URL{Scheme: "postgres", Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host) // a Unix socket directory
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	} else {
		q.Set("sslmode", "require")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (db *pgDatabase) exec(t *testing.T, sql string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	_, err := db.conn.Exec(ctx, sql)
	require.NoError(t, err, sql)
	return time.Now()
}

// pgRig is a client of the server with a kept scan, and what it reported.
type pgRig struct {
	client   *mcpsync.Client
	outcomes chan mcpsync.Outcome
	scans    chan mcpsync.ScanReport
	errs     chan error
}

// event is one report of the client: a fenced read or a kept scan.
type event struct {
	out  *mcpsync.Outcome
	scan *mcpsync.ScanReport
}

// until returns the first event done accepts, skipping others, and how
// long after since it arrived; it fails the test if none arrives within
// bound (a guard against hangs: the caller asserts the time).
func (r *pgRig) until(t *testing.T, since time.Time, what string, done func(event) bool) (event, time.Duration) {
	t.Helper()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		var ev event
		select {
		case o := <-r.outcomes:
			ev.out = &o
		case s := <-r.scans:
			require.NoError(t, s.Err, "kept scan")
			ev.scan = &s
		case err := <-r.errs:
			t.Fatalf("while waiting for %s: %v", what, err)
		case <-timeout.C:
			t.Fatalf("no %s within %v", what, bound)
		}
		if done(ev) {
			return ev, time.Since(since)
		}
	}
}

// columns are the contents the server reads for a table.
type columns []struct {
	Name string `json:"column_name"`
	Type string `json:"data_type"`
}

// columnsOf returns the client's copy of uri.
func (r *pgRig) columnsOf(t *testing.T, uri string) columns {
	t.Helper()
	entry, err := r.client.Lookup(uri)
	require.NoError(t, err)
	require.Len(t, entry.Contents, 1)
	require.Equal(t, "application/json", entry.Contents[0].MIMEType)
	var cols columns
	require.NoError(t, json.Unmarshal([]byte(entry.Contents[0].Text), &cols))
	return cols
}

func lists(cat mcpsync.Catalog, uri string) bool {
	return slices.ContainsFunc(cat.Descriptors, func(d mcpsync.Descriptor) bool { return d.URI == uri })
}

// Discovery keeps going against a server that can neither subscribe nor
// announce list changes. Each step is asserted within two review
// intervals, the bound a kept scan promises; each needs at most one
// interval, plus a scan and a read:
//
//   - a table created during the watch is listed by the next kept scan,
//     which subscribes and reads it;
//   - a column added to it is read by the next poll (pgPoll plus jitter),
//     since a kept scan reads only the subscriptions its catalog lost;
//   - a dropped table is missing from the next catalog.
//
// The server answers the read of a dropped table with an empty column
// list, never not found, so no evidence of a deletion ever arrives: the
// subscription stays open, its copy follows the server's answer, and only
// the catalog says the table is gone. Nothing is tombstoned.
func TestPostgresKeptScan(t *testing.T) {
	t.Parallel()
	r, db := startPostgresServer(t, mcpsync.DeletionDefault)
	caps := r.client.Capabilities()
	assert.Equal(t, "2024-11-05", caps.ProtocolVersion)
	assert.Equal(t, "example-servers/postgres", caps.Server.Name)
	assert.True(t, caps.Resources)
	assert.False(t, caps.Subscribe || caps.ListChanged || caps.SnapshotList)

	start := db.exec(t, "CREATE TABLE anchors (id integer)")
	_, err := r.client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true, OnScan: func(rep mcpsync.ScanReport) { r.scans <- rep }})
	require.NoError(t, err)
	ev, took := r.until(t, start, "first kept scan", func(ev event) bool { return ev.scan != nil })
	require.Len(t, ev.scan.Catalog.Descriptors, 1)
	anchors := ev.scan.Catalog.Descriptors[0].URI
	t.Logf("first kept scan after %v: %s", took, anchors)
	assert.True(t, strings.HasSuffix(anchors, "/anchors/schema"), anchors)
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, ev.scan.Catalog.Status)
	require.Len(t, ev.scan.Subscribed, 1)
	assert.Equal(t, ledger.ModePoll, ev.scan.Subscribed[0].Mode, "the server cannot subscribe")
	gadgets := strings.TrimSuffix(anchors, "/anchors/schema") + "/gadgets/schema"

	created := db.exec(t, "CREATE TABLE gadgets (id integer PRIMARY KEY)")
	ev, took = r.until(t, created, "first read of the created table", func(ev event) bool {
		return ev.out != nil && ev.out.Version.Version.URI == gadgets && ev.out.Changed()
	})
	t.Logf("created table discovered, subscribed and read after %v", took)
	assert.LessOrEqual(t, took, 2*pgReview)
	assert.Equal(t, ledger.TriggerInitial, ev.out.Version.Trigger)
	assert.Equal(t, columns{{"id", "integer"}}, r.columnsOf(t, gadgets))
	first := ev.out.Version.Version.Digest

	// Listed, so only the poll reads it again: the kept scan reads the
	// subscriptions a catalog lost, not the ones it still lists.
	altered := db.exec(t, "ALTER TABLE gadgets ADD COLUMN label text")
	ev, took = r.until(t, altered, "read of the altered table", func(ev event) bool {
		return ev.out != nil && ev.out.Version.Version.URI == gadgets && ev.out.Changed()
	})
	t.Logf("altered table versioned after %v", took)
	assert.LessOrEqual(t, took, 2*pgReview)
	assert.Equal(t, ledger.TriggerPoll, ev.out.Version.Trigger)
	assert.NotEqual(t, first, ev.out.Version.Version.Digest)
	assert.ElementsMatch(t, columns{{"id", "integer"}, {"label", "text"}}, r.columnsOf(t, gadgets))

	dropped := db.exec(t, "DROP TABLE gadgets")
	var gone *mcpsync.ScanReport
	var emptied bool
	_, took = r.until(t, dropped, "catalog without the dropped table, and its copy emptied", func(ev event) bool {
		switch {
		case ev.scan != nil && gone == nil && !lists(ev.scan.Catalog, gadgets):
			gone = ev.scan
			t.Logf("dropped table gone from the catalog after %v", time.Since(dropped))
		case ev.out != nil && ev.out.Version.Version.URI == gadgets && ev.out.Changed():
			emptied = true
			t.Logf("dropped table read as %s after %v", ev.out.Version.Trigger, time.Since(dropped))
		}
		return gone != nil && emptied
	})
	assert.LessOrEqual(t, took, 2*pgReview)
	assert.True(t, lists(gone.Catalog, anchors))
	assert.Equal(t, mcpsync.CatalogSnapshotUnproven, gone.Catalog.Status)
	assert.Contains(t, gone.Reconciliation.Missing, gadgets, "the kept scan read what its catalog lost")
	assert.Empty(t, r.columnsOf(t, gadgets), "the copy is the server's answer")

	// Nothing said not found, so nothing is pending deletion, let alone
	// tombstoned; the subscription stays open and keeps polling.
	sub, err := r.client.Engine().Subscription(gadgets)
	require.NoError(t, err)
	assert.NotContains(t, []ledger.SubscriptionState{ledger.StateTombstonePending, ledger.StateTombstoned}, sub.State)
	entries, err := r.client.Engine().PullOutbox(0, 0)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, e.URI == gadgets && e.Reason == ledger.InvalidateTombstoned, "tombstoned: %+v", e)
	}
}

// Under DeletionUnlisted the listing is evidence enough: a table dropped
// during the watch is confirmed deleted once clean kept scans have missed
// it for two review intervals (the third scan without it), although the
// server still answers its read. Before that, the kept scan discovers a
// created table and a poll versions its change, as under every policy;
// after it, the polls of the dropped table's subscription (answered with
// an empty column list) bring nothing back.
func TestPostgresDroppedTableConfirmedUnlisted(t *testing.T) {
	t.Parallel()
	r, db := startPostgresServer(t, mcpsync.DeletionUnlisted)

	start := db.exec(t, "CREATE TABLE anchors (id integer)")
	_, err := r.client.KeepScanning(&mcpsync.KeepScanOptions{Subscribe: true, OnScan: func(rep mcpsync.ScanReport) { r.scans <- rep }})
	require.NoError(t, err)
	ev, _ := r.until(t, start, "first kept scan", func(ev event) bool { return ev.scan != nil })
	require.Len(t, ev.scan.Catalog.Descriptors, 1)
	anchors := ev.scan.Catalog.Descriptors[0].URI
	gadgets := strings.TrimSuffix(anchors, "/anchors/schema") + "/gadgets/schema"

	created := db.exec(t, "CREATE TABLE gadgets (id integer PRIMARY KEY)")
	ev, took := r.until(t, created, "first read of the created table", func(ev event) bool {
		return ev.out != nil && ev.out.Version.Version.URI == gadgets && ev.out.Changed()
	})
	t.Logf("created table discovered, subscribed and read after %v", took)
	assert.LessOrEqual(t, took, 2*pgReview)
	assert.Equal(t, ledger.TriggerInitial, ev.out.Version.Trigger)

	altered := db.exec(t, "ALTER TABLE gadgets ADD COLUMN label text")
	ev, took = r.until(t, altered, "read of the altered table", func(ev event) bool {
		return ev.out != nil && ev.out.Version.Version.URI == gadgets && ev.out.Changed()
	})
	t.Logf("altered table versioned after %v", took)
	assert.LessOrEqual(t, took, 2*pgReview)
	assert.ElementsMatch(t, columns{{"id", "integer"}, {"label", "text"}}, r.columnsOf(t, gadgets))
	altVersion := ev.out.Version.Version

	dropped := db.exec(t, "DROP TABLE gadgets")
	var missed int
	ev, took = r.until(t, dropped, "tombstone of the dropped table", func(ev event) bool {
		if ev.scan == nil || lists(ev.scan.Catalog, gadgets) {
			return false
		}
		missed++
		return slices.Contains(ev.scan.Reconciliation.Tombstoned, gadgets)
	})
	t.Logf("dropped table confirmed deleted after %v, by the kept scan %d without it", took, missed)
	sub, err := r.client.Engine().Subscription(gadgets)
	require.NoError(t, err)
	require.NotNil(t, sub.Unlisted)
	assert.GreaterOrEqual(t, sub.Unlisted.Span(), 2*pgReview, "missed for two review intervals")
	// The first scan without it comes within one review interval of the
	// drop, the third two intervals later; one more for the scans' own time.
	assert.LessOrEqual(t, took, 4*pgReview+pgReview)
	rec := ev.scan.Reconciliation
	require.Len(t, rec.Receipts, 1)
	assert.Equal(t, ledger.EvidenceUnlisted, rec.Receipts[0].Evidence.Kind)
	assert.Len(t, rec.Receipts[0].Evidence.Scans, 4, "two passes of the first scan without it, two of the last")
	_, err = r.client.Lookup(gadgets)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
	_, err = r.client.Lookup(anchors)
	require.NoError(t, err, "what is listed stays")

	entries, err := r.client.Engine().PullOutbox(0, 0)
	require.NoError(t, err)
	var tomb *mcpsync.OutboxEntry
	for i, e := range entries {
		if e.URI == gadgets && e.Reason == ledger.InvalidateTombstoned {
			require.Nil(t, tomb, "one tombstone entry")
			tomb = &entries[i]
		}
	}
	require.NotNil(t, tomb)
	assert.Equal(t, rec.Receipts[0].OutboxSeq, tomb.Seq)
	assert.Equal(t, rec.Receipts[0].Evidence, *tomb.Evidence)
	// It deletes the last version read, which may already be the
	// server's answer for the dropped table (an empty list).
	assert.Equal(t, gadgets, tomb.Previous.URI)
	assert.GreaterOrEqual(t, tomb.Previous.ReadOrdinal, altVersion.ReadOrdinal)

	// The server still answers the dropped table's polls; they change
	// nothing.
	polled := time.Now()
	ev, _ = r.until(t, polled, "a poll of the dropped table", func(ev event) bool {
		return ev.out != nil && ev.out.Version.Version.URI == gadgets
	})
	assert.Equal(t, mcpsync.DecisionTombstoned, ev.out.Version.Decision)
	_, err = r.client.Lookup(gadgets)
	require.ErrorIs(t, err, mcpsync.ErrTombstoned)
}

// startPostgresServer connects a Client to server-postgres over a fresh
// database, polling every pgPoll and reviewing its catalog every pgReview,
// under policy.
func startPostgresServer(t *testing.T, policy mcpsync.DeletionPolicy) (*pgRig, *pgDatabase) {
	t.Helper()
	node := needNode(t)
	db := newPGDatabase(t)
	entry := filepath.Join(npmDir, "node_modules", postgresPkg, "dist", "index.js")
	dial := mcpsync.CommandDialer(mcpsync.Command{Name: node, Args: []string{entry, db.url}})
	r := &pgRig{scans: make(chan mcpsync.ScanReport, 1024), errs: make(chan error, 1024)}
	r.client, r.outcomes = connect(t, dial, mcpsync.ClientOptions{
		PollEvery: pgPoll,
		Scanner:   &mcpsync.ScannerOptions{ReviewAfter: pgReview, StaleAfter: 2 * pgReview},
		Deletion:  policy,
		OnError:   func(err error) { r.errs <- err },
	})
	return r, db
}
