package mcpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// casLedger hides the memory ledger's type, so that an engine on it writes
// by Load and CompareAndSwap, as it writes every durable ledger.
type casLedger struct{ ledger.Ledger }

// twin is one engine of TestWritesInPlaceMatchCompareAndSwap, with what it
// was told.
type twin struct {
	e           *mcpsync.Engine
	transitions []mcpsync.Transition
	tickets     []ledger.Ticket // every ticket handed out, in order
}

// TestWritesInPlaceMatchCompareAndSwap runs one random sequence of calls
// on two engines with the same clock: one on the memory ledger, which
// writes its records in place, and one on the same kind of ledger behind
// an interface that only offers Load and CompareAndSwap, the way the engine
// writes every durable ledger. Every result (tickets, outcomes, receipts,
// errors, lookups, rows, transitions) and, at the end, the whole ledger
// (records, outbox, counters) and the audit must be the same, but for the
// engine's identity.
func TestWritesInPlaceMatchCompareAndSwap(t *testing.T) {
	uris := []string{docURI, "file:///docs/b.md", "FILE:///docs/%63.md"}
	subjects := []string{alice, bob}
	bodies := []string{"one", "two", "bad three"}
	rapid.Check(t, func(rt *rapid.T) {
		clock := newClock()
		var guard mcpsync.ContentGuard
		if rapid.Bool().Draw(rt, "guard") {
			guard = func(_ string, contents []mcpsync.Content) error {
				if strings.HasPrefix(contents[0].Text, "bad") {
					return fmt.Errorf("refused")
				}
				return nil
			}
		}
		var twins [2]*twin
		for i, l := range []ledger.Ledger{ledger.NewMemory(nil), casLedger{ledger.NewMemory(nil)}} {
			tw := &twin{}
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{
				Ledger: l, Now: clock.now, Guard: guard, MaxReadsInFlight: 3,
				OnTransition: func(tr mcpsync.Transition) { tw.transitions = append(tw.transitions, tr) },
			})
			require.NoError(rt, err)
			tw.e = e
			twins[i] = tw
		}
		// same compares what both engines answered, with each engine's
		// identity replaced.
		same := func(what string, results ...any) {
			var got [2]string
			for i := range twins {
				b, err := json.Marshal(results[i*len(results)/2 : (i+1)*len(results)/2])
				require.NoError(rt, err)
				got[i] = strings.ReplaceAll(string(b), twins[i].e.ID(), "ENGINE")
			}
			require.Equal(rt, got[0], got[1], what)
		}
		errText := func(err error) string {
			if err == nil {
				return ""
			}
			return err.Error()
		}
		both := func(what string, call func(tw *twin) []any) {
			a, b := call(twins[0]), call(twins[1])
			same(what, append(a, b...)...)
		}
		// bothReturn is both for a call that returns a value and an error.
		bothReturn := func(what string, call func(tw *twin) (any, error)) {
			both(what, func(tw *twin) []any {
				v, err := call(tw)
				return []any{v, errText(err)}
			})
		}
		keep := func(tw *twin, tk ledger.Ticket, ok bool) {
			if ok {
				tw.tickets = append(tw.tickets, tk)
			}
		}
		result := func(rt *rapid.T, uri string) mcpsync.ReadResult {
			switch rapid.IntRange(0, 9).Draw(rt, "result") {
			case 0:
				return mcpsync.NotFoundResult()
			case 1:
				return text("file:///elsewhere.md", "x")
			case 2:
				return mcpsync.ReadResult{}
			}
			return text(uri, rapid.SampledFrom(bodies).Draw(rt, "body"))
		}
		for _, tw := range twins {
			_, err := tw.e.BeginSession(mcpsync.SessionInfo{Capabilities: ledger.CapabilityReceipt{
				Server: ledger.Implementation{Name: "test-server", Version: "1.0.0"}, Resources: true, Subscribe: true,
			}})
			require.NoError(rt, err)
		}
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for range steps {
			uri := rapid.SampledFrom(uris).Draw(rt, "uri")
			subject := rapid.SampledFrom(subjects).Draw(rt, "subject")
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); op {
			case 0:
				bothReturn("subscribe", func(tw *twin) (any, error) { return tw.e.Subscribe(uri, subject) })
			case 1:
				mode := rapid.SampledFrom([]ledger.SubscriptionMode{ledger.ModePush, ledger.ModePoll}).Draw(rt, "mode")
				bothReturn("activate", func(tw *twin) (any, error) { return tw.e.Activate(uri, mode) })
			case 2:
				both("notify", func(tw *twin) []any {
					tk, ok, err := tw.e.Notify(uri)
					keep(tw, tk, ok)
					return []any{tk, ok, errText(err)}
				})
			case 3, 4:
				trigger := rapid.SampledFrom([]ledger.Trigger{ledger.TriggerInitial, ledger.TriggerPoll}).Draw(rt, "trigger")
				both("issue", func(tw *twin) []any {
					tk, err := tw.e.IssueTicket(uri, trigger)
					keep(tw, tk, err == nil)
					return []any{tk, errText(err)}
				})
			case 5, 6, 7, 8:
				if len(twins[0].tickets) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(twins[0].tickets)-1).Draw(rt, "ticket")
				r := result(rt, twins[0].tickets[i].URI)
				forge := rapid.IntRange(0, 9).Draw(rt, "forge") == 0
				finish := rapid.Bool().Draw(rt, "finish")
				both("accept", func(tw *twin) []any {
					tk := tw.tickets[i]
					if forge {
						tk.ReadOrdinal += 5
					}
					var out mcpsync.Outcome
					var err error
					if finish {
						out, err = tw.e.FinishRead(tk, r)
						if out.FollowUp != nil {
							keep(tw, *out.FollowUp, true)
						}
					} else {
						out, err = tw.e.AcceptResourceVersion(tk, r)
					}
					return []any{out, errText(err)}
				})
			case 9:
				if len(twins[0].tickets) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(twins[0].tickets)-1).Draw(rt, "ticket")
				both("fail", func(tw *twin) []any {
					next, err := tw.e.Fail(tw.tickets[i])
					if next != nil {
						keep(tw, *next, true)
					}
					return []any{next, errText(err)}
				})
			case 10:
				bothReturn("begin close", func(tw *twin) (any, error) { return tw.e.BeginClose(uri) })
			case 11:
				acked := rapid.Bool().Draw(rt, "acked")
				bothReturn("finish close", func(tw *twin) (any, error) { return tw.e.FinishClose(uri, acked) })
			case 12:
				bothReturn("lookup", func(tw *twin) (any, error) { return tw.e.Lookup(subject, uri) })
			case 13:
				bothReturn("subscription", func(tw *twin) (any, error) { return tw.e.Subscription(uri) })
			case 14:
				if rapid.IntRange(0, 4).Draw(rt, "revoke") == 0 {
					bothReturn("revoke", func(tw *twin) (any, error) { return tw.e.RevokeSubject(subject) })
				}
			case 15:
				both("record derived", func(tw *twin) []any {
					entry, err := tw.e.Lookup(subject, uri)
					if err != nil {
						return []any{errText(err)}
					}
					err = tw.e.RecordDerived(ledger.DerivedArtifact{Index: "idx", ArtifactID: "a", Version: entry.Version})
					return []any{errText(err)}
				})
			case 16:
				present := rapid.Bool().Draw(rt, "present")
				both("apply listing", func(tw *twin) []any {
					tk, ok, err := tw.e.ApplyListing(uri, present, clock.t)
					keep(tw, tk, ok)
					return []any{tk, ok, errText(err)}
				})
			case 17:
				both("corroborate", func(tw *twin) []any {
					tk, ok, err := tw.e.Corroborate(uri, mcpsync.AbsenceScan{Scans: []string{"a", "b"}, StartedAt: clock.t, EndedAt: clock.t})
					keep(tw, tk, ok)
					return []any{tk, ok, errText(err)}
				})
			case 18:
				clock.t = clock.t.Add(time.Second)
			case 19:
				both("acknowledge", func(tw *twin) []any {
					cursor, err := defaultCursor(tw.e)
					if err == nil {
						err = tw.e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, cursor+1)
					}
					return []any{errText(err)}
				})
			}
		}
		same("transitions", twins[0].transitions, twins[1].transitions)
		both("stale receipts", func(tw *twin) []any {
			return []any{tw.e.StaleReceipts(), tw.e.StaleCounts()}
		})
		both("ledger", func(tw *twin) []any {
			snap, err := ledger.Export(context.Background(), tw.e.Ledger())
			require.NoError(rt, err)
			return []any{snap}
		})
		bothReturn("outbox", func(tw *twin) (any, error) { return tw.e.PullOutbox(0, 0) })
	})
}

// TestHeldRecordsNeverChange holds what readers of the memory ledger are
// handed (records from Load, Range and Export, lookups, subscription rows)
// while another goroutine keeps writing the same record in place, and
// checks that none of it ever changes. Run with -race, a write to anything
// a reader holds is also a race report.
func TestHeldRecordsNeverChange(t *testing.T) {
	e := activeEngine(t, nil)
	l := e.Ledger()
	ctx := context.Background()
	acceptRead(t, e, ledger.TriggerInitial, "v0")

	type held struct {
		what  string
		value any
		form  string
	}
	encode := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b)
	}
	var kept []held
	hold := func(what string, v any) { kept = append(kept, held{what, v, encode(v)}) }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Two reads in flight and one settled at a time, so that the
			// record's tickets grow and shrink in place.
			a, err := e.IssueTicket(docURI, ledger.TriggerNotification)
			if err != nil {
				t.Error(err)
				return
			}
			b, err := e.IssueTicket(docURI, ledger.TriggerNotification)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := e.AcceptResourceVersion(b, text(docURI, fmt.Sprint("v", i))); err != nil {
				t.Error(err)
				return
			}
			_, _ = e.AcceptResourceVersion(a, text(docURI, "late")) // stale
			if i%16 == 0 {
				if _, _, err := e.Notify(docURI); err != nil {
					t.Error(err)
					return
				}
				if err := e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, 1<<62); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	for i := range 300 {
		r, err := l.Load(ctx, docURI)
		require.NoError(t, err)
		hold("load", r)
		entry, err := e.Lookup(alice, docURI)
		require.NoError(t, err)
		hold("lookup", entry)
		sub, err := e.Subscription(docURI)
		require.NoError(t, err)
		hold("subscription", sub)
		require.NoError(t, l.Range(ctx, func(_ string, r *ledger.Record) bool {
			hold("range", r)
			return true
		}))
		if i%10 == 0 {
			snap, err := l.Export(ctx)
			require.NoError(t, err)
			hold("export", snap)
		}
	}
	close(stop)
	wg.Wait()
	for _, h := range kept {
		require.Equal(t, h.form, encode(h.value), "a %s result changed after it was handed out", h.what)
	}
}

// TestFenceAllocations holds the memory ledger's fence to its budget: an
// issue and the accept of a changed version allocate nothing once warm
// (the outbox allocates a chunk per 256 entries, and nothing while its
// consumer keeps up), and a stale result allocates nothing.
func TestFenceAllocations(t *testing.T) {
	e := activeEngine(t, nil)
	results := []mcpsync.ReadResult{text(docURI, "version A"), text(docURI, "version B")}
	i := 0
	step := func() {
		tk, err := e.IssueTicket(docURI, ledger.TriggerNotification)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.AcceptResourceVersion(tk, results[i&1])
		if err != nil || !out.Changed() {
			t.Fatal("not accepted", err)
		}
		i++
		if i%256 == 0 {
			if err := e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, out.Version.OutboxSeq); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 1024 {
		step()
	}
	if n := testing.AllocsPerRun(2048, step); n > 0 {
		t.Errorf("issue and accept: %v allocations, want none", n)
	}
	old, err := e.IssueTicket(docURI, ledger.TriggerNotification)
	require.NoError(t, err)
	step()
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := e.AcceptResourceVersion(old, results[0]); err != mcpsync.ErrStaleOrdinal {
			t.Fatal("not stale", err)
		}
	}); n > 0 {
		t.Errorf("stale result: %v allocations, want none", n)
	}
}
