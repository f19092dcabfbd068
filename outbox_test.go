package mcpsync_test

// The outbox: every entry is handed out exactly as it was written, to every
// named consumer (the default one included), and a consumer is told what
// the retention bound dropped before it passed it.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// acceptN subscribes doc and accepts n changed versions, one outbox entry
// each.
func acceptN(t *testing.T, e *mcpsync.Engine, doc string, n int) {
	t.Helper()
	if e.SessionGeneration() == 0 {
		_, err := e.BeginSession(mcpsync.SessionInfo{})
		require.NoError(t, err)
		_, err = e.Subscribe(doc, "user:alice")
		require.NoError(t, err)
		_, err = e.Activate(doc, ledger.ModePush)
		require.NoError(t, err)
	}
	for i := range n {
		tk, err := e.IssueTicket(doc, ledger.TriggerNotification)
		require.NoError(t, err)
		out, err := e.AcceptResourceVersion(tk, mcpsync.NewReadResult([]mcpsync.Content{{URI: doc, MIMEType: "text/plain", Text: fmt.Sprintf("v%d-%s", i, t.Name())}}))
		require.NoError(t, err)
		require.True(t, out.Accepted)
	}
}

// The default consumer (PullOutbox, Acknowledge of DefaultConsumer) is a named
// consumer like the others: when the retention bound overtakes it,
// PullOutbox fails with a *ledger.OutboxGapError naming the entries dropped
// before it passed them (ledger.Options.OutboxRetention: "a consumer that
// had not passed them gets an *OutboxGapError"), rather than handing out
// what is left as if nothing was lost.
func TestPullOutboxReportsWhatTheRetentionBoundDropped(t *testing.T) {
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: ledger.NewMemory(&ledger.Options{OutboxRetention: 3})})
	require.NoError(t, err)
	require.NoError(t, e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, 0)) // the default consumer is registered
	acceptN(t, e, doc, 5)

	st, err := e.OutboxState(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Dropped, "entries 1 and 2 were dropped before the default consumer passed them")
	require.Equal(t, uint64(0), st.Consumers[mcpsync.DefaultConsumer])

	cursor, err := defaultCursor(e)
	require.NoError(t, err)
	entries, err := e.PullOutbox(cursor, 0)
	var gap *ledger.OutboxGapError
	if assert.ErrorAs(t, err, &gap, "PullOutbox after the bound overtook the default consumer") {
		assert.Equal(t, uint64(1), gap.From)
		assert.Equal(t, uint64(2), gap.Through)
	}
	if err == nil {
		t.Logf("PullOutbox(%d) returned entries %d..%d and no error", cursor, entries[0].Seq, entries[len(entries)-1].Seq)
	}
}

// Consume promises "Cancelling ctx ends the sequence with ctx's error". On
// the memory ledger (whose methods ignore their context) as on the bolt
// ledger, a Consume whose context is already cancelled yields nothing but
// context.Canceled and does not register its consumer (which would pin the
// outbox).
func TestConsumeWithACancelledContextRegistersNothing(t *testing.T) {
	const doc = "file:///docs/a.md"
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	acceptN(t, e, doc, 5)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var yielded []uint64
	var firstErr error
	for en, err := range e.Consume(ctx, "index") {
		if err != nil {
			firstErr = err
			break
		}
		yielded = append(yielded, en.Seq)
	}
	assert.ErrorIs(t, firstErr, context.Canceled)
	assert.Empty(t, yielded, "entries yielded under a cancelled context")
	st, err := e.OutboxState(context.Background())
	require.NoError(t, err)
	assert.NotContains(t, st.Consumers, "index", "a cancelled Consume registered its consumer (and now pins the outbox)")
}

// recordingLedger is a ledger that records, as JSON, each entry handed to
// CompareAndSwap at the moment it is written.
type recordingLedger struct {
	ledger.Ledger
	mu   sync.Mutex
	want map[uint64]string // seq -> entry as written, JSON
}

func (r *recordingLedger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *ledger.Record, entries []mcpsync.OutboxEntry) (uint64, bool, error) {
	first, ok, err := r.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
	if ok && err == nil {
		r.mu.Lock()
		for i, e := range entries {
			e.Seq = first + uint64(i)
			b, _ := json.Marshal(e)
			r.want[e.Seq] = string(b)
		}
		r.mu.Unlock()
	}
	return first, ok, err
}

// ledgerSide is one ledger and the engines writing to it.
type ledgerSide struct {
	name    string
	ledger  ledger.Ledger
	rec     *recordingLedger // nil on the direct side
	engines []*mcpsync.Engine
	ids     map[string]string // engine id -> its name in comparisons
	tickets map[string][]ledger.Ticket
}

const (
	docA = "file:///docs/a.md"
	docB = "file:///docs/b.md"
)

// twoServers are two releases of one server, for sessions that change it.
var twoServers = []ledger.Implementation{{Name: "srv", Version: "1.0"}, {Name: "srv", Version: "2.0"}}

func (s *ledgerSide) newEngine(t *rapid.T, opts mcpsync.EngineOptions) {
	e, err := mcpsync.NewEngine(&opts)
	require.NoError(t, err)
	s.ids[e.ID()] = fmt.Sprintf("engine-%d", len(s.ids))
	s.engines = append(s.engines, e)
	_, err = e.BeginSession(legacySession(twoServers[0]))
	require.NoError(t, err)
}

// normalized returns the entries as JSON, engine ids replaced by the
// side's names for them.
func (s *ledgerSide) normalize(js string) string {
	for id, name := range s.ids {
		js = strings.ReplaceAll(js, id, name)
	}
	return js
}

func (s *ledgerSide) entries(t *rapid.T) map[uint64]string {
	ctx := context.Background()
	out, err := s.ledger.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	got := make(map[uint64]string, len(out))
	for _, e := range out {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		got[e.Seq] = string(b)
	}
	snap, err := s.ledger.Export(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Outbox, len(out), "%s: export and outbox hold as many entries", s.name)
	for _, e := range snap.Outbox {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		require.Equal(t, got[e.Seq], string(b), "%s: export's entry %d is the outbox's", s.name, e.Seq)
	}
	return got
}

// The memory ledger hands out every outbox entry exactly as it was written,
// field for field, whatever happens afterwards to the record and to the
// subscription the entry was written with: resubscribes under a new
// generation or subject, reconnects, closes, Forget, revocations,
// tombstones, quarantines, derived artifacts, several engines on one
// ledger, acknowledgements that release and reuse chunks, the retention
// bound, exports and restores.
//
// The test drives the same random sequence of engine calls against two
// memory ledgers: one used directly (the engine writes in place under its
// lock) and one behind a wrapper the engine cannot see through (the engine
// writes by CompareAndSwap), which records each entry as it is written.
// Every entry either ledger hands out (Outbox and Export) must equal the
// recorded one, and the two ledgers must hold the same entries.
func TestOutboxHandsOutEveryEntryAsWritten(t *testing.T) {
	// A check costs two ledgers' every entry at every step: 100 of them,
	// whatever RAPID_CHECKS asks of the model tests; the rest return at
	// once, but for a failure, which rapid then shrinks and replays.
	ran, failed := 0, false
	rapid.Check(t, func(t *rapid.T) {
		if ran >= 100 && !failed {
			return
		}
		ran++
		defer func() {
			if t.Failed() {
				failed = true
			}
		}()
		clock := newClock()
		retain := rapid.SampledFrom([]int{0, 40, 300}).Draw(t, "retain")
		var guard mcpsync.ContentGuard
		if rapid.Bool().Draw(t, "guard") {
			guard = mcpsync.MaxBytes(16)
		}
		engines := rapid.IntRange(1, 2).Draw(t, "engines")
		newLedger := func() ledger.Ledger {
			return ledger.NewMemory(&ledger.Options{OutboxRetention: retain})
		}
		direct := &ledgerSide{name: "direct", ledger: newLedger(), ids: map[string]string{}, tickets: map[string][]ledger.Ticket{}}
		rec := &recordingLedger{Ledger: newLedger(), want: map[uint64]string{}}
		wrapped := &ledgerSide{name: "wrapped", ledger: rec, rec: rec, ids: map[string]string{}, tickets: map[string][]ledger.Ticket{}}
		sides := []*ledgerSide{direct, wrapped}
		for _, s := range sides {
			for range engines {
				s.newEngine(t, mcpsync.EngineOptions{Ledger: s.ledger, Now: clock.now, Guard: guard})
			}
			for _, uri := range []string{docA, docB} {
				_, err := s.engines[0].Subscribe(uri, "user:alice")
				require.NoError(t, err)
				_, err = s.engines[0].Activate(uri, ledger.ModePush)
				require.NoError(t, err)
			}
		}
		// each runs one call on both sides and checks they agree on
		// whether it failed.
		each := func(what string, fn func(s *ledgerSide) error) {
			var errs [2]error
			for i, s := range sides {
				errs[i] = fn(s)
			}
			require.Equal(t, errs[0] == nil, errs[1] == nil, "%s: direct %v, wrapped %v", what, errs[0], errs[1])
		}
		check := func(step int) {
			got := direct.entries(t)
			via := wrapped.entries(t)
			require.Len(t, via, len(got), "step %d: both ledgers retain as many entries", step)
			for seq, js := range via {
				want, ok := rec.want[seq]
				require.True(t, ok, "step %d: entry %d was never written", step, seq)
				require.Equal(t, want, js, "step %d: wrapped ledger's entry %d is not the one written", step, seq)
				require.Equal(t, wrapped.normalize(js), direct.normalize(got[seq]), "step %d: direct ledger's entry %d differs", step, seq)
			}
		}
		uris := []string{docA, docB}
		subjects := []string{"user:alice", "user:bob", "user:carol"}
		bodies := []string{"v1", "v2", "v3", "a body far too long for the guard"}
		// Bounded so that every case stays cheap: each check reads every
		// retained entry of both ledgers.
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		bursts := 0
		for step := range steps {
			ei := rapid.IntRange(0, engines-1).Draw(t, "engine")
			uri := rapid.SampledFrom(uris).Draw(t, "uri")
			op := rapid.IntRange(0, 17).Draw(t, "op")
			switch op {
			case 0: // (re)connect
				srv := rapid.SampledFrom(twoServers).Draw(t, "server")
				each("session", func(s *ledgerSide) error {
					_, err := s.engines[ei].BeginSession(legacySession(srv))
					return err
				})
			case 1, 2:
				subject := rapid.SampledFrom(subjects).Draw(t, "subject")
				each("subscribe", func(s *ledgerSide) error {
					_, err := s.engines[ei].Subscribe(uri, subject)
					if err == nil {
						_, err = s.engines[ei].Activate(uri, ledger.ModePush)
					}
					return err
				})
			case 3, 4, 5: // a read answered at once
				body := rapid.SampledFrom(bodies).Draw(t, "body")
				mime := rapid.SampledFrom([]string{"text/plain", "text/markdown"}).Draw(t, "mime")
				modified := rapid.SampledFrom([]string{"", "2026-01-01T00:00:00Z"}).Draw(t, "modified")
				notFound := rapid.IntRange(0, 5).Draw(t, "notFound") == 0
				each("read", func(s *ledgerSide) error {
					e := s.engines[ei]
					tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
					if err != nil {
						return err
					}
					r := mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: mime, Text: body}}).WithLastModified(modified)
					if notFound {
						r = mcpsync.NotFoundResult()
					}
					_, err = e.AcceptResourceVersion(tk, r)
					return err
				})
			case 6: // a read left in flight
				each("issue", func(s *ledgerSide) error {
					tk, err := s.engines[ei].IssueTicket(uri, ledger.TriggerNotification)
					if err == nil {
						s.tickets[uri] = append(s.tickets[uri], tk)
					}
					return err
				})
			case 7: // a read in flight answered (late, maybe)
				if len(direct.tickets[uri]) == 0 || len(direct.tickets[uri]) != len(wrapped.tickets[uri]) {
					continue
				}
				i := rapid.IntRange(0, len(direct.tickets[uri])-1).Draw(t, "ticket")
				body := rapid.SampledFrom(bodies).Draw(t, "body")
				notFound := rapid.IntRange(0, 3).Draw(t, "notFound") == 0
				each("answer", func(s *ledgerSide) error {
					tk := s.tickets[uri][i]
					s.tickets[uri] = append(s.tickets[uri][:i:i], s.tickets[uri][i+1:]...)
					r := text(uri, body)
					if notFound {
						r = mcpsync.NotFoundResult()
					}
					var eng *mcpsync.Engine
					for _, e := range s.engines {
						if e.ID() == tk.Engine {
							eng = e
						}
					}
					_, err := eng.AcceptResourceVersion(tk, r)
					return err
				})
			case 8: // close
				acked := rapid.Bool().Draw(t, "acked")
				each("close", func(s *ledgerSide) error {
					_, err := s.engines[ei].BeginClose(uri)
					if err == nil {
						_, err = s.engines[ei].FinishClose(uri, acked)
					}
					return err
				})
			case 9:
				each("forget", func(s *ledgerSide) error { return s.engines[ei].Forget(uri) })
			case 10:
				subject := rapid.SampledFrom(subjects[1:]).Draw(t, "revoked")
				each("revoke", func(s *ledgerSide) error {
					_, err := s.engines[ei].RevokeSubject(subject)
					return err
				})
			case 11: // an artifact derived from the version served
				id := rapid.SampledFrom([]string{"x", "y"}).Draw(t, "artifact")
				each("derive", func(s *ledgerSide) error {
					e := s.engines[ei]
					for _, subject := range subjects {
						if got, err := e.Lookup(subject, uri); err == nil {
							return e.RecordDerived(ledger.DerivedArtifact{Index: "search", ArtifactID: id, Version: got.Version})
						}
					}
					return nil
				})
			case 12: // deletion evidence: a listing without the URI, or a scan
				proven := rapid.Bool().Draw(t, "proven")
				each("absent", func(s *ledgerSide) error {
					e := s.engines[ei]
					if proven {
						_, _, err := e.ApplyListing(uri, false, clock.t.Add(-time.Hour))
						return err
					}
					start := clock.t
					tk, ok, err := e.Corroborate(uri, mcpsync.AbsenceScan{Scans: []string{"s1", "s2"}, StartedAt: start, EndedAt: start})
					if err != nil || !ok {
						return err
					}
					_, err = e.AcceptResourceVersion(tk, mcpsync.NotFoundResult())
					return err
				})
			case 13: // acknowledge
				k := rapid.SampledFrom([]int{0, 1, 5, 255, 256, 600}).Draw(t, "ack")
				each("ack", func(s *ledgerSide) error {
					st, err := s.ledger.OutboxState(context.Background())
					if err != nil {
						return err
					}
					return s.ledger.Ack(context.Background(), mcpsync.DefaultConsumer, min(st.First-1+uint64(k), st.Last))
				})
			case 14, 16, 17: // a burst of versions, to fill chunks
				n := rapid.SampledFrom([]int{1, 7, 100, 256, 300}).Draw(t, "burst")
				if bursts++; bursts > 6 {
					n = 1
				}
				each("burst", func(s *ledgerSide) error {
					e := s.engines[ei]
					for i := range n {
						tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
						if err != nil {
							return err
						}
						if _, err := e.AcceptResourceVersion(tk, text(uri, fmt.Sprintf("b%d", i%2))); err != nil {
							return err
						}
					}
					return nil
				})
			case 15: // restore an export into a new ledger, and go on there
				asJSON := rapid.Bool().Draw(t, "json")
				each("restore", func(s *ledgerSide) error {
					snap, err := s.ledger.Export(context.Background())
					if err != nil {
						return err
					}
					if asJSON {
						b, err := json.Marshal(snap)
						require.NoError(t, err)
						snap = ledger.Snapshot{}
						require.NoError(t, json.Unmarshal(b, &snap))
					}
					l := newLedger()
					if err := l.Restore(context.Background(), snap); err != nil {
						return err
					}
					if s.rec != nil {
						s.rec.Ledger = l
					} else {
						s.ledger = l
					}
					s.engines = nil
					s.tickets = map[string][]ledger.Ticket{}
					for range engines {
						s.newEngine(t, mcpsync.EngineOptions{Ledger: s.ledger, Now: clock.now, Guard: guard})
					}
					return nil
				})
			}
			clock.t = clock.t.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "tick")) * time.Second)
			check(step)
		}
		st, _ := direct.ledger.OutboxState(context.Background())
		asWrittenStats.Lock()
		asWrittenStats.runs++
		asWrittenStats.last = max(asWrittenStats.last, st.Last)
		if st.Last > 256 {
			asWrittenStats.big++
		}
		asWrittenStats.Unlock()
	})
	t.Logf("runs %d, most entries %d, runs past a chunk %d", asWrittenStats.runs, asWrittenStats.last, asWrittenStats.big)
}

var asWrittenStats struct {
	sync.Mutex
	runs, big int
	last      uint64
}

// Exports read the memory ledger's outbox without its lock while appends go
// on, and a consumer keeping up releases chunks that later appends reuse.
// Every entry an export hands out is still the entry written under its
// number, field for field, whether it was kept packed against its
// subscription or whole: here entries of both shapes (versions of the
// current generation, and the revocations of derived artifacts, kept whole)
// are appended into reused chunks while exports run. Run it with -race.
func TestExportsWhileChunksAreReusedHandOutEntriesAsWritten(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	rec := &recordingLedger{Ledger: ledger.NewMemory(nil), want: map[uint64]string{}}
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: rec, Now: clock.now})
	require.NoError(t, err)
	_, err = e.BeginSession(legacySession(twoServers[0]))
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		exports [][]mcpsync.OutboxEntry
		kick    = make(chan struct{}, 1)
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for range kick {
			snap, err := rec.Export(ctx)
			if err != nil {
				panic(err)
			}
			mu.Lock()
			exports = append(exports, snap.Outbox)
			mu.Unlock()
		}
	}()

	for pass := range 12 {
		uri := fmt.Sprintf("file:///docs/%d.md", pass)
		subject := fmt.Sprintf("user:s%d", pass)
		_, err := e.Subscribe(uri, subject)
		require.NoError(t, err)
		_, err = e.Activate(uri, ledger.ModePush)
		require.NoError(t, err)
		for i := range 300 {
			tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
			require.NoError(t, err)
			out, err := e.AcceptResourceVersion(tk, text(uri, fmt.Sprintf("r%d-%d", pass, i)))
			require.NoError(t, err)
			if pass%3 != 2 { // every third pass without exports: chunks are reused
				select {
				case kick <- struct{}{}: // an export, when none is under way
				default:
				}
			}
			if i%10 == 0 {
				// A consumer that keeps up, a little behind.
				st, err := rec.OutboxState(ctx)
				require.NoError(t, err)
				require.NoError(t, rec.Ack(ctx, mcpsync.DefaultConsumer, st.Last-uint64(pass)))
			}
			if i%50 == 0 {
				require.NoError(t, e.RecordDerived(ledger.DerivedArtifact{Index: "search", ArtifactID: fmt.Sprintf("a%d", i), Version: out.Version.Version}))
			}
		}
		if pass%2 == 1 {
			_, err = e.RevokeSubject(subject) // whole entries: artifacts
			require.NoError(t, err)
		}
	}
	close(kick)
	<-done

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, exports)
	for i, outbox := range exports {
		for _, en := range outbox {
			b, err := json.Marshal(en)
			require.NoError(t, err)
			require.Equal(t, rec.want[en.Seq], string(b), "export %d: entry %d is not the one written", i, en.Seq)
		}
	}
	entries, err := rec.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	for _, en := range entries {
		b, err := json.Marshal(en)
		require.NoError(t, err)
		require.Equal(t, rec.want[en.Seq], string(b), "entry %d is not the one written", en.Seq)
	}
}

// Consumer names are held to the rules of subjects: an empty name, one
// that is not UTF-8, holds NUL or is longer than MaxSubjectBytes is refused
// with ErrInvalidConsumer by every call that takes one, and registers
// nothing; any other name is a consumer.
func TestConsumerNamesAreValidatedLikeSubjects(t *testing.T) {
	ctx := context.Background()
	e, err := mcpsync.NewEngine(nil)
	require.NoError(t, err)
	for name, consumer := range map[string]string{
		"empty":     "",
		"not UTF-8": "index\xff",
		"NUL":       "index\x00",
		"too long":  strings.Repeat("i", mcpsync.MaxSubjectBytes+1),
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, e.Acknowledge(ctx, consumer, 0), mcpsync.ErrInvalidConsumer)
			for _, err := range e.Consume(ctx, consumer) {
				assert.ErrorIs(t, err, mcpsync.ErrInvalidConsumer)
				break
			}
			st, err := e.OutboxState(ctx)
			require.NoError(t, err)
			assert.NotContains(t, st.Consumers, consumer, "an invalid name registered")
		})
	}
	for _, consumer := range []string{"indexer", "svc:indexer/β", strings.Repeat("i", mcpsync.MaxSubjectBytes)} {
		require.NoError(t, e.Acknowledge(ctx, consumer, 0), "%q", consumer)
	}
	st, err := e.OutboxState(ctx)
	require.NoError(t, err)
	assert.Len(t, st.Consumers, 3)
}

// countingLedger counts one outbox entry more than it holds.
type countingLedger struct{ ledger.Ledger }

func (l countingLedger) OutboxState(ctx context.Context) (ledger.OutboxState, error) {
	st, err := l.Ledger.OutboxState(ctx)
	st.Last++
	return st, err
}

// A ledger that counts an entry it never returns makes Consume fail with
// ErrLedgerCorrupt, rather than read it again for ever or wait for it.
func TestConsumeFailsOnALedgerThatCountsAnEntryItHasNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: countingLedger{ledger.NewMemory(nil)}})
	require.NoError(t, err)
	acceptN(t, e, docA, 2)
	var seqs []uint64
	for en, err := range e.Consume(ctx, "index") {
		if err != nil {
			require.ErrorIs(t, err, ledger.ErrLedgerCorrupt)
			break
		}
		seqs = append(seqs, en.Seq)
	}
	assert.Equal(t, []uint64{1, 2}, seqs, "what it holds is handed out first")
}

// defaultCursor is the position of the default consumer: where it resumes.
func defaultCursor(e *mcpsync.Engine) (uint64, error) {
	st, err := e.OutboxState(context.Background())
	return st.Consumers[mcpsync.DefaultConsumer], err
}
