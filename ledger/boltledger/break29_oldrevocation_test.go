package boltledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The earlier release's RevokeSubject took any UTF-8 subject, and its memory
// ledger stored the revocation, of a subject beyond bbolt's key limit too (a
// principal carrying a certificate chain). A snapshot of that ledger restored
// into bbolt fails with bbolt's error, not a clear ErrInvalidSubject.
func TestBreak29OldRevocation(t *testing.T) {
	ctx := context.Background()
	subject := "user:" + strings.Repeat("c", 33000)
	src := mcpsync.NewMemoryLedger(nil)
	// What the earlier release's RevokeSubject stored.
	require.NoError(t, src.Revoke(ctx, mcpsync.RevokedSubject{
		Schema: mcpsync.SchemaRevokedSubject, Subject: subject, At: time.Now(), Engine: "earlier", Swept: true,
	}))
	snap, err := mcpsync.ExportLedger(ctx, src)
	require.NoError(t, err)
	err = mcpsync.RestoreLedger(ctx, openWith(t, nil), snap)
	if err != nil && !errors.Is(err, mcpsync.ErrInvalidSubject) {
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:100] + " … " + msg[len(msg)-100:]
		}
		t.Fatalf("an earlier release's snapshot holding a revocation of a subject beyond bbolt's key limit is refused with bbolt's error, not ErrInvalidSubject: %s", msg)
	}
}
