package boltledger_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// A bbolt file that is not a ledger (another tool's database, a wrong
// --ledger path) has no schema key. Open takes it for a new ledger: it adds
// its six buckets and its schema to the other program's file and returns a
// ledger, instead of refusing the file with mcpsync.ErrLedgerSchema.
func TestBreak17OpenAdoptsAndWritesIntoAForeignBoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other-app.db")
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("users"))
		if err != nil {
			return err
		}
		return b.Put([]byte("alice"), []byte(`{"admin":true}`))
	}))
	require.NoError(t, db.Close())

	l, err := boltledger.Open(path, nil)
	if err == nil {
		_ = l.Close()
	}
	assert.ErrorIs(t, err, mcpsync.ErrLedgerSchema, "a bbolt file of another program is not a ledger")

	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var buckets []string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			buckets = append(buckets, string(name))
			return nil
		})
	}))
	assert.Equal(t, []string{"users"}, buckets, "the other program's file was written to")
}
