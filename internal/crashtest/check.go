package crashtest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Checker holds what a crash test learned from its worker's announcements
// and from the ledger at earlier interruptions, and checks the ledger of
// each interruption against it.
type Checker struct {
	uris    []string                           // every URI the worker touches
	session uint64                             // newest session generation announced
	current map[string]mcpsync.ResourceVersion // newest version seen per URI
	fences  map[string]fence                   // newest fence seen per URI
	tickets map[uint64]bool                    // request ids handed out
	revoked map[string]bool                    // revocations that returned
	lost    int                                // calls whose connection died, survived
}

// fence is the part of a record that must only move forward: the
// subscription generation, and within it the ordinals handed out and passed.
type fence struct{ gen, issued, watermark uint64 }

// NewChecker returns a checker of a worker that touches uris.
func NewChecker(uris []string) *Checker {
	return &Checker{
		uris: uris, current: map[string]mcpsync.ResourceVersion{}, fences: map[string]fence{},
		tickets: map[uint64]bool{}, revoked: map[string]bool{},
	}
}

// Events takes in lines the worker announced, each once, in order: a
// session generation or request id announced twice fails t.
func (c *Checker) Events(t testing.TB, lines []string) {
	t.Helper()
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "session":
			gen, _ := strconv.ParseUint(f[1], 10, 64)
			require.Greater(t, gen, c.session, "session generation reused")
			c.session = gen
		case "ticket":
			id, _ := strconv.ParseUint(f[1], 10, 64)
			require.False(t, c.tickets[id], "request id %d handed out twice", id)
			c.tickets[id] = true
		case "revoked":
			c.revoked[f[1]] = true
		case "lost":
			c.lost++
		}
	}
}

// Revoked returns the subjects whose revocation the worker announced; the
// caller must not change it.
func (c *Checker) Revoked() map[string]bool { return c.revoked }

// Check checks l, the ledger of a worker that is no longer running, and
// returns its export. Every revocation in it was swept: opening an engine on
// it, as Check does, finishes a sweep the kill cut short.
func (c *Checker) Check(t testing.TB, l ledger.Ledger) ledger.Snapshot {
	t.Helper()
	return c.check(t, l, true)
}

// CheckRunning checks l while its worker goes on writing, and returns its
// export: everything Check checks but that every revocation was swept, since
// the worker may be sweeping one (or revoking a subject again) as the
// ledger is exported.
func (c *Checker) CheckRunning(t testing.TB, l ledger.Ledger) ledger.Snapshot {
	t.Helper()
	return c.check(t, l, false)
}

func (c *Checker) check(t testing.TB, l ledger.Ledger, stopped bool) ledger.Snapshot {
	t.Helper()
	// Opening an engine finishes a revocation sweep the kill cut short.
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	snap, err := l.Export(context.Background())
	require.NoError(t, err)

	entries := snap.Outbox
	require.Equal(t, snap.State.First, firstSeq(entries, snap.State.Last), "entries are retained from First")
	lastVersion := map[string]mcpsync.ResourceVersion{}
	tombstoned := map[string]uint64{} // URI -> its tombstone entry, until a newer version
	for i, en := range entries {
		require.Equal(t, snap.State.First+uint64(i), en.Seq, "no entry lost or numbered twice")
		if en.Version.Schema != "" {
			lastVersion[en.URI] = en.Version
			delete(tombstoned, en.URI)
		}
		if en.Reason == ledger.InvalidateTombstoned {
			require.Zero(t, tombstoned[en.URI], "%s: tombstoned by entries %d and %d with no version between", en.URI, tombstoned[en.URI], en.Seq)
			tombstoned[en.URI] = en.Seq
		}
	}
	for key, r := range snap.Records {
		if r.Sub != nil {
			f := fence{r.Sub.Generation, r.LastIssued, r.Watermark}
			prev := c.fences[key]
			require.GreaterOrEqual(t, f.gen, prev.gen, "%s: subscription generation reused", key)
			if f.gen == prev.gen {
				require.GreaterOrEqual(t, f.issued, prev.issued, "%s: read ordinal reused in generation %d", key, f.gen)
				require.GreaterOrEqual(t, f.watermark, prev.watermark, "%s: watermark went back in generation %d", key, f.gen)
			}
			c.fences[key] = f
		}
		if r.Current == nil {
			continue
		}
		v := r.Current.Version
		require.Equal(t, v, lastVersion[key], "%s: the current version is the one the outbox announced last", key)
		if prev, ok := c.current[key]; ok {
			require.False(t, prev.After(v), "%s regressed from %d/%d to %d/%d", key,
				prev.SubscriptionGeneration, prev.ReadOrdinal, v.SubscriptionGeneration, v.ReadOrdinal)
		}
		c.current[key] = v
		if c.revoked[v.Subject] {
			assert.Equal(t, ledger.VersionRevoked, r.Current.Status, "%s: a revoked subject's version", key)
		}
		for _, tk := range r.Tickets {
			assert.LessOrEqual(t, tk.RequestID, snap.Counters[ledger.CounterRequest], "%s: a ticket the counter did not allocate", key)
		}
	}
	revoked := map[string]bool{}
	for _, r := range snap.Revoked {
		revoked[r.Subject] = true
		if stopped {
			assert.True(t, r.Swept, "%s: sweep finished on open", r.Subject)
		}
	}
	for s := range c.revoked {
		require.True(t, revoked[s], "revocation of %s lost", s)
		for _, uri := range c.uris {
			_, err := e.Lookup(s, uri)
			assert.Error(t, err, "%s served to revoked %s", uri, s)
		}
	}
	assert.GreaterOrEqual(t, snap.Counters[ledger.CounterSession], c.session)
	return snap
}

func firstSeq(entries []mcpsync.OutboxEntry, last uint64) uint64 {
	if len(entries) == 0 {
		return last + 1
	}
	return entries[0].Seq
}
