package mcpsync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// readAs subscribes uri for subject and accepts one read of body.
func readAs(t *testing.T, e *mcpsync.Engine, uri, subject, body string) {
	t.Helper()
	_, err := e.Subscribe(uri, subject)
	require.NoError(t, err)
	_, err = e.Activate(uri, ledger.ModePush)
	require.NoError(t, err)
	accept(t, e, uri, text(uri, body))
}

// accept issues a read of uri and hands result to the fence.
func accept(t *testing.T, e *mcpsync.Engine, uri string, result mcpsync.ReadResult) mcpsync.Outcome {
	t.Helper()
	tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
	require.NoError(t, err)
	out, err := e.AcceptResourceVersion(tk, result)
	require.NoError(t, err)
	return out
}

// uris collects the URIs of a listing, failing on its error.
func uris(t *testing.T, seq func(func(mcpsync.Entry, error) bool)) []string {
	t.Helper()
	var out []string
	for entry, err := range seq {
		require.NoError(t, err)
		out = append(out, entry.Version.URI)
	}
	return out
}

// noIndex hides the memory ledger's index: the engine then walks every
// record, as over a ledger that keeps none.
type noIndex struct{ ledger.Ledger }

// listed is one engine holding, for alice, a URI of each kind Lookup
// tells apart: served ones, one quarantined, one whose tombstone is
// pending, one that was forgotten, one never read, and one of bob's.
func listed(t *testing.T, ledger ledger.Ledger) *mcpsync.Engine {
	t.Helper()
	e := newEngine(t, &mcpsync.EngineOptions{Ledger: ledger, Guard: func(_ string, contents []mcpsync.Content) error {
		if strings.Contains(contents[0].Text, "poison") {
			return errors.New("poisoned")
		}
		return nil
	}})
	readAs(t, e, "file:///docs/a.md", alice, "a")
	readAs(t, e, "file:///docs/b.md", alice, "b")
	readAs(t, e, "file:///notes/c.md", alice, "c")
	readAs(t, e, "file:///docs/quarantined.md", alice, "fine")
	accept(t, e, "file:///docs/quarantined.md", text("file:///docs/quarantined.md", "poison"))
	readAs(t, e, "file:///docs/gone.md", alice, "gone")
	accept(t, e, "file:///docs/gone.md", mcpsync.NotFoundResult())
	readAs(t, e, "file:///docs/forgotten.md", alice, "forgotten")
	_, err := e.BeginClose("file:///docs/forgotten.md")
	require.NoError(t, err)
	_, err = e.FinishClose("file:///docs/forgotten.md", true)
	require.NoError(t, err)
	require.NoError(t, e.Forget("file:///docs/forgotten.md"))
	_, err = e.Subscribe("file:///docs/unread.md", alice)
	require.NoError(t, err)
	readAs(t, e, "file:///docs/bobs.md", bob, "bob's")
	return e
}

// A listing yields exactly the entries Lookup serves the subject, in URI
// order, and skips every URI Lookup refuses; over a ledger with an index
// and over one without.
func TestEntriesYieldExactlyWhatLookupServes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ledger func() ledger.Ledger
	}{
		{"indexed", func() ledger.Ledger { return ledger.NewMemory(nil) }},
		{"walked", func() ledger.Ledger { return noIndex{ledger.NewMemory(nil)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := listed(t, tc.ledger())
			var served []string
			for _, u := range []string{
				"file:///docs/a.md", "file:///docs/b.md", "file:///docs/bobs.md", "file:///docs/forgotten.md",
				"file:///docs/gone.md", "file:///docs/quarantined.md", "file:///docs/unread.md", "file:///notes/c.md",
			} {
				if _, err := e.Lookup(alice, u); err == nil {
					served = append(served, u)
				} else {
					_, refused := mcpsync.RefusalOf(err)
					require.True(t, refused, "%s: %v", u, err)
				}
			}
			require.Equal(t, []string{"file:///docs/a.md", "file:///docs/b.md", "file:///notes/c.md"}, served)
			assert.Equal(t, served, uris(t, e.Entries(t.Context(), alice)))
			for entry, err := range e.Entries(t.Context(), alice) {
				require.NoError(t, err)
				want, err := e.Lookup(alice, entry.Version.URI)
				require.NoError(t, err)
				assert.Equal(t, want, entry)
			}
			assert.Equal(t, []string{"file:///docs/bobs.md"}, uris(t, e.Entries(t.Context(), bob)))
		})
	}
}

// URIPrefix narrows a listing; a listing stopped early stops.
func TestEntriesFilterByPrefix(t *testing.T) {
	e := listed(t, nil)
	assert.Equal(t, []string{"file:///docs/a.md", "file:///docs/b.md"},
		uris(t, e.Entries(t.Context(), alice, mcpsync.URIPrefix("file:///docs/"))))
	assert.Equal(t, []string{"file:///notes/c.md"},
		uris(t, e.Entries(t.Context(), alice, mcpsync.URIPrefix("file:///notes/"))))
	assert.Empty(t, uris(t, e.Entries(t.Context(), alice, mcpsync.URIPrefix("file:///none/"))))
	n := 0
	for range e.Entries(t.Context(), alice) {
		n++
		break
	}
	assert.Equal(t, 1, n)
}

// With RequireFresh a listing leaves out the copies past their bound, and
// those no subscription keeps fresh, as a strict Lookup refuses them.
func TestStrictEntriesLeaveOutCopiesPastTheirBound(t *testing.T) {
	clock := newClock()
	e := newEngine(t, &mcpsync.EngineOptions{Now: clock.now})
	readAs(t, e, "file:///docs/a.md", alice, "a")
	readAs(t, e, "file:///docs/b.md", alice, "b")
	readAs(t, e, "file:///docs/unbound.md", alice, "never bound")
	_, err := e.PublishStalenessBound("file:///docs/a.md", time.Minute)
	require.NoError(t, err)
	_, err = e.PublishStalenessBound("file:///docs/b.md", time.Hour)
	require.NoError(t, err)

	assert.Equal(t, []string{"file:///docs/a.md", "file:///docs/b.md"}, uris(t, e.Entries(t.Context(), alice, mcpsync.RequireFresh())))
	clock.t = clock.t.Add(2 * time.Minute)
	assert.Equal(t, []string{"file:///docs/b.md"}, uris(t, e.Entries(t.Context(), alice, mcpsync.RequireFresh())))
	_, err = e.Lookup(alice, "file:///docs/a.md", mcpsync.RequireFresh())
	require.ErrorIs(t, err, mcpsync.ErrStale)
	assert.Len(t, uris(t, e.Entries(t.Context(), alice)), 3, "without RequireFresh every served copy is listed")
}

// A revoked subject is served nothing, listed or looked up; a listing whose
// context ends says so and stops; a subject that is no subject is an error.
func TestEntriesOfARevokedSubjectAreEmpty(t *testing.T) {
	e := listed(t, nil)
	_, err := e.RevokeSubject(alice)
	require.NoError(t, err)
	assert.Empty(t, uris(t, e.Entries(t.Context(), alice)))
	assert.Equal(t, []string{"file:///docs/bobs.md"}, uris(t, e.Entries(t.Context(), bob)))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var errs []error
	for _, err := range e.Entries(ctx, bob) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.Canceled)

	for _, err := range e.Entries(t.Context(), "") {
		require.ErrorIs(t, err, mcpsync.ErrInvalidSubject)
	}
}

// What a kept scan subscribes after the listing was first taken is in the
// next listing.
func TestClientEntriesShowWhatAKeptScanSubscribesLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newKeptRig(t, eras[0], "file:///kb/a.md")
		r.keep(t, true)
		require.Equal(t, []string{"file:///kb/a.md"}, uris(t, r.c.Entries(t.Context())))

		r.srv.Set("file:///kb/b.md", "text/plain", "v1 of file:///kb/b.md")
		time.Sleep(3 * keptReview)
		quiesce()
		assert.Equal(t, []string{"file:///kb/a.md", "file:///kb/b.md"}, uris(t, r.c.Entries(t.Context())))
		for entry, err := range r.c.Entries(t.Context()) {
			require.NoError(t, err)
			assert.Empty(t, entry.Degraded)
		}

	})
}

// The Client's listing says, like its Lookup, when a copy is not being
// kept fresh: while the session is lost, every entry is Degraded.
func TestClientEntriesSayWhenACopyIsNotKeptFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, eras[0], &mcpsync.ClientOptions{PingEvery: 100 * time.Millisecond, PingTimeout: 100 * time.Millisecond})
		r.subscribe()
		quiesce()
		for entry, err := range r.c.Entries(t.Context()) {
			require.NoError(t, err)
			assert.Empty(t, entry.Degraded)
		}
		r.loseSession()
		quiesce()
		n := 0
		for entry, err := range r.c.Entries(t.Context()) {
			require.NoError(t, err)
			n++
			want, err := r.c.Lookup(entry.Version.URI)
			require.NoError(t, err)
			assert.NotEmpty(t, entry.Degraded, "the lost session is not said")
			assert.Equal(t, want.Degraded, entry.Degraded)
		}
		assert.Equal(t, 1, n)
		r.setDown(false)
		quiesce()
	})
}
