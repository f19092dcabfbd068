package boltledger_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// schemaV1 is the layout before the index, and its buckets.
const schemaV1 = "mcpsync.boltledger.v1"

var bucketsV1 = []string{"records", "outbox", "counters", "consumers", "revoked", "meta"}

// schemaV2 is the layout before the binary form of records and entries.
const schemaV2 = "mcpsync.boltledger.v2"

// asJSON writes every record and outbox entry of tx again in the JSON
// form, with the JSON encoder, as the releases before the binary form did.
func asJSON(t *testing.T, tx *bolt.Tx) error {
	t.Helper()
	records, outbox := tx.Bucket([]byte("records")), tx.Bucket([]byte("outbox"))
	rewrite := map[string][]byte{}
	require.NoError(t, records.ForEach(func(k, v []byte) error {
		r, err := boltledger.DecodeStored(v)
		require.NoError(t, err)
		js, err := ledger.EncodeRecord(r)
		require.NoError(t, err)
		rewrite[string(k)] = append(binary.BigEndian.AppendUint64(nil, r.Revision), js...)
		return nil
	}))
	entries := map[string][]byte{}
	require.NoError(t, outbox.ForEach(func(k, v []byte) error {
		e, err := boltledger.EntryStored(v)
		require.NoError(t, err)
		js, err := ledger.EncodeOutboxEntry(e)
		require.NoError(t, err)
		entries[string(k)] = js
		return nil
	}))
	for k, v := range rewrite {
		if err := records.Put([]byte(k), v); err != nil {
			return err
		}
	}
	for k, v := range entries {
		if err := outbox.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// downgradeToV2 turns the ledger file at path into one of schemaV2, as the
// release before the binary form wrote it: every record and outbox entry
// is the JSON encoder's.
func downgradeToV2(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		if err := asJSON(t, tx); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte(schemaV2))
	}))
}

// downgrade turns the ledger file at path into one of schemaV1, as the
// release before the index wrote it: the same records, outbox, counters
// and revocations, in JSON, and no other bucket.
func downgrade(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		if err := asJSON(t, tx); err != nil {
			return err
		}
		var extra [][]byte
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if !slices.Contains(bucketsV1, string(name)) {
				extra = append(extra, slices.Clone(name))
			}
			return nil
		}); err != nil {
			return err
		}
		require.NotEmpty(t, extra, "the index has buckets of its own")
		for _, name := range extra {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte(schemaV1))
	}))
}

// fileSchema reads the schema a closed ledger file names.
func fileSchema(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var schema string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		schema = string(tx.Bucket([]byte("meta")).Get([]byte("schema")))
		return nil
	}))
	return schema
}

// indexed is what a ledger's index answers.
type indexed struct {
	bySubject map[string][]string
	unknown   []string
	revoked   []string
}

func readIndex(t *testing.T, l ledger.Ledger, subjects []string) indexed {
	t.Helper()
	x := l.(ledger.Index)
	got := indexed{bySubject: map[string][]string{}}
	for _, s := range subjects {
		keys, err := x.SubjectKeys(ctx, s)
		require.NoError(t, err)
		if len(keys) > 0 {
			got.bySubject[s] = keys
		}
	}
	keys, recs, err := x.UnknownCloses(ctx)
	require.NoError(t, err)
	for i, k := range keys {
		require.Equal(t, ledger.StateUnsubscribeUnknown, recs[i].State, k)
	}
	got.unknown = keys
	got.revoked, _, err = x.RevokedAfter(ctx, 0)
	require.NoError(t, err)
	return got
}

// A file the previous release wrote has no index: Open builds it from the
// records and revocations and names the file of this schema, so that a
// revocation finds the right records, and a new session the unknown
// closes, without a walk of every record.
func TestOpenUpgradesAFileWithoutIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	readers := map[string]string{
		"file:///docs/a.md": "user:alice", "file:///docs/b.md": "user:bob",
		"file:///docs/c.md": "user:alice", "file:///docs/d.md": "user:carol",
	}
	for _, uri := range slices.Sorted(maps.Keys(readers)) {
		_, err := e.Subscribe(uri, readers[uri])
		require.NoError(t, err)
		_, err = e.Activate(uri, ledger.ModePush)
		require.NoError(t, err)
		tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
		require.NoError(t, err)
		_, err = e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: "v1 of " + uri}}))
		require.NoError(t, err)
	}
	// b.md is read again by alice, after bob's version fed an index: the
	// record is bob's by its artifact and alice's by its version.
	b, err := l.Load(ctx, "file:///docs/b.md")
	require.NoError(t, err)
	require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "b#0", Version: b.Current.Version}))
	_, err = e.BeginClose("file:///docs/b.md")
	require.NoError(t, err)
	_, err = e.FinishClose("file:///docs/b.md", true)
	require.NoError(t, err)
	_, err = e.Subscribe("file:///docs/b.md", "user:alice")
	require.NoError(t, err)
	_, err = e.Activate("file:///docs/b.md", ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket("file:///docs/b.md", ledger.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: "file:///docs/b.md", MIMEType: "text/plain", Text: "v2"}}))
	require.NoError(t, err)
	// d.md's close loses its ack; carol and erin are revoked.
	_, err = e.BeginClose("file:///docs/d.md")
	require.NoError(t, err)
	_, err = e.FinishClose("file:///docs/d.md", false)
	require.NoError(t, err)
	for _, s := range []string{"user:erin", "user:carol"} {
		_, err = e.RevokeSubject(s)
		require.NoError(t, err)
	}

	subjects := []string{"user:alice", "user:bob", "user:carol", "user:erin"}
	want := indexed{
		bySubject: map[string][]string{
			"user:alice": {"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md"},
			"user:bob":   {"file:///docs/b.md"},
		},
		unknown: []string{"file:///docs/d.md"},
		revoked: []string{"user:erin", "user:carol"},
	}
	require.Equal(t, want, readIndex(t, l, subjects), "the index as the writes kept it")
	before, err := l.Export(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	downgrade(t, path)
	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	after, err := l.Export(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the upgrade changed no record, entry, counter or revocation")
	want.revoked = []string{"user:carol", "user:erin"} // the order they joined in was not stored
	require.Equal(t, want, readIndex(t, l, subjects), "the index the upgrade built")
	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), gen)

	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = n.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	d, err := n.Subscription("file:///docs/d.md")
	require.NoError(t, err)
	assert.Equal(t, ledger.StateClosed, d.State, "the new session ended the unknown close")
	rc, err := n.RevokeSubject("user:bob")
	require.NoError(t, err)
	assert.Empty(t, rc.Versions, "bob's version was replaced by alice's")
	require.Len(t, rc.Artifacts, 1)
	assert.Equal(t, "b#0", rc.Artifacts[0].ArtifactID)
	rc, err = n.RevokeSubject("user:alice")
	require.NoError(t, err)
	var uris []string
	for _, v := range rc.Versions {
		uris = append(uris, v.URI)
	}
	assert.Equal(t, []string{"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md"}, uris, "alice's versions")
	require.NoError(t, l.Close())
	assert.Equal(t, boltledger.Schema, fileSchema(t, path), "the file names the schema it was upgraded to")

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	want = indexed{bySubject: map[string][]string{}, revoked: []string{"user:carol", "user:erin", "user:bob", "user:alice"}}
	assert.Equal(t, want, readIndex(t, l, subjects), "nothing left to revoke, and the joins kept across a reopen")
}

// formsIn counts the records and outbox entries of the closed ledger
// file at path stored as JSON and in the binary form.
func formsIn(t *testing.T, path string) (json, bin int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		count := func(b byte) {
			if b == '{' {
				json++
			} else {
				bin++
			}
		}
		_ = tx.Bucket([]byte("records")).ForEach(func(_, v []byte) error { count(v[8]); return nil })
		return tx.Bucket([]byte("outbox")).ForEach(func(_, v []byte) error { count(v[0]); return nil })
	}))
	return json, bin
}

// A file of the release before the binary form holds records and outbox
// entries in JSON: it opens, reads back exactly what that release wrote,
// takes writes in the binary form beside them, and reads both forms after
// a restart.
func TestOpenReadsAFileOfJSONRecordsAndEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{Subscribe: true, ProtocolVersion: "2025-11-25"}})
	require.NoError(t, err)
	uris := []string{"file:///docs/a.md", "file:///docs/b.md", "file:///docs/c.md"}
	for i, uri := range uris {
		_, err := e.Subscribe(uri, []string{"user:alice", "user:bob", "user:carol"}[i])
		require.NoError(t, err)
		_, err = e.Activate(uri, ledger.ModePush)
		require.NoError(t, err)
		tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
		require.NoError(t, err)
		out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{
			{URI: uri, MIMEType: "text/markdown", Text: "# " + uri}, {URI: uri, Data: []byte{0, 1, 2}, Binary: true},
		}))
		require.NoError(t, err)
		require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: uri + "#0", Version: out.Version.Version}))
	}
	_, err = e.IssueTicket(uris[0], ledger.TriggerNotification) // a read in flight
	require.NoError(t, err)
	_, err = e.BeginClose(uris[2])
	require.NoError(t, err)
	_, err = e.FinishClose(uris[2], false)
	require.NoError(t, err)
	_, err = e.RevokeSubject("user:bob")
	require.NoError(t, err)
	before, err := l.Export(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	downgradeToV2(t, path)
	inJSON, inBinary := formsIn(t, path)
	require.Zero(t, inBinary)
	require.Equal(t, len(before.Records)+len(before.Outbox), inJSON, "every record and entry is the JSON encoder's")
	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	after, err := l.Export(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the JSON form reads back what was written")
	for _, uri := range uris {
		r, err := l.Load(ctx, uri)
		require.NoError(t, err)
		assert.Equal(t, before.Records[uri], r, "%s as Load reads it", uri)
	}

	// A version of d.md is written in the binary form, beside the JSON of
	// the rest.
	const d = "file:///docs/d.md"
	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = n.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = n.Subscribe(d, "user:alice")
	require.NoError(t, err)
	_, err = n.Activate(d, ledger.ModePush)
	require.NoError(t, err)
	tk, err := n.IssueTicket(d, ledger.TriggerInitial)
	require.NoError(t, err)
	out, err := n.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: d, MIMEType: "text/markdown", Text: "# d"}}))
	require.NoError(t, err)
	require.True(t, out.Changed())
	written, err := l.Export(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	assert.Equal(t, boltledger.Schema, fileSchema(t, path), "the file names the schema it was upgraded to")
	inJSON, inBinary = formsIn(t, path)
	assert.NotZero(t, inJSON, "what was not written again stays JSON")
	assert.NotZero(t, inBinary, "what was written is in the binary form")

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	reopened, err := l.Export(ctx)
	require.NoError(t, err)
	assert.Equal(t, written, reopened, "both forms read back after a restart")
	assert.Equal(t, "# d", reopened.Records[d].Current.Contents[0].Text)
	assert.Greater(t, reopened.State.Last, before.State.Last, "the new entry follows the JSON ones")
}

// testdata/v2 holds a ledger file the release before the binary form wrote
// (at 362ea4d: schema v2, every record and entry in JSON), with a session
// of four URIs: versions with artifacts, a change, a not-found, a lost
// close ack, a read in flight and a revocation; and its Export as JSON.
// This release opens it, reads back that export, and writes beside it.
func TestOpenReadsAFileThePreviousReleaseWrote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	fixture, err := os.ReadFile(filepath.Join("testdata", "v2", "ledger.db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, fixture, 0o600))
	want, err := os.ReadFile(filepath.Join("testdata", "v2", "export.json"))
	require.NoError(t, err)
	require.Equal(t, schemaV2, fileSchema(t, path))
	_, inBinary := formsIn(t, path)
	require.Zero(t, inBinary, "the fixture is all JSON")

	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	snap, err := l.Export(ctx)
	require.NoError(t, err)
	got, err := json.Marshal(snap)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "what the previous release exported")

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	rc, err := e.RevokeSubject("user:alice")
	require.NoError(t, err)
	require.Len(t, rc.Versions, 2, "a.md and d.md, read from JSON, written again")
	written, err := l.Export(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	assert.Equal(t, boltledger.Schema, fileSchema(t, path))
	inJSON, inBinary := formsIn(t, path)
	assert.NotZero(t, inJSON)
	assert.NotZero(t, inBinary)

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	reopened, err := l.Export(ctx)
	require.NoError(t, err)
	assert.Equal(t, written, reopened, "both forms read back after a restart")
	assert.Greater(t, reopened.State.Last, snap.State.Last)
}

// A file of a later schema, or of none this release knows, is refused and
// left as it is: upgrading only goes from the previous schema.
func TestOpenRefusesAnUnknownSchema(t *testing.T) {
	for _, schema := range []string{"mcpsync.boltledger.v4", "mcpsync.boltledger.v0", "something else"} {
		t.Run(schema, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			l, err := boltledger.Open(path, nil)
			require.NoError(t, err)
			require.NoError(t, l.Close())
			db, err := bolt.Open(path, 0o600, nil)
			require.NoError(t, err)
			require.NoError(t, db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte(schema))
			}))
			require.NoError(t, db.Close())

			l, err = boltledger.Open(path, nil)
			if err == nil {
				_ = l.Close()
			}
			require.ErrorIs(t, err, ledger.ErrLedgerSchema)
			assert.Equal(t, schema, fileSchema(t, path), "the file was left as it was")
		})
	}
}

// An upgrade is one transaction: a file of the previous schema whose
// records cannot be read is refused, and stays of that schema.
func TestUpgradeOfAnUnreadableFileChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	for i := range 3 {
		key := fmt.Sprintf("file:///docs/%d.md", i)
		_, ok, err := l.CompareAndSwap(ctx, key, 0, &ledger.Record{Revision: 1}, nil)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, l.Close())
	downgrade(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("records")).Put([]byte("file:///docs/1.md"), []byte("\x00\x00\x00\x00\x00\x00\x00\x01{not json"))
	}))
	require.NoError(t, db.Close())

	_, err = boltledger.Open(path, nil)
	require.ErrorIs(t, err, ledger.ErrLedgerCorrupt)
	assert.Equal(t, schemaV1, fileSchema(t, path), "nothing of the upgrade was committed")
}
