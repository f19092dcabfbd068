package ledger_test

import (
	"testing"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest/ledgertest"
)

func TestMemoryConformance(t *testing.T) {
	ledgertest.Run(t, func(_ *testing.T, opts *ledger.Options) ledger.Ledger {
		return ledger.NewMemory(opts)
	})
}
