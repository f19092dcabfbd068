package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// RevokeSubject takes any UTF-8 subject, and the memory ledger stores its
// revocation (a subject revoked ahead of any read, such as a principal
// carrying a token of a few kilobytes, or one holding NUL). A snapshot of
// that ledger restored into PostgreSQL keeps the NUL subject's revocation
// (keyed escaped), and refuses one beyond what a btree entry holds with
// ErrInvalidSubject, not with a PostgreSQL error.
func TestBreak28RestoreSubject(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": break26LongSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			src := mcpsync.NewMemoryLedger(nil)
			e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: src})
			require.NoError(t, err)
			_, err = e.RevokeSubject(subject)
			if err != nil {
				require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
				return
			}
			snap, err := mcpsync.ExportLedger(ctx, src)
			require.NoError(t, err)
			l := open(t, nil)
			err = mcpsync.RestoreLedger(ctx, l, snap)
			if name == "long" {
				require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
				return
			}
			require.NoError(t, err)
			revoked, err := l.Revoked(ctx)
			require.NoError(t, err)
			require.Len(t, revoked, 1)
			require.Equal(t, subject, revoked[0].Subject)
			after, _, err := l.(mcpsync.LedgerIndex).RevokedAfter(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, []string{subject}, after)
		})
	}
}
