package mcpsync_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mcpsync/mcpsync"
)

func TestEraOf(t *testing.T) {
	for version, want := range map[string]mcpsync.Era{
		"2025-06-18": mcpsync.EraLegacy,
		"2025-11-25": mcpsync.EraLegacy,
		"2026-07-28": mcpsync.EraModern,
		"2027-01-01": mcpsync.EraModern,
	} {
		assert.Equal(t, want, mcpsync.EraOf(version), version)
	}
}

func TestResourceNotFoundByCodeAndEra(t *testing.T) {
	cases := []struct {
		code   int
		era    mcpsync.Era
		absent bool
	}{
		{mcpsync.CodeResourceNotFound, mcpsync.EraLegacy, true},
		{mcpsync.CodeResourceNotFound, mcpsync.EraModern, true},
		{mcpsync.CodeInvalidParams, mcpsync.EraModern, true},
		{mcpsync.CodeInvalidParams, mcpsync.EraLegacy, false},
		{-32603, mcpsync.EraModern, false},
	}
	for _, tc := range cases {
		err := &mcpsync.RPCError{Method: "resources/read", Code: tc.code, Message: "whatever the text says"}
		assert.Equal(t, tc.absent, err.ResourceNotFound(tc.era), "%d in %s", tc.code, tc.era)
	}
}
