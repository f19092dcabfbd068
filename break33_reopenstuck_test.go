package mcpsync_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// A listen stream the server ends is re-established: each URI it carried
// has its generation closed and the next one opened (Client.reestablish,
// then Client.reopen); a listen acknowledgement that leaves out a URI the
// previous stream carried takes the same path (Client.handle's left list).
// When one ledger write of that close-and-open fails once (a ledger
// briefly unavailable), the promise is still that the URI comes back to an
// open subscription with current content once the fault clears, or at
// least that the failure is visible: "everything right is eventually
// accepted, or the failure is visible", "nothing is ever served stale
// without saying so", and no URI gets stuck.
//
// It is neither, whichever write fails: the one opening the next generation
// (left CLOSED), the one finishing the close (left UNSUBSCRIBING) or the
// activation (left SUBSCRIBING). reopen ignores the error settle returns,
// so nothing is told to OnError; the generation stays in that state in the
// current session while the caller still watches the URI; the watch's
// periodic revalidation asks the engine for a read, which it refuses, and
// the client's repair (request -> behind -> resubscribe) only covers a
// subscription left in an older session, not one of the current session
// that is not open. The server's newer content is never read, and Lookup
// goes on serving the old version with an empty Degraded, half an hour
// (six revalidation periods) later, with the ledger long healthy again and
// the connection UP. Fails on the current code.

// b33Ledger is a ledger that fails chosen writes: the next n
// CompareAndSwap calls whose record matches failCAS, and the next nNext
// counter reservations of failCounter.
type b33Ledger struct {
	mcpsync.Ledger
	mu          sync.Mutex
	failCAS     func(key string, next *mcpsync.Record) bool
	n           int
	failCounter mcpsync.Counter
	nNext       int
	failed      int
}

var errB33Ledger = errors.New("ledger unavailable")

func newB33Ledger() *b33Ledger { return &b33Ledger{Ledger: mcpsync.NewMemoryLedger(nil)} }

// armCAS makes the next n writes matching match fail.
func (l *b33Ledger) armCAS(n int, match func(key string, next *mcpsync.Record) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failCAS, l.n = match, n
}

// armNext makes the next n reservations of counter fail.
func (l *b33Ledger) armNext(n int, counter mcpsync.Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failCounter, l.nNext = counter, n
}

func (l *b33Ledger) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *b33Ledger) CompareAndSwap(ctx context.Context, key string, prev uint64, next *mcpsync.Record, entries []mcpsync.OutboxEntry) (uint64, bool, error) {
	l.mu.Lock()
	if l.n > 0 && l.failCAS != nil && l.failCAS(key, next) {
		l.n--
		l.failed++
		l.mu.Unlock()
		return 0, false, errB33Ledger
	}
	l.mu.Unlock()
	return l.Ledger.CompareAndSwap(ctx, key, prev, next, entries)
}

func (l *b33Ledger) Next(ctx context.Context, counter mcpsync.Counter, n uint64) (uint64, error) {
	l.mu.Lock()
	if l.nNext > 0 && counter == l.failCounter {
		l.nNext--
		l.failed++
		l.mu.Unlock()
		return 0, errB33Ledger
	}
	l.mu.Unlock()
	return l.Ledger.Next(ctx, counter, n)
}

// b33Errors collects what OnError is told.
type b33Errors struct {
	mu   sync.Mutex
	errs []error
}

func (e *b33Errors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

func (e *b33Errors) list() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// newB33Rig is newRig over an engine whose ledger is l, with OnError
// collected into errs.
func newB33Rig(t *testing.T, w wiring, l *b33Ledger, errs *b33Errors) *rig {
	t.Helper()
	eng, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
	require.NoError(t, err)
	return newRig(t, w, &mcpsync.ClientOptions{Engine: eng, OnError: errs.add})
}

// b33Drain empties the rig's outcome channel, so that its deliveries never
// block.
func b33Drain(r *rig) {
	for {
		select {
		case <-r.outcomes:
		default:
			return
		}
	}
}

// b33OpeningWrite matches the write that opens a generation after the
// first: the record goes to SUBSCRIBING with a new generation number.
func b33OpeningWrite(_ string, next *mcpsync.Record) bool {
	return next.State == mcpsync.StateSubscribing && next.Sub != nil && next.Sub.Generation >= 2
}

// b33Told checks that the failure was visible when it happened: OnError
// was told a *ReopenError naming uri, and Lookup says the copy is degraded.
func b33Told(t *testing.T, c *mcpsync.Client, errs *b33Errors, uri string) {
	t.Helper()
	told := false
	for _, err := range errs.list() {
		var re *mcpsync.ReopenError
		told = told || errors.As(err, &re) && re.URI == uri
	}
	require.True(t, told, "OnError was told no *ReopenError for %s: %v", uri, errs.list())
	entry, err := c.Lookup(uri)
	require.NoError(t, err)
	require.NotEmpty(t, entry.Degraded, "Lookup serves the copy of a URI no subscription keeps fresh without saying so")
}

// b33Healed checks, after the fault cleared and the URI was given time to
// heal, that it came back: an open subscription of the client's session,
// the server's current content served, and nothing degraded. It fails with
// what a caller sees otherwise.
func b33Healed(t *testing.T, c *mcpsync.Client, uri, want string) {
	t.Helper()
	sub, err := c.Engine().Subscription(uri)
	require.NoError(t, err)
	entry, lerr := c.Lookup(uri)
	served := ""
	if lerr == nil && len(entry.Contents) > 0 {
		served = entry.Contents[0].Text
	}
	healed := served == want && entry.Degraded == "" && sub.SessionGeneration == c.Health().SessionGeneration &&
		(sub.State == mcpsync.StateActive || sub.State == mcpsync.StateVersionAccepted)
	if !healed {
		t.Fatalf("the watched URI never came back: subscription %s (session %d, generation %d; client session %d), "+
			"Lookup serves %q (server has %q) with Degraded %q (error %v), health %s",
			sub.State, sub.SessionGeneration, sub.SubscriptionGeneration, c.Health().SessionGeneration,
			served, want, entry.Degraded, lerr, c.Health().State)
	}
}

// b33Matchers are the writes of a reopen that can fail, by the state the
// record goes to.
var b33Matchers = []struct {
	name  string
	match func(string, *mcpsync.Record) bool
}{
	{"open-next-generation", b33OpeningWrite},
	{"finish-close", func(_ string, next *mcpsync.Record) bool {
		return next.State == mcpsync.StateClosed
	}},
	{"activate-next-generation", func(_ string, next *mcpsync.Record) bool {
		return next.State == mcpsync.StateActive && next.Sub != nil && next.Sub.Generation >= 2
	}},
}

// b33Wait gives the client six revalidation periods (5 min + 20% jitter
// each) to catch up, draining outcomes as they come.
func b33Wait(r *rig) {
	for range 6 {
		time.Sleep(6 * time.Minute)
		quiesce()
		b33Drain(r)
	}
}

func TestBreak33ReestablishWriteFailsLeavesURIStuckSilently(t *testing.T) {
	for _, m := range b33Matchers {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newB33Ledger()
				var errs b33Errors
				r := newB33Rig(t, eras[1], l, &errs)
				r.subscribe()

				l.armCAS(1, m.match) // one write of the reopen fails, once
				r.faults().EndListenStreams()
				time.Sleep(2 * time.Second) // the client's backoff before reopening
				quiesce()
				require.Equal(t, 1, l.failures(), "the write was refused")
				b33Told(t, r.c, &errs, faultURI)

				// The ledger is healthy again; the server's content moves on.
				r.srv.Set(faultURI, "text/markdown", "v2")
				b33Wait(r)
				b33Healed(t, r.c, faultURI, "v2")
			})
		})
	}
}

func TestBreak33LeftOutOfAckWriteFailsLeavesURIStuckSilently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const x, y = "file:///b33/x.md", "file:///b33/y.md"
		srv := mcpsynctest.NewServer(nil)
		srv.Set(x, "text/markdown", "v1")
		srv.Set(y, "text/markdown", "v1")
		l := newB33Ledger()
		eng, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: l})
		require.NoError(t, err)
		var errs b33Errors
		var drop atomic.Pointer[string]
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return break22PartialAck{srv.NewInProcessTransport(), &drop}, nil
		}, &mcpsync.ClientOptions{Engine: eng, Subject: alice, ProtocolVersion: "2026-07-28", Seed: 1, OnError: errs.add})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		sx, err := c.Subscribe(t.Context(), x)
		require.NoError(t, err)
		require.Equal(t, mcpsync.ModePush, sx.Mode)
		quiesce()

		// The server leaves x out of the acknowledgement of the stream
		// that adds y; the client reopens x, and the write opening its next
		// generation fails, once.
		l.armCAS(1, func(key string, next *mcpsync.Record) bool { return key == x && b33OpeningWrite(key, next) })
		xs := x
		drop.Store(&xs)
		_, err = c.Subscribe(t.Context(), y)
		require.NoError(t, err)
		quiesce()
		require.Equal(t, 1, l.failures(), "x's reopen was refused by the ledger")
		b33Told(t, c, &errs, x)

		// The ledger and the server are healthy again; x's content moves on.
		drop.Store(nil)
		srv.Set(x, "text/markdown", "v2")
		for range 6 {
			time.Sleep(6 * time.Minute)
			quiesce()
		}

		b33Healed(t, c, x, "v2")
	})
}
