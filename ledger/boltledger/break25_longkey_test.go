package boltledger_test

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// longDoc is a URI bbolt takes as a key (at most 32768 bytes), but not
// with a subject in front of it, as bucket "bySubject" files it.
var longDoc = "file:///docs/" + strings.Repeat("a", 32768-len("file:///docs/")-4)

func readAs(t *testing.T, e *mcpsync.Engine, uri, subject string) error {
	t.Helper()
	_, err := e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, mcpsync.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, mcpsync.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: "v1"}}))
	return err
}

// A URI the ledger stores as a key, read by "user:alice": the accept is
// refused by the index's key, which is the subject and the URI together.
// The same read is accepted on the memory ledger, and was on schema v1.
func TestBreak25LongKeyAccept(t *testing.T) {
	require.Len(t, longDoc, 32764)
	for _, tc := range []struct {
		name string
		l    mcpsync.Ledger
	}{
		{"memory", mcpsync.NewMemoryLedger(nil)},
		{"bolt", openWith(t, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: tc.l})
			require.NoError(t, err)
			_, err = e.BeginSession(mcpsync.SessionInfo{})
			require.NoError(t, err)
			if err := readAs(t, e, longDoc, "user:alice"); err != nil {
				t.Fatalf("a read that passed the fence: %s", strings.ReplaceAll(err.Error(), longDoc, "file:///docs/aaa…(32764 bytes)"))
			}
			entry, err := e.Lookup("user:alice", longDoc)
			require.NoError(t, err)
			assert.Equal(t, "v1", entry.Contents[0].Text)
		})
	}
}

// A file of schema v1 holding such a record opened under v1; the upgrade
// cannot index it, and the file no longer opens at all.
func TestBreak25LongKeyUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	// As schema v1 stored it: a record whose version alice read.
	mem := mcpsync.NewMemoryLedger(nil)
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: mem})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	require.NoError(t, readAs(t, e, longDoc, "user:alice"))
	r, err := mem.Load(ctx, longDoc)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	downgrade(t, path)
	putRecordV1(t, path, longDoc, r)

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err, "a v1 file that opened under v1")
	defer l.Close()
	got, err := l.Load(ctx, longDoc)
	require.NoError(t, err)
	assert.Equal(t, r.Current.Version, got.Current.Version)
}

// putRecordV1 writes r under key in the closed file at path, in the stored
// form (8-byte revision, then the record's JSON), touching nothing else.
func putRecordV1(t *testing.T, path, key string, r *mcpsync.Record) {
	t.Helper()
	js, err := mcpsync.EncodeRecord(r)
	require.NoError(t, err)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("records")).Put([]byte(key), append(binary.BigEndian.AppendUint64(nil, r.Revision), js...))
	}))
}
