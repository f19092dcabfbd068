package pgledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// RevokeSubject takes any UTF-8 subject, and the memory ledger stores its
// revocation (a subject revoked ahead of any read, such as a principal
// carrying a token of a few kilobytes, or one holding NUL). A snapshot of
// that ledger cannot be restored into PostgreSQL, which keys revocations
// by subject text: Restore refuses it with ErrInvalidSubject, not with a
// PostgreSQL error.
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
			// PostgreSQL cannot key the revocation: it refuses the
			// snapshot with the typed error, not one of its own.
			err = mcpsync.RestoreLedger(ctx, open(t, nil), snap)
			require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
		})
	}
}
