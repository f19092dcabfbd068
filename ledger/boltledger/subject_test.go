package boltledger_test

// Subjects and keys of every form the bolt ledger may meet: URIs at bbolt's
// key limit, subjects beyond it, subjects that are not valid UTF-8 or hold
// NUL, as this release writes them and as earlier releases left them. A
// version whose read was served is revocable, and a subject no ledger can
// revoke is refused before anything is served or derived for it.

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// longDoc is a URI bbolt takes as a key (at most 32768 bytes), but not with
// a subject in front of it.
var longDoc = "file:///docs/" + strings.Repeat("a", 32768-len("file:///docs/")-4)

// readAs subscribes uri for subject and accepts a first read of it.
func readAs(t *testing.T, e *mcpsync.Engine, uri, subject string) error {
	t.Helper()
	_, err := e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: "v1"}}))
	return err
}

// A URI the ledger stores as a key, read by "user:alice", is accepted and
// served on the bolt ledger as on the memory ledger, whatever key the
// index files it under (the subject and the URI together exceed bbolt's
// key limit).
func TestURIAtTheKeyLimitIsAcceptedAndServed(t *testing.T) {
	require.Len(t, longDoc, 32764)
	for _, tc := range []struct {
		name string
		l    ledger.Ledger
	}{
		{"memory", ledger.NewMemory(nil)},
		{"bolt", openWith(t, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: tc.l})
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

// A file of schema v1 holding such a record (it opened under v1) still
// opens after the upgrade, and the record reads back as stored.
func TestUpgradeOfARecordAtTheKeyLimitOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	// As schema v1 stored it: a record whose version alice read.
	mem := ledger.NewMemory(nil)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: mem})
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
func putRecordV1(t *testing.T, path, key string, r *ledger.Record) {
	t.Helper()
	js, err := ledger.EncodeRecord(r)
	require.NoError(t, err)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("records")).Put([]byte(key), append(binary.BigEndian.AppendUint64(nil, r.Revision), js...))
	}))
}

// A subject that is not valid UTF-8 is stored, in the record's JSON, as the
// replacement character. The engine refuses such a subject, so that no
// version names a subject other than the one it was read by; a record
// written with one straight to the ledger is indexed under what its JSON
// stores, so a revocation after a restart still finds it.
func TestSubjectStoredAsReplacementCharacterIsRevocable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := boltledger.Open(path, nil)
	require.NoError(t, err)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	const doc = "file:///docs/a.md"
	_, err = e.Subscribe(doc, "\xffbob")
	require.ErrorIs(t, err, ledger.ErrInvalidSubject, "a subject no durable ledger keeps as given")
	_, err = e.RevokeSubject("\xffbob")
	require.ErrorIs(t, err, ledger.ErrInvalidSubject)

	// Straight to the ledger: filed under the stored form, before and
	// after a restart.
	const stored = "\uFFFDbob"
	rec := &ledger.Record{Revision: 1, Current: &ledger.StoredVersion{
		Version: ledger.ResourceVersion{URI: doc, Subject: "\xffbob"}, Status: ledger.VersionServed,
	}}
	_, ok, err := l.CompareAndSwap(ctx, doc, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)
	keys, err := l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	assert.Equal(t, []string{doc}, keys, "before a restart")
	require.NoError(t, l.Close())

	l, err = boltledger.Open(path, nil)
	require.NoError(t, err)
	defer l.Close()
	r, err := l.Load(ctx, doc)
	require.NoError(t, err)
	require.Equal(t, []string{stored}, r.Subjects(), "the record as stored")
	keys, err = l.SubjectKeys(ctx, stored)
	require.NoError(t, err)
	assert.Equal(t, []string{doc}, keys, "SubjectKeys(%q) must hold every key whose Record.Subjects holds it", stored)

	n, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	rc, err := n.RevokeSubject(stored)
	require.NoError(t, err)
	assert.Len(t, rc.Versions, 1, "the version the stored record says %q read", stored)
	r, err = l.Load(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, ledger.VersionRevoked, r.Current.Status)
}

// A subject longer than bbolt's key limit (32 KiB; a principal carrying a
// certificate chain) could be filed under its SHA-256 but not revoked, the
// revocations being keyed by the subject. Every ledger refuses it for a
// read, and the longest subject it takes (MaxSubjectBytes) is served and
// revoked, for the next engine too.
func TestSubjectBeyondTheKeyLimitIsRefusedAndTheLongestIsRevoked(t *testing.T) {
	const uri = "file:///doc.md"
	for _, tc := range []struct {
		name    string
		subject string
		taken   bool
	}{
		{"too long", "user:" + strings.Repeat("c", 33000), false},
		{"longest", "user:" + strings.Repeat("c", mcpsync.MaxSubjectBytes-5), true},
	} {
		for _, l := range []struct {
			name string
			l    ledger.Ledger
		}{
			{"memory", ledger.NewMemory(nil)},
			{"bolt", openWith(t, nil)},
		} {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l.l})
				require.NoError(t, err)
				_, err = e.BeginSession(mcpsync.SessionInfo{})
				require.NoError(t, err)
				if !tc.taken {
					_, err := e.Subscribe(uri, tc.subject)
					require.ErrorIs(t, err, ledger.ErrInvalidSubject)
					return
				}
				require.NoError(t, readAs(t, e, uri, tc.subject), "the read is accepted")
				_, err = e.Lookup(tc.subject, uri)
				require.NoError(t, err, "and served")
				_, err = e.RevokeSubject(tc.subject)
				require.NoError(t, err, "a subject whose read was served can be revoked")
				f, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l.l})
				require.NoError(t, err)
				_, err = f.BeginSession(mcpsync.SessionInfo{})
				require.NoError(t, err)
				_, err = f.Lookup(tc.subject, uri)
				require.ErrorIs(t, err, mcpsync.ErrRevoked, "the next engine serves a revoked subject's version")
			})
		}
	}
}

// RecordDerived of an artifact of a version of an earlier generation, for a
// subject beyond bbolt's key limit (33,000 bytes, which Subscribe refuses):
// RecordDerived refuses it (ErrInvalidSubject), or the revocation of that
// subject succeeds and names the artifact. An artifact is never recorded
// for a subject that can never be revoked.
func TestDerivedArtifactOfAnUnrevocableSubjectIsRefused(t *testing.T) {
	const uri = "file:///doc.md"
	bad := "user:" + strings.Repeat("c", 33000)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: openWith(t, nil)})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	require.NoError(t, readAs(t, e, uri, "user:alice"))
	first, err := e.Lookup("user:alice", uri)
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{}) // a new generation of uri, read again
	require.NoError(t, err)
	_, err = e.Subscribe(uri, "user:alice")
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
	tk, err := e.IssueTicket(uri, ledger.TriggerInitial)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: "v2"}}))
	require.NoError(t, err)
	require.True(t, out.Changed())

	v := first.Version
	v.Subject = bad
	err = e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "chunk-1", Version: v})
	if err != nil {
		require.ErrorIs(t, err, ledger.ErrInvalidSubject)
		return
	}
	rc, err := e.RevokeSubject(bad)
	if err != nil {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("an artifact was recorded for a subject that can never be revoked (invalid subject: %v): %s",
			errors.Is(err, ledger.ErrInvalidSubject), msg)
	}
	require.Len(t, rc.Artifacts, 1, "the revocation names the artifact")
}

// An earlier release read and served a subject holding NUL (it checked only
// empty and UTF-8), and its consumer recorded an artifact derived from that
// version. After the upgrade that subject is still revocable: the
// revocation succeeds and invalidates the artifact, so no ledger keeps
// serving what was served to it.
func TestArtifactOfAnEarlierReleasesNULSubjectIsRevoked(t *testing.T) {
	ctx := context.Background()
	const uri = "file:///doc.md"
	subject := "user:\x00mallory"
	l := openWith(t, nil)
	// What the earlier release stored: a served version and an artifact.
	v := ledger.ResourceVersion{URI: uri, Subject: subject, Digest: "sha256:00"}
	rec := &ledger.Record{Revision: 1, State: ledger.StateActive,
		Current: &ledger.StoredVersion{Version: v, Status: ledger.VersionServed},
		Artifacts: []ledger.DerivedArtifact{{Schema: ledger.SchemaDerivedArtifact, Index: "search",
			ArtifactID: "doc#0", Version: v, RecordedAt: time.Now()}},
	}
	_, ok, err := l.CompareAndSwap(ctx, uri, 0, rec, nil)
	require.NoError(t, err)
	require.True(t, ok)

	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	rc, err := e.RevokeSubject(subject)
	require.NoError(t, err, "a subject whose version and artifact were served cannot be revoked after the upgrade")
	require.Len(t, rc.Artifacts, 1, "the derived artifact is invalidated")
}

// An earlier release's RevokeSubject took any UTF-8 subject, and its memory
// ledger stored the revocation, of a subject beyond bbolt's key limit too.
// A snapshot of that ledger restored into bbolt is taken, or refused with
// ErrInvalidSubject, never with bbolt's own error.
func TestEarlierReleasesRevocationBeyondTheKeyLimitIsRefusedClearly(t *testing.T) {
	ctx := context.Background()
	subject := "user:" + strings.Repeat("c", 33000)
	src := ledger.NewMemory(nil)
	// What the earlier release's RevokeSubject stored.
	require.NoError(t, src.Revoke(ctx, ledger.RevokedSubject{
		Schema: ledger.SchemaRevokedSubject, Subject: subject, At: time.Now(), Engine: "earlier", Swept: true,
	}))
	snap, err := ledger.Export(ctx, src)
	require.NoError(t, err)
	err = ledger.Restore(ctx, openWith(t, nil), snap)
	if err != nil && !errors.Is(err, ledger.ErrInvalidSubject) {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("an earlier release's snapshot holding a revocation of a subject beyond bbolt's key limit is refused with bbolt's error, not ErrInvalidSubject: %s", msg)
	}
}
