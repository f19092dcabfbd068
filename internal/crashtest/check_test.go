package crashtest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

const (
	docA, docB   = "file:///docs/a.md", "file:///docs/b.md"
	alice, carol = "user:alice", "user:carol"
)

// history builds a ledger as a worker leaves it: docA read twice by alice,
// docB read by carol, deleted and tombstoned, carol revoked. It returns the
// ledger and the lines the worker would have announced.
func history(t *testing.T) (ledger.Ledger, []string) {
	t.Helper()
	l := ledger.NewMemory(nil)
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{})
	require.NoError(t, err)
	lines := []string{fmt.Sprintf("session %d", e.SessionGeneration())}
	subscribe := func(uri, subject string) {
		_, err := e.Subscribe(uri, subject)
		require.NoError(t, err)
		_, err = e.Activate(uri, ledger.ModePush)
		require.NoError(t, err)
	}
	subscribe(docA, alice)
	subscribe(docB, carol)
	read := func(uri string, res mcpsync.ReadResult) {
		tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
		require.NoError(t, err)
		lines = append(lines, fmt.Sprintf("ticket %d", tk.RequestID))
		out, err := e.AcceptResourceVersion(tk, res)
		require.NoError(t, err)
		require.True(t, out.Accepted)
	}
	text := func(uri, body string) mcpsync.ReadResult {
		return mcpsync.NewReadResult([]mcpsync.Content{{URI: uri, MIMEType: "text/plain", Text: body}})
	}
	read(docA, text(docA, "a1"))
	read(docA, text(docA, "a2"))
	read(docB, text(docB, "b1"))
	read(docB, mcpsync.NotFoundResult())
	_, _, err = e.ApplyListing(docB, false, time.Now())
	require.NoError(t, err)
	_, err = e.RevokeSubject(carol)
	require.NoError(t, err)
	return l, append(lines, "revoked "+carol)
}

// edited is a ledger whose Export is changed by edit (when not nil), as a
// ledger that broke an invariant would export.
type edited struct {
	ledger.Ledger
	edit func(*ledger.Snapshot)
}

func (l edited) Export(ctx context.Context) (ledger.Snapshot, error) {
	snap, err := l.Ledger.Export(ctx)
	if err == nil && l.edit != nil {
		l.edit(&snap)
	}
	return snap, err
}

// record returns a copy of snap's record of key, put in snap in its place:
// records are shared with the ledger, and an edit changes only the copy.
func record(snap *ledger.Snapshot, key string) *ledger.Record {
	r := *snap.Records[key]
	if r.Current != nil {
		c := *r.Current
		r.Current = &c
	}
	if r.Sub != nil {
		s := *r.Sub
		r.Sub = &s
	}
	snap.Records[key] = &r
	return &r
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}

// Name is empty, so that a report says only what failed, not which case.
func (r *recorder) Name() string { return "" }

func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) FailNow() { runtime.Goexit() }

// failures runs f, as a test would, and returns what it reported.
func failures(t *testing.T, f func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return strings.Join(r.failures, "\n")
}

// The checker passes what a worker leaves behind, and fails every broken
// invariant: each case changes the ledger's export or the announcements the
// way a ledger or engine that broke it would.
func TestCheckerCatches(t *testing.T) {
	l, lines := history(t)
	require.Empty(t, failures(t, func(t testing.TB) {
		c := NewChecker([]string{docA, docB})
		c.Events(t, lines)
		c.Check(t, l)
		c.Check(t, l)
	}), "the ledger as the worker left it")

	aEntries := func(snap *ledger.Snapshot) []int {
		var out []int
		for i, en := range snap.Outbox {
			if en.URI == docA {
				out = append(out, i)
			}
		}
		return out
	}
	cases := []struct {
		name  string
		extra []string // announced after the history
		edit  func(*ledger.Snapshot)
		// before, when set, is what an earlier check saw.
		before func(*ledger.Snapshot)
		want   string
	}{
		{name: "an entry lost", edit: func(s *ledger.Snapshot) {
			s.Outbox = slices.Delete(s.Outbox, 1, 2)
		}, want: "no entry lost or numbered twice"},
		{name: "an entry numbered twice", edit: func(s *ledger.Snapshot) {
			s.Outbox[2].Seq = s.Outbox[1].Seq
		}, want: "no entry lost or numbered twice"},
		{name: "a version without its entry", edit: func(s *ledger.Snapshot) {
			i := aEntries(s)
			s.Outbox[i[len(i)-1]].Version = s.Outbox[i[0]].Version
		}, want: "the current version is the one the outbox announced last"},
		{name: "a version regressed", before: func(s *ledger.Snapshot) {
			r := record(s, docA)
			r.Current.Version.ReadOrdinal++
			i := aEntries(s)
			s.Outbox[i[len(i)-1]].Version = r.Current.Version
		}, want: "regressed from"},
		{name: "an ordinal reissued", before: func(s *ledger.Snapshot) {
			record(s, docA).LastIssued++
		}, want: "read ordinal reused"},
		{name: "a watermark lowered", before: func(s *ledger.Snapshot) {
			record(s, docA).Watermark++
		}, want: "watermark went back"},
		{name: "a subscription generation reused", before: func(s *ledger.Snapshot) {
			record(s, docA).Sub.Generation++
		}, want: "subscription generation reused"},
		{name: "a deletion tombstoned twice", edit: func(s *ledger.Snapshot) {
			for _, en := range s.Outbox {
				if en.URI == docB && en.Reason == ledger.InvalidateTombstoned {
					en.Seq = s.State.Last + 1
					s.Outbox = append(s.Outbox, en)
					s.State.Last++
					return
				}
			}
		}, want: "tombstoned by entries"},
		{name: "a revocation lost", edit: func(s *ledger.Snapshot) {
			s.Revoked = nil
		}, want: "revocation of " + carol + " lost"},
		{name: "a revoked subject's version served", edit: func(s *ledger.Snapshot) {
			record(s, docB).Current.Status = ledger.VersionServed
		}, want: "a revoked subject's version"},
		{name: "a sweep left unfinished", edit: func(s *ledger.Snapshot) {
			s.Revoked[0].Swept = false
		}, want: "sweep finished on open"},
		{name: "a ticket the counter never handed out", edit: func(s *ledger.Snapshot) {
			r := record(s, docA)
			r.Tickets = []ledger.Ticket{{RequestID: s.Counters[ledger.CounterRequest] + 1}}
		}, want: "a ticket the counter did not allocate"},
		{name: "a request id announced twice", extra: []string{lines[1]}, want: "handed out twice"},
		{name: "a session generation announced twice", extra: []string{lines[0]}, want: "session generation reused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := failures(t, func(t testing.TB) {
				c := NewChecker([]string{docA, docB})
				c.Events(t, lines)
				if tc.before != nil {
					c.Check(t, edited{l, tc.before})
				}
				c.Events(t, tc.extra)
				c.Check(t, edited{l, tc.edit})
			})
			assert.Contains(t, got, tc.want)
		})
	}
}

// A running worker may be sweeping a revocation as the ledger is exported:
// CheckRunning, unlike Check, lets an unfinished sweep pass.
func TestCheckRunningLetsASweepRun(t *testing.T) {
	l, lines := history(t)
	unswept := edited{l, func(s *ledger.Snapshot) { s.Revoked[0].Swept = false }}
	assert.Empty(t, failures(t, func(t testing.TB) {
		c := NewChecker([]string{docA, docB})
		c.Events(t, lines)
		c.CheckRunning(t, unswept)
	}))
}

// failures runs each check on a goroutine of its own: none outlives the
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
