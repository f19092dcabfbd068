package ledgertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Index runs: sequences of indexRuns seeds, each of indexSteps random
// operations. A fixed seed replays a failure exactly; a durable ledger
// syncs every write, so the budget is a fixed one, not a property
// checker's hundreds of runs.
const (
	indexRuns  = 6
	indexSteps = 60
)

var (
	indexURIs     = []string{"file:///docs/0.md", "file:///docs/1.md", "file:///docs/2.md", "file:///docs/3.md", "file:///docs/4.md"}
	indexSubjects = []string{"user:alice", "user:bob", "user:carol", "user:dave", "user:erin"}
)

// testIndex drives an engine on the ledger through random operations
// (subscriptions by several subjects, accepts, not-founds, derived artifacts
// recorded and forgotten, revocations, closes whose ack is lost or not,
// resolutions, new sessions, restores into a new ledger and, when durable,
// reopens) and after each requires the ledger's ledger.Index to
// answer what a walk of every record (Range) says. A ledger without an
// index skips it.
func testIndex(t *testing.T, open Opener, reopen Reopener) {
	if _, ok := open(t, nil).(ledger.Index); !ok {
		t.Skip("the ledger keeps no index (ledger.Index)")
	}
	var seen indexCoverage
	for seed := range uint64(indexRuns) {
		r := &indexRun{t: t, rnd: rand.New(rand.NewPCG(seed, 0x1dec5)), open: open, reopen: reopen, seen: &seen}
		func() {
			// A failed require ends the test's goroutine: say how it got
			// there on the way out.
			defer func() {
				if t.Failed() {
					t.Logf("seed %d, after: %s", seed, strings.Join(r.log, "; "))
				}
			}()
			r.run()
		}()
	}
	// Vacuous otherwise: a ledger whose every write failed has an index
	// that matches its (empty) records.
	t.Logf("found: %+v", seen)
	require.Positive(t, seen.subjectKeys, "no revocation ever had a record to change")
	require.Positive(t, seen.unknown, "no close's ack was ever lost")
	require.Positive(t, seen.revoked, "no subject was ever revoked")
	require.Positive(t, seen.restored, "no ledger was restored")

	// A snapshot may name a subject twice, the later revocation replacing
	// the earlier: it joins once.
	l := open(t, nil)
	revoked := func(s string, swept bool) ledger.RevokedSubject {
		return ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: s, Swept: swept}
	}
	require.NoError(t, ledger.Restore(ctx, l, ledger.Snapshot{
		Schema: ledger.SchemaSnapshot, Records: map[string]*ledger.Record{}, Counters: map[ledger.Counter]uint64{},
		Revoked: []ledger.RevokedSubject{revoked("user:bob", false), revoked("user:alice", false), revoked("user:bob", true)},
	}))
	gen, err := l.RevokedGeneration(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), gen, "two subjects joined")
	after, now, err := l.(ledger.Index).RevokedAfter(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), now)
	require.Equal(t, []string{"user:bob", "user:alice"}, after, "in the snapshot's order, once each")
}

// indexCoverage counts the checks that found something to check.
type indexCoverage struct{ subjectKeys, unknown, revoked, restored int }

type indexRun struct {
	t      *testing.T
	rnd    *rand.Rand
	open   Opener
	reopen Reopener
	seen   *indexCoverage

	l      ledger.Ledger
	e      *mcpsync.Engine
	joined []string // subjects in the order they joined the revoked set
	log    []string // operations so far, for a failure's message
}

func (r *indexRun) run() {
	r.l = r.open(r.t, nil)
	r.engine()
	for range indexSteps {
		r.step()
		r.check()
		if r.t.Failed() {
			return
		}
	}
}

// engine opens an engine on r.l in a session of its own.
func (r *indexRun) engine() {
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: r.l})
	require.NoError(r.t, err)
	r.e = e
	r.do("begin session", func() error {
		_, err := r.e.BeginSession(mcpsync.SessionInfo{})
		return err
	})
}

func (r *indexRun) pick(from []string) string { return from[r.rnd.IntN(len(from))] }

// do runs op, which may be refused by the engine (a step out of place), but
// not fail otherwise.
func (r *indexRun) do(what string, op func() error) {
	r.t.Helper()
	r.log = append(r.log, what)
	err := op()
	var transition *mcpsync.TransitionError
	switch {
	case err == nil, errors.As(err, &transition), errors.Is(err, mcpsync.ErrRefused),
		errors.Is(err, mcpsync.ErrUnknownURI), errors.Is(err, mcpsync.ErrRevoked), errors.Is(err, mcpsync.ErrForbidden):
		return
	}
	require.NoError(r.t, err, what)
}

func (r *indexRun) step() {
	uri, subject := r.pick(indexURIs), r.pick(indexSubjects)
	switch n := r.rnd.IntN(100); {
	case n < 20:
		r.do("subscribe "+uri+" for "+subject, func() error {
			if _, err := r.e.Subscribe(uri, subject); err != nil {
				return err
			}
			_, err := r.e.Activate(uri, ledger.ModePush)
			return err
		})
	case n < 45:
		body := fmt.Sprintf("body %d", r.rnd.IntN(3))
		result := mcpsync.NewReadResult([]ledger.Content{{URI: uri, MIMEType: "text/plain", Text: body}})
		if r.rnd.IntN(8) == 0 {
			body, result = "not found", mcpsync.NotFoundResult()
		}
		r.do("read "+uri+": "+body, func() error {
			tk, err := r.e.IssueTicket(uri, ledger.TriggerNotification)
			if err != nil {
				return err
			}
			_, err = r.e.AcceptResourceVersion(tk, result)
			return err
		})
	case n < 60:
		id := fmt.Sprint(r.rnd.IntN(3))
		r.do("derive "+id+" from "+uri, func() error {
			rec, err := r.l.Load(ctx, uri)
			if err != nil || rec == nil || rec.Current == nil {
				return err
			}
			return r.e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: id, Version: rec.Current.Version})
		})
	case n < 66:
		id := fmt.Sprint(r.rnd.IntN(3))
		r.do("forget derived "+id+" of "+uri, func() error { return r.e.ForgetDerived(uri, "vectors", id) })
	case n < 72:
		r.do("revoke "+subject, func() error {
			if _, err := r.e.RevokeSubject(subject); err != nil {
				return err
			}
			if !slices.Contains(r.joined, subject) {
				r.joined = append(r.joined, subject)
			}
			return nil
		})
	case n < 82:
		acked := r.rnd.IntN(3) == 0
		r.do(fmt.Sprintf("close %s, acked %v", uri, acked), func() error {
			if _, err := r.e.BeginClose(uri); err != nil {
				return err
			}
			_, err := r.e.FinishClose(uri, acked)
			return err
		})
	case n < 85:
		r.do("resolve close of "+uri, func() error {
			_, err := r.e.ResolveUnsubscribe(uri)
			return err
		})
	case n < 88:
		r.do("forget "+uri, func() error { return r.e.Forget(uri) })
	case n < 94:
		r.do("begin session", func() error {
			_, err := r.e.BeginSession(mcpsync.SessionInfo{})
			return err
		})
	case n < 97 || r.reopen == nil:
		r.log = append(r.log, "restore into a new ledger")
		snap, err := r.l.Export(ctx)
		require.NoError(r.t, err)
		r.l = r.open(r.t, nil)
		require.NoError(r.t, ledger.Restore(ctx, r.l, snap))
		// Restore joins a snapshot's subjects in its order: by subject.
		slices.Sort(r.joined)
		r.seen.restored++
		r.check()
		r.engine()
	default:
		r.log = append(r.log, "reopen")
		r.l = r.reopen(r.t, r.l)
		r.check()
		r.engine()
	}
}

// check requires the index to say what a walk of every record says.
func (r *indexRun) check() {
	t := r.t
	t.Helper()
	x := r.l.(ledger.Index)
	bySubject := map[string][]string{}
	var unknown []string
	unknownRecs := map[string]*ledger.Record{}
	require.NoError(t, r.l.Range(ctx, func(key string, rec *ledger.Record) bool {
		if rec.State == ledger.StateUnsubscribeUnknown {
			unknown = append(unknown, key)
			unknownRecs[key] = rec
		}
		// Read the slow way, not by Record.Subjects: what a revocation
		// of each subject would change.
		for _, s := range indexSubjects {
			if c := rec.Current; c != nil && c.Status != ledger.VersionRevoked && c.Version.Subject == s ||
				slices.ContainsFunc(rec.Artifacts, func(a ledger.DerivedArtifact) bool { return a.Version.Subject == s }) {
				bySubject[s] = append(bySubject[s], key)
			}
		}
		return true
	}))
	for _, s := range append(slices.Clone(indexSubjects), "user:nobody") {
		got, err := x.SubjectKeys(ctx, s)
		require.NoError(t, err)
		require.Equal(t, bySubject[s], nilIfEmpty(got), "the keys a revocation of %s changes", s)
		r.seen.subjectKeys += len(got)
	}
	keys, recs, err := x.UnknownCloses(ctx)
	require.NoError(t, err)
	require.Equal(t, unknown, nilIfEmpty(keys), "the unknown closes")
	require.Len(t, recs, len(keys))
	for i, k := range keys {
		assertSameRecord(t, unknownRecs[k], recs[i])
	}
	r.seen.unknown += len(keys)

	gen, err := r.l.RevokedGeneration(ctx)
	require.NoError(t, err)
	revoked, err := r.l.Revoked(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(revoked)), gen, "the generation counts the subjects that joined")
	for i, s := range slices.Sorted(slices.Values(r.joined)) {
		require.Equal(t, s, revoked[i].Subject, "the revoked subjects")
	}
	for g := range gen + 1 {
		after, now, err := x.RevokedAfter(ctx, g)
		require.NoError(t, err)
		require.Equal(t, gen, now)
		require.Equal(t, nilIfEmpty(r.joined[g:]), nilIfEmpty(after), "the subjects that joined after %d", g)
	}
	_, _, err = x.RevokedAfter(ctx, gen+1)
	require.Error(t, err, "a generation ahead of the ledger's")
	r.seen.revoked += len(r.joined)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
