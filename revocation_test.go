package mcpsync_test

// Revocation: a subject revoked through any engine or worker is refused by
// every engine on the ledger, its content is announced revoked in the
// outbox wherever the URI is held, and a revoked principal's client says
// so rather than waiting for reads the fence can never accept.

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
	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// "Revoked subjects ... are ledger state" (DESIGN.md, Identity lives in the
// ledger). A second engine on the same ledger (a second Client for another
// server or principal set, a blue/green handover in one process) refuses
// the revoked subject's read in flight after the first engine's
// RevokeSubject returned: nothing is accepted, served or announced for it.
func TestRevocationIsEnforcedByEveryEngineOnTheLedger(t *testing.T) {
	const doc = "file:///docs/a.md"
	l := ledger.NewMemory(nil)
	a, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	b, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)

	_, err = b.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	subscribeActive(t, b, doc, "user:bob")
	inFlight, err := b.IssueTicket(doc, ledger.TriggerNotification)
	require.NoError(t, err)

	_, err = a.RevokeSubject("user:bob")
	require.NoError(t, err)
	revoked, err := l.Revoked(context.Background())
	require.NoError(t, err)
	require.Len(t, revoked, 1, "the revocation is in the ledger")

	out, err := b.AcceptResourceVersion(inFlight, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: "bob's secret"}}))
	assert.ErrorIs(t, err, mcpsync.ErrSubjectRevoked, "a read of a subject revoked in the ledger passed the fence")
	assert.False(t, out.Accepted)
	_, err = b.Lookup("user:bob", doc)
	assert.ErrorIs(t, err, mcpsync.ErrRevoked, "the revoked subject's new version is served")
	entries, err := b.PullOutbox(0, 0)
	require.NoError(t, err)
	for _, en := range entries {
		assert.NotEqual(t, ledger.InvalidateUpdated, en.Reason, "entry %d tells consumers to index the revoked subject's content", en.Seq)
	}
}

// Two engines share a ledger (docs/workers.md). Worker A's
// RecordDerived checks the subject's revocation, then worker B revokes the
// subject and sweeps the URI, then A's write lands. The artifact is
// refused with ErrRevoked, or an outbox entry names it (DESIGN: revocation
// "emits outbox invalidations for every derived artifact that consumers
// recorded against those versions"): it never stays in the index unseen.
func TestRecordDerivedRacingARevocationIsRefusedOrAnnounced(t *testing.T) {
	hooked := newFaultLedger()
	mem := hooked.Ledger
	a := newEngine(t, &mcpsync.EngineOptions{Ledger: hooked})
	_, err := a.Subscribe(docURI, alice)
	require.NoError(t, err)
	_, err = a.Activate(docURI, ledger.ModePush)
	require.NoError(t, err)
	out, err := a.AcceptResourceVersion(issue(t, a, ledger.TriggerInitial), text(docURI, "alice's notes"))
	require.NoError(t, err)
	v1 := out.Version.Version

	b, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: mem})
	require.NoError(t, err)
	hooked.beforeWrite(func(_ string, next *ledger.Record) bool { return len(next.Artifacts) > 0 }, func() {
		_, err := b.RevokeSubject(alice)
		require.NoError(t, err)
	})

	recErr := a.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: "chunk-0", Version: v1})
	if recErr != nil {
		require.ErrorIs(t, recErr, mcpsync.ErrRevoked)
		return // refused: fine
	}
	entries, err := a.PullOutbox(0, 0)
	require.NoError(t, err)
	named := false
	for _, en := range entries {
		if en.Artifact != nil && en.Artifact.ArtifactID == "chunk-0" {
			named = true
		}
	}
	rec, err := mem.Load(context.Background(), docURI)
	require.NoError(t, err)
	require.True(t, named, "RecordDerived returned nil for an artifact of a revoked subject and no outbox entry names it (record holds %d artifact(s) on a %s version)",
		len(rec.Artifacts), rec.Current.Status)
}

// Two workers share a PostgreSQL ledger; worker B holds docURI and keeps it
// (as a Shard does, for as long as B lives). Alice is revoked through
// worker A: the receipt lists docURI as Elsewhere. B, healthy, learns of
// the revocation and sweeps the URI it holds: the outbox carries docURI's
// ledger.InvalidateRevoked, so the index fed by the outbox stops serving alice's
// content.
func TestRevocationOfAURIHeldElsewhereReachesTheOutbox(t *testing.T) {
	conn, schema := pgtest.Schema(t)
	open := func() *pgledger.Ledger {
		l, err := pgledger.Open(t.Context(), conn, &pgledger.Options{Schema: schema, Leases: &pgledger.LeaseOptions{TTL: time.Hour}})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}
	la, lb := open(), open()
	eb, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: lb})
	require.NoError(t, err)
	beginSession(t, eb)
	_, err = lb.Acquire(t.Context(), docURI)
	require.NoError(t, err)
	subscribeActive(t, eb, docURI, alice)
	tk, err := eb.IssueTicket(docURI, ledger.TriggerNotification)
	require.NoError(t, err)
	out, err := eb.AcceptResourceVersion(tk, text(docURI, "alice's text"))
	require.NoError(t, err)
	require.True(t, out.Accepted)

	ea, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: la})
	require.NoError(t, err)
	rc, err := ea.RevokeSubject(alice)
	require.NoError(t, err)
	require.Equal(t, []string{docURI}, rc.Elsewhere)

	// B, holding the URI, goes on: a lookup, a change notification.
	_, err = eb.Lookup(alice, docURI)
	require.ErrorIs(t, err, mcpsync.ErrRevoked, "B knows alice is revoked")
	if tk, err := eb.IssueTicket(docURI, ledger.TriggerNotification); err == nil {
		_, _ = eb.AcceptResourceVersion(tk, text(docURI, "alice's text, changed"))
	}
	_, err = lb.Renew(t.Context())
	require.NoError(t, err)

	entries, err := lb.Outbox(t.Context(), 0, 0)
	require.NoError(t, err)
	announced := false
	for _, en := range entries {
		if en.URI == docURI && en.Reason == ledger.InvalidateRevoked {
			announced = true
		}
	}
	rec, err := lb.Load(t.Context(), docURI)
	require.NoError(t, err)
	require.True(t, announced, "the outbox never announces that docURI's version (status %s) was read by a revoked subject: the index keeps it", rec.Current.Status)
}

// isRevocation reports whether err says the client's principal is revoked,
// by either sentinel.
func isRevocation(err error) bool {
	return errors.Is(err, mcpsync.ErrRevoked) || errors.Is(err, mcpsync.ErrSubjectRevoked)
}

// revokedWorker runs a worker on ledger that subscribes doc and stops, then
// revokes alice in the ledger while no worker runs, and returns a new client
// of alice on the ledger, as a worker restarted with the old credentials.
func revokedWorker(t *testing.T, srv *mcpsynctest.Server, doc string) *mcpsync.Client {
	t.Helper()
	ledger := ledger.NewMemory(nil)
	dial := srv.Dialer()
	first, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: engineOn(t, ledger), Subject: alice})
	require.NoError(t, err)
	_, err = first.Subscribe(t.Context(), doc)
	require.NoError(t, err)
	require.NoError(t, first.WaitForSync(t.Context()))
	require.NoError(t, first.Close())

	_, err = engineOn(t, ledger).RevokeSubject(alice)
	require.NoError(t, err)

	c, err := mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: engineOn(t, ledger), Subject: alice})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A worker restarted with credentials revoked while it was down resumes its
// subscriptions, and every read it sends is refused SUBJECT_REVOKED.
// WaitForSync, which returns once every watched URI had "a definite
// answer", returns an error saying the principal is revoked rather than
// waiting an hour for a read the fence can never accept (DESIGN: a
// subscription fails to converge only visibly).
func TestWaitForSyncOfARevokedPrincipalSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc = "file:///docs/handbook.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(doc, "text/markdown", "v1")
		c := revokedWorker(t, srv, doc)

		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		err := c.WaitForSync(ctx)
		require.Error(t, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "WaitForSync waited an hour for a revoked principal's reads")
		assert.True(t, isRevocation(err), "WaitForSync's error does not say the principal is revoked: %v", err)
	})
}

// Subscribe sends the first read before it returns and says when the URI is
// not found; a first read refused because the principal is revoked fails
// the Subscribe with a revocation error too, rather than leaving the
// caller to wait for a version that cannot come.
func TestSubscribeOfARevokedPrincipalFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const doc, other = "file:///docs/handbook.md", "file:///docs/benefits.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(doc, "text/markdown", "v1")
		srv.Set(other, "text/markdown", "v1")
		c := revokedWorker(t, srv, doc)

		_, err := c.Subscribe(t.Context(), other)
		assert.True(t, isRevocation(err), "Subscribe of a revoked principal returned %v", err)
	})
}

// Lookup refuses a subject some ledger could not revoke (a NUL, or over
// MaxSubjectBytes) with ErrInvalidSubject, and RefusalOf ("one per error
// of Engine.Lookup") knows that refusal too, so a caller switching on it
// does not take it for a failed ledger or a closed client.
func TestRefusalOfKnowsAnInvalidSubject(t *testing.T) {
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
