package boltledger_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
)

// The counters bucket holds each identity counter as 8 bytes. A value of
// any other length (a torn or hand-edited file) is read as 0 by u64, so the
// ledger silently starts handing out session generations, close epochs and
// request ids from 1 again: identities "never reused across restarts" are
// reused. It must be refused as mcpsync.ErrLedgerCorrupt.
func TestBreak17GarbageCounterValueRestartsIdentitiesFromOne(t *testing.T) {
	path := break17File(t)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("counters"))
		require.Len(t, c.Get([]byte(mcpsync.CounterSession)), 8)
		return c.Put([]byte(mcpsync.CounterSession), []byte{0xff, 0xff}) // not 8 bytes
	}))
	require.NoError(t, db.Close())

	l, err := boltledger.Open(path, nil)
	if err != nil {
		assert.ErrorIs(t, err, mcpsync.ErrLedgerCorrupt)
		return
	}
	defer l.Close()
	first, err := l.Next(ctx, mcpsync.CounterSession, 1)
	if err != nil {
		assert.ErrorIs(t, err, mcpsync.ErrLedgerCorrupt)
		return
	}
	t.Errorf("a garbage session counter was read as 0: Next handed out session generation %d again (200 were already used)", first)
}
