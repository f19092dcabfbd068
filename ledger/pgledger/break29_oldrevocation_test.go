package pgledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The earlier release's RevokeSubject took any UTF-8 subject, and its memory
// ledger stored the revocation (a subject holding NUL, or one of a few
// kilobytes). A snapshot of that ledger restored into PostgreSQL fails with
// a PostgreSQL error, not a clear ErrInvalidSubject: the change refuses
// such subjects only at RevokeSubject, never where a snapshot brings one in.
func TestBreak29OldRevocation(t *testing.T) {
	for name, subject := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": break26LongSubject(t),
	} {
		t.Run(name, func(t *testing.T) {
			src := mcpsync.NewMemoryLedger(nil)
			// What the earlier release's RevokeSubject stored.
			require.NoError(t, src.Revoke(ctx, mcpsync.RevokedSubject{
				Schema: mcpsync.SchemaRevokedSubject, Subject: subject, At: time.Now(), Engine: "earlier", Swept: true,
			}))
			snap, err := mcpsync.ExportLedger(ctx, src)
			require.NoError(t, err)
			err = mcpsync.RestoreLedger(ctx, open(t, nil), snap)
			if err != nil && !errors.Is(err, mcpsync.ErrInvalidSubject) {
				msg := err.Error()
				if len(msg) > 200 {
					msg = msg[:100] + " … " + msg[len(msg)-100:]
				}
				t.Fatalf("an earlier release's snapshot holding a revocation of %s is refused with a PostgreSQL error, not ErrInvalidSubject: %s", name, msg)
			}
		})
	}
}
