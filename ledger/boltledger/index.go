package boltledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync/internal/jsontext"
	"github.com/mcpsync/mcpsync/ledger"
)

// indexEntry is what a record is indexed under: whether it is an unknown
// close, and its subjects (Record.Subjects). Stored in bucket "indexed" as
// a flags byte (1: unknown close) followed by each subject, its length
// (uvarint) first; a record indexed under nothing has no entry.
type indexEntry struct {
	unknown  bool
	subjects []string
}

const flagUnknown = 1

// entryOf is what r is indexed under, its subjects as its JSON stores them.
func entryOf(r *ledger.Record) indexEntry {
	subjects := r.Subjects()
	for i, s := range subjects {
		subjects[i] = jsontext.AsStored(s)
	}
	return indexEntry{unknown: r.State == ledger.StateUnsubscribeUnknown, subjects: subjects}
}

// encode returns the stored form of x, nil when x is indexed under nothing.
func (x indexEntry) encode() []byte {
	if !x.unknown && len(x.subjects) == 0 {
		return nil
	}
	var flags byte
	if x.unknown {
		flags = flagUnknown
	}
	b := []byte{flags}
	for _, s := range x.subjects {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeIndexEntry(key, b []byte) (indexEntry, error) {
	var x indexEntry
	if b == nil {
		return x, nil
	}
	corrupt := fmt.Errorf("%w: index entry of %q", ledger.ErrLedgerCorrupt, key)
	if len(b) == 0 || b[0]&^flagUnknown != 0 {
		return x, corrupt
	}
	x.unknown = b[0]&flagUnknown != 0
	for rest := b[1:]; len(rest) > 0; {
		n, size := binary.Uvarint(rest)
		if size <= 0 || n > uint64(len(rest)-size) {
			return x, corrupt
		}
		x.subjects = append(x.subjects, string(rest[size:size+int(n)]))
		rest = rest[size+int(n):]
	}
	return x, nil
}

// subjectBucket is the name of the bucket, in bucket "bySubject", holding
// the keys indexed under subject: its SHA-256, so that neither a long
// subject nor a long key can make a name or key bbolt refuses (32 KiB).
// Two subjects sharing one would share a bucket; a revocation re-checks
// every record it is given, so it would only visit more of them.
func subjectBucket(subject string) []byte {
	sum := sha256.Sum256([]byte(subject))
	return sum[:]
}

// fileUnder puts key in subject's bucket of "bySubject".
func fileUnder(bySubject *bolt.Bucket, subject string, key []byte) error {
	b, err := bySubject.CreateBucketIfNotExists(subjectBucket(subject))
	if err != nil {
		return err
	}
	return b.Put(key, present)
}

// unfile takes key out of subject's bucket of "bySubject", and drops the
// bucket once it holds no key.
func unfile(bySubject *bolt.Bucket, subject string, key []byte) error {
	name := subjectBucket(subject)
	b := bySubject.Bucket(name)
	if b == nil {
		return nil
	}
	if err := b.Delete(key); err != nil {
		return err
	}
	if k, _ := b.Cursor().First(); k == nil {
		return bySubject.DeleteBucket(name)
	}
	return nil
}

// index moves key, whose record is now r, in the index from where its
// entry says it was to where r puts it. A write that changes neither
// (most: an issue, an accept by the same subject) costs one read.
func index(tx *bolt.Tx, key []byte, r *ledger.Record) error {
	indexed := tx.Bucket(bucketIndexed)
	stored := indexed.Get(key)
	is := entryOf(r)
	enc := is.encode()
	if bytes.Equal(stored, enc) {
		return nil
	}
	was, err := decodeIndexEntry(key, stored)
	if err != nil {
		return err
	}
	if enc == nil {
		err = indexed.Delete(key)
	} else {
		err = indexed.Put(key, enc)
	}
	if err != nil {
		return err
	}
	if was.unknown != is.unknown {
		unknown := tx.Bucket(bucketUnknown)
		if is.unknown {
			err = unknown.Put(key, present)
		} else {
			err = unknown.Delete(key)
		}
		if err != nil {
			return err
		}
	}
	bySubject := tx.Bucket(bucketBySubject)
	for _, s := range was.subjects {
		if !slices.Contains(is.subjects, s) {
			if err := unfile(bySubject, s, key); err != nil {
				return err
			}
		}
	}
	for _, s := range is.subjects {
		if !slices.Contains(was.subjects, s) {
			if err := fileUnder(bySubject, s, key); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexer indexes records put in key order into an empty index, putting
// the keys of each bucket in order: bbolt splits a node only at commit, so
// one transaction putting keys out of order inserts each into the middle
// of a node that keeps growing (see Restore).
type indexer struct {
	tx        *bolt.Tx
	bySubject [][]byte // subjectBucket(subject) then key, sorted by finish
}

func newIndexer(tx *bolt.Tx) *indexer { return &indexer{tx: tx} }

// add indexes r under key, which is above every key added before.
func (x *indexer) add(key []byte, r *ledger.Record) error {
	e := entryOf(r)
	enc := e.encode()
	if enc == nil {
		return nil
	}
	if err := x.tx.Bucket(bucketIndexed).Put(key, enc); err != nil {
		return err
	}
	if e.unknown {
		if err := x.tx.Bucket(bucketUnknown).Put(key, present); err != nil {
			return err
		}
	}
	for _, s := range e.subjects {
		x.bySubject = append(x.bySubject, append(subjectBucket(s), key...))
	}
	return nil
}

// finish puts what add kept for bucket "bySubject", in order.
func (x *indexer) finish() error {
	slices.SortFunc(x.bySubject, bytes.Compare)
	bySubject := x.tx.Bucket(bucketBySubject)
	var b *bolt.Bucket
	var name []byte
	for _, k := range x.bySubject {
		n := k[:sha256.Size]
		if b == nil || !bytes.Equal(n, name) {
			var err error
			if b, err = bySubject.CreateBucketIfNotExists(n); err != nil {
				return err
			}
			name = n
		}
		if err := b.Put(k[sha256.Size:], present); err != nil {
			return err
		}
	}
	return nil
}

// logJoin numbers subject, which joins the revoked set, after the last
// subject that joined it.
func logJoin(tx *bolt.Tx, subject string) error {
	log := tx.Bucket(bucketRevokedLog)
	n, err := log.NextSequence()
	if err != nil {
		return err
	}
	return log.Put(key64(n), []byte(subject))
}

// buildIndex builds the index of a file of schemaV1, which has none, from
// its records and its revocations. The revoked subjects join in subject
// order: the order they joined in was never stored, and generations are
// only compared within one opened ledger.
func buildIndex(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketBySubject, bucketUnknown, bucketIndexed, bucketRevokedLog} {
		if firstKey(tx.Bucket(name).Cursor()) != nil || tx.Bucket(name).Sequence() != 0 {
			return fmt.Errorf("%w: a %s file with an index (bucket %q)", ledger.ErrLedgerCorrupt, schemaV1, name)
		}
	}
	x := newIndexer(tx)
	err := tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		return x.add(k, r)
	})
	if err != nil {
		return err
	}
	if err := x.finish(); err != nil {
		return err
	}
	return tx.Bucket(bucketRevoked).ForEach(func(k, _ []byte) error { return logJoin(tx, string(k)) })
}

// SubjectKeys implements ledger.Index: one read of the subject's
// bucket in "bySubject".
func (l *Ledger) SubjectKeys(ctx context.Context, subject string) ([]string, error) {
	name := subjectBucket(jsontext.AsStored(subject))
	var keys []string
	if err := l.flush(ctx); err != nil {
		return nil, err
	}
	err := l.view(ctx, func(tx *bolt.Tx) error {
		keys = nil
		b := tx.Bucket(bucketBySubject).Bucket(name)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltledger: keys of %q: %w", subject, err)
	}
	return keys, nil
}

// UnknownCloses implements ledger.Index: the keys of bucket
// "unknownCloses" and their records, in one read transaction.
func (l *Ledger) UnknownCloses(ctx context.Context) ([]string, []*ledger.Record, error) {
	var keys []string
	var recs []*ledger.Record
	if err := l.flush(ctx); err != nil {
		return nil, nil, err
	}
	err := l.view(ctx, func(tx *bolt.Tx) error {
		keys, recs = nil, nil
		records := tx.Bucket(bucketRecords)
		return tx.Bucket(bucketUnknown).ForEach(func(k, _ []byte) error {
			v := records.Get(k)
			if v == nil {
				return fmt.Errorf("%w: unknown close %q has no record", ledger.ErrLedgerCorrupt, k)
			}
			r, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			keys, recs = append(keys, string(k)), append(recs, r)
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("boltledger: unknown closes: %w", err)
	}
	for i, k := range keys {
		l.remember(k, recs[i])
	}
	return keys, recs, nil
}

// RevokedAfter implements ledger.Index: the subjects bucket
// "revokedLog" numbers above gen.
func (l *Ledger) RevokedAfter(ctx context.Context, gen uint64) ([]string, uint64, error) {
	var subjects []string
	var now uint64
	err := l.view(ctx, func(tx *bolt.Tx) error {
		subjects = nil
		log := tx.Bucket(bucketRevokedLog)
		if now = log.Sequence(); gen > now {
			return fmt.Errorf("revoked generation %d is ahead of the ledger's %d", gen, now)
		}
		c := log.Cursor()
		for k, v := c.Seek(key64(gen + 1)); k != nil; k, v = c.Next() {
			subjects = append(subjects, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("boltledger: revoked after %d: %w", gen, err)
	}
	return subjects, now, nil
}
