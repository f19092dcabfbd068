package mcpsync_test

// What Lookup says when it serves nothing, and the one value a caller
// switches on for it.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

func TestRefusalOfNamesEveryLookupError(t *testing.T) {
	for err, want := range map[error]mcpsync.LookupRefusal{
		mcpsync.ErrNoVersion:        mcpsync.LookupNoVersion,
		mcpsync.ErrRevoked:          mcpsync.LookupRevoked,
		mcpsync.ErrForbidden:        mcpsync.LookupForbidden,
		mcpsync.ErrQuarantined:      mcpsync.LookupQuarantined,
		mcpsync.ErrTombstonePending: mcpsync.LookupTombstonePending,
		mcpsync.ErrTombstoned:       mcpsync.LookupTombstoned,
		mcpsync.ErrStale:            mcpsync.LookupStale,
		mcpsync.ErrUnknownURI:       mcpsync.LookupUnknownURI,
		mcpsync.ErrInvalidURI:       mcpsync.LookupInvalidURI,
	} {
		got, ok := mcpsync.RefusalOf(fmt.Errorf("wrapped: %w", err))
		assert.True(t, ok, "%v is a refusal", err)
		assert.Equal(t, want, got, "%v", err)
	}
	for _, err := range []error{nil, errors.New("disk full"), mcpsync.ErrClientClosed} {
		got, ok := mcpsync.RefusalOf(err)
		assert.False(t, ok, "%v is no refusal", err)
		assert.Empty(t, got)
	}
}

// A URI never subscribed is unknown, not "no version yet": a caller
// waiting for a first version of it would wait for ever.
func TestLookupOfANeverSubscribedURIIsUnknown(t *testing.T) {
	e := newEngine(t, nil)
	_, err := e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrUnknownURI)
	assert.NotErrorIs(t, err, mcpsync.ErrNoVersion)

	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	_, err = e.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrNoVersion, "subscribed, not yet read")
}

// Lookup checks its argument first: a URI that is no URI is that, whoever
// asks, revoked or not.
func TestLookupChecksTheURIBeforeTheSubject(t *testing.T) {
	e := newEngine(t, nil)
	_, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	_, err = e.Lookup(alice, "::not a uri")
	require.ErrorIs(t, err, mcpsync.ErrInvalidURI)
	_, err = e.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrRevoked)
}
