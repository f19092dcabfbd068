package mcpsync_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// An entry says when the server last confirmed it and how stale it may get;
// asked to, Lookup refuses it past that bound instead of serving it.
func TestLookupRefusesPastTheStalenessBound(t *testing.T) {
	clock := newClock()
	e := activeEngine(t, &mcpsync.Options{Now: clock.now})
	_, err := e.PublishStalenessBound(docURI, time.Minute)
	require.NoError(t, err)
	_, err = e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerInitial), text(docURI, "v1"))
	require.NoError(t, err)
	validated := clock.t

	clock.t = clock.t.Add(59 * time.Second)
	entry, err := e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, validated, entry.ValidatedAt)
	assert.Equal(t, time.Minute, entry.StalenessBound)

	clock.t = clock.t.Add(2 * time.Second)
	_, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale, "served past its bound")
	entry, err = e.Lookup(alice, docURI)
	require.NoError(t, err, "without RequireFresh the entry is served, with its age")
	assert.Equal(t, validated, entry.ValidatedAt)

	// An unchanged read confirms the version again.
	_, err = e.AcceptResourceVersion(issue(t, e, mcpsync.TriggerRevalidate), text(docURI, "v1"))
	require.NoError(t, err)
	entry, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.NoError(t, err)
	assert.Equal(t, clock.t, entry.ValidatedAt)

	// Nothing keeps a closed subscription fresh.
	resubscribe(t, e)
	_, err = e.BeginClose(docURI)
	require.NoError(t, err)
	_, err = e.Lookup(alice, docURI, mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale)
}
