package pgledger_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// RevokeSubject takes any UTF-8 subject, and the memory ledger stores its
// revocation (a subject revoked ahead of any read, such as a principal
// carrying a token of a few kilobytes, or one holding NUL). A snapshot of
// that ledger cannot be restored into PostgreSQL: Restore fails with a
// PostgreSQL error, neither refusing the subject clearly nor moving the
// ledger.
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
			err = mcpsync.RestoreLedger(ctx, open(t, nil), snap)
			if err != nil {
				msg := err.Error()
				if len(msg) > 200 {
					msg = msg[:100] + " … " + msg[len(msg)-100:]
				}
				t.Fatalf("a ledger holding a revocation RevokeSubject took cannot be restored into PostgreSQL (invalid subject: %v): %s",
					errors.Is(err, mcpsync.ErrInvalidSubject), msg)
			}
		})
	}
}
