package mcpsync_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Lookup now refuses a subject some ledger could not revoke with
// ErrInvalidSubject, a refusal it never returned before, but RefusalOf ("one
// per error of Engine.Lookup") does not know it: a caller switching on
// RefusalOf takes the refusal for a failed ledger or a closed client.
func TestBreak29RefusalOf(t *testing.T) {
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	for name, subject := range map[string]string{
		"nul":  "user:\x00mallory",
		"long": "user:" + strings.Repeat("a", mcpsync.MaxSubjectBytes),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.Lookup(subject, "file:///doc.md")
			require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
			_, ok := mcpsync.RefusalOf(err)
			require.True(t, ok, "Lookup's refusal of the subject is not a refusal to RefusalOf: %v", err)
		})
	}
}
