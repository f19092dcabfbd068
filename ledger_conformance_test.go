package mcpsync_test

import (
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest/ledgertest"
)

func TestMemoryLedgerConformance(t *testing.T) {
	ledgertest.Run(t, func(_ *testing.T, opts *mcpsync.LedgerOptions) mcpsync.Ledger {
		return mcpsync.NewMemoryLedger(opts)
	})
}
