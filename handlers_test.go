package mcpsync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// call is one call a handler was told, with the texts of its entries.
type call struct {
	kind     string // "add", "update" or "delete"
	uri      string
	old, new string // the texts of the entries: old for delete, new for add
	refusal  mcpsync.LookupRefusal
	evidence *ledger.DeletionEvidence
}

func (c call) String() string {
	return fmt.Sprintf("%s %s %q->%q %s", c.kind, c.uri, c.old, c.new, c.refusal)
}

// handlerLog is a ResourceHandler that records every call.
type handlerLog struct {
	mu    sync.Mutex // protects calls and panic
	calls []call
	// panicOn, if set, makes OnAdd of that text panic once.
	panicOn string
	// gate, if set, keeps every OnUpdate until it is closed: a slow
	// handler.
	gate chan struct{}
}

func textOfEntry(e mcpsync.Entry) string {
	if len(e.Contents) == 0 {
		return ""
	}
	return e.Contents[0].Text
}

func (h *handlerLog) OnAdd(e mcpsync.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.panicOn != "" && textOfEntry(e) == h.panicOn {
		h.panicOn = ""
		panic("handler failed on " + textOfEntry(e))
	}
	h.calls = append(h.calls, call{kind: "add", uri: e.Version.URI, new: textOfEntry(e)})
}

func (h *handlerLog) OnUpdate(old, new mcpsync.Entry) {
	if h.gate != nil {
		<-h.gate
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{kind: "update", uri: new.Version.URI, old: textOfEntry(old), new: textOfEntry(new)})
}

func (h *handlerLog) OnDelete(last mcpsync.Entry, d mcpsync.Deletion) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{kind: "delete", uri: last.Version.URI, old: textOfEntry(last), refusal: d.Refusal, evidence: d.Evidence})
}

// take returns the calls recorded since the last take.
func (h *handlerLog) take() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

// adds returns the add calls of uris with the server's first text.
func adds(uris ...string) []call {
	var out []call
	for _, u := range uris {
		out = append(out, call{kind: "add", uri: u, new: "v1"})
	}
	return out
}

// The initial versions are told as added, once, before WaitForSync
// returns; revalidations, notifications of unchanged content and a
// reconnect tell nothing after that; new content is an update with the old
// and the new entry.
func TestHandlerToldInitialVersionsOnceBeforeWaitForSync(t *testing.T) {
	eachEra(t, func(t *testing.T, w wiring) {
		h := &handlerLog{}
		docs := []string{"file:///docs/a.md", "file:///docs/b.md"}
		r := buildRig(t, w, rigConfig{uris: docs, opts: mcpsync.ClientOptions{Handler: h, RevalidateEvery: time.Minute}})
		_, err := r.c.SubscribeAll(t.Context(), append([]string{faultURI}, docs...))
		require.NoError(t, err)
		require.NoError(t, r.c.WaitForSync(t.Context()))
		assert.ElementsMatch(t, adds(faultURI, docs[0], docs[1]), h.take(), "told before WaitForSync returned")

		minutes(5)                                // revalidations
		r.srv.Set(docs[0], "text/markdown", "v1") // a notification, same content
		quiesce()
		require.NoError(t, r.c.Reconnect(t.Context()))
		require.NoError(t, r.c.WaitForSync(t.Context()))
		minutes(2)
		assert.Empty(t, h.take(), "nothing new was told after WaitForSync")

		r.srv.Set(docs[1], "text/markdown", "v2")
		quiesce()
		assert.Equal(t, []call{{kind: "update", uri: docs[1], old: "v1", new: "v2"}}, h.take())
	})
}

// Updates of one URI are told in order: each old entry is the new entry of
// the call before, and the last call ends at the server's last content.
func TestHandlerToldUpdatesInOrderPerURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &handlerLog{}
		r := newRig(t, eras[0], &mcpsync.ClientOptions{Handler: h})
		r.subscribe()
		require.NoError(t, r.c.WaitForSync(t.Context()))
		for i := 2; i <= 20; i++ {
			r.srv.Set(faultURI, "text/markdown", fmt.Sprintf("v%d", i))
			if i%3 == 0 {
				quiesce()
			}
		}
		quiesce()
		calls := h.take()
		require.Equal(t, adds(faultURI), calls[:1])
		last := "v1"
		for _, c := range calls[1:] {
			require.Equal(t, "update", c.kind, "%v", calls)
			require.Equal(t, last, c.old, "out of order: %v", calls)
			require.NotEqual(t, c.old, c.new)
			last = c.new
		}
		assert.Equal(t, "v20", last)
	})
}

// The handler mirrors Lookup: what it no longer serves is told deleted,
// with the refusal that says why, and a confirmed deletion with its
// evidence; what it serves again is told added.
func TestHandlerToldDeletionsWithWhy(t *testing.T) {
	t.Run("quarantined, back, not found", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := &handlerLog{}
			e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Guard: func(_ string, contents []mcpsync.Content) error {
				if strings.Contains(contents[0].Text, "poison") {
					return errors.New("poisoned")
				}
				return nil
			}})
			require.NoError(t, err)
			r := newRig(t, eras[0], &mcpsync.ClientOptions{Engine: e, Handler: h})
			r.subscribe()
			require.NoError(t, r.c.WaitForSync(t.Context()))
			require.Equal(t, adds(faultURI), h.take())

			r.srv.Set(faultURI, "text/markdown", "poison")
			quiesce()
			assert.Equal(t, []call{{kind: "delete", uri: faultURI, old: "v1", refusal: mcpsync.LookupQuarantined}}, h.take())
			r.srv.Set(faultURI, "text/markdown", "v3")
			quiesce()
			assert.Equal(t, []call{{kind: "add", uri: faultURI, new: "v3"}}, h.take())
			r.srv.Delete(faultURI)
			quiesce()
			assert.Equal(t, []call{{kind: "delete", uri: faultURI, old: "v3", refusal: mcpsync.LookupTombstonePending}}, h.take())
		})
	})
	t.Run("revoked, forgotten", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := &handlerLog{}
			r := buildRig(t, eras[0], rigConfig{uris: []string{"file:///docs/a.md"}, opts: mcpsync.ClientOptions{Handler: h}})
			_, err := r.c.SubscribeAll(t.Context(), []string{faultURI, "file:///docs/a.md"})
			require.NoError(t, err)
			require.NoError(t, r.c.WaitForSync(t.Context()))
			require.ElementsMatch(t, adds(faultURI, "file:///docs/a.md"), h.take())

			require.NoError(t, r.c.Forget(t.Context(), "file:///docs/a.md"))
			quiesce()
			assert.Equal(t, []call{{kind: "delete", uri: "file:///docs/a.md", old: "v1", refusal: mcpsync.LookupNoVersion}}, h.take())
			_, err = r.c.Engine().RevokeSubject(alice)
			require.NoError(t, err)
			quiesce()
			assert.Equal(t, []call{{kind: "delete", uri: faultURI, old: "v1", refusal: mcpsync.LookupRevoked}}, h.take())
		})
	})
	t.Run("confirmed with evidence", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := &handlerLog{}
			r := newHandledKeptRig(t, eras[0], h, "file:///kb/a.md", "file:///kb/b.md")
			r.keep(t, true)
			require.NoError(t, r.c.WaitForSync(t.Context()))
			require.ElementsMatch(t, []call{
				{kind: "add", uri: "file:///kb/a.md", new: "v1 of file:///kb/a.md"},
				{kind: "add", uri: "file:///kb/b.md", new: "v1 of file:///kb/b.md"},
			}, h.take())

			// Deleted: the not-found read makes the deletion pending, and
			// the kept scan confirms it.
			r.srv.Delete("file:///kb/b.md")
			time.Sleep(5 * keptReview)
			quiesce()
			_, err := r.c.Lookup("file:///kb/b.md")
			require.ErrorIs(t, err, mcpsync.ErrTombstoned)
			assert.Equal(t, []call{{kind: "delete", uri: "file:///kb/b.md", old: "v1 of file:///kb/b.md", refusal: mcpsync.LookupTombstonePending}}, h.take(),
				"told once, when Lookup stopped serving it")

			// A handler busy while a deletion is found and confirmed is
			// told once, with the evidence.
			h.gate = make(chan struct{})
			r.srv.Set("file:///kb/a.md", "text/plain", "v2")
			quiesce()
			r.srv.Delete("file:///kb/a.md")
			time.Sleep(5 * keptReview)
			quiesce()
			_, err = r.c.Lookup("file:///kb/a.md")
			require.ErrorIs(t, err, mcpsync.ErrTombstoned)
			close(h.gate)
			quiesce()
			calls := h.take()
			require.Len(t, calls, 2, "%v", calls)
			assert.Equal(t, call{kind: "update", uri: "file:///kb/a.md", old: "v1 of file:///kb/a.md", new: "v2"}, calls[0])
			d := calls[1]
			assert.Equal(t, "delete", d.kind)
			assert.Equal(t, "v2", d.old)
			assert.Equal(t, mcpsync.LookupTombstoned, d.refusal)
			require.NotNil(t, d.evidence, "a confirmed deletion told without its evidence")
			assert.Equal(t, ledger.EvidenceCorroborated, d.evidence.Kind)
		})
	})
}

// A Client connected to an engine that serves versions already tells them
// as added, once, before WaitForSync returns, though no read changes them.
func TestHandlerToldWhatTheEngineServesOnConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := mcpsync.NewEngine(nil)
		require.NoError(t, err)
		first := newRig(t, eras[0], &mcpsync.ClientOptions{Engine: e})
		first.subscribe()
		require.NoError(t, first.c.Close())

		h := &handlerLog{}
		r := newRig(t, eras[0], &mcpsync.ClientOptions{Engine: e, Handler: h})
		require.NoError(t, r.c.WaitForSync(t.Context()))
		assert.Equal(t, adds(faultURI), h.take())
		minutes(2)
		assert.Empty(t, h.take())
	})
}

// A Close while the handler's first sweep still lists what the engine
// serves ends the sweep quietly: the client is going away, which is no
// failure to tell OnError of.
func TestCloseDuringTheHandlersFirstSweepTellsOnErrorNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &listingLedger{Ledger: ledger.NewMemory(nil), listing: make(chan struct{})}
		e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
		require.NoError(t, err)
		r := buildRig(t, eras[0], rigConfig{opts: mcpsync.ClientOptions{Engine: e, Handler: &handlerLog{}}})
		<-l.listing
		require.NoError(t, r.c.Close())
		assert.Empty(t, r.errs.list(), "OnError told of the Close")
	})
}

// listingLedger is a ledger with an index whose listing of a subject's
// keys lasts until its context ends.
type listingLedger struct {
	ledger.Ledger
	listing chan struct{} // closed once a listing began
	once    sync.Once
}

func (l *listingLedger) SubjectKeys(ctx context.Context, _ string) ([]string, error) {
	l.once.Do(func() { close(l.listing) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func (l *listingLedger) UnknownCloses(ctx context.Context) ([]string, []*ledger.Record, error) {
	return l.Ledger.(ledger.Index).UnknownCloses(ctx)
}

func (l *listingLedger) RevokedAfter(ctx context.Context, gen uint64) ([]string, uint64, error) {
	return l.Ledger.(ledger.Index).RevokedAfter(ctx, gen)
}

// A handler that panics is reported to OnError, and the next changes are
// still told.
func TestPanickingHandlerIsReportedAndTheNextChangesAreTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &handlerLog{panicOn: "v1"}
		r := newRig(t, eras[0], &mcpsync.ClientOptions{Handler: h})
		r.subscribe()
		require.NoError(t, r.c.WaitForSync(t.Context()))
		quiesce()
		assert.Empty(t, h.take())
		require.Len(t, r.errs.list(), 1, "the panic was not reported")
		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		assert.Equal(t, []call{{kind: "update", uri: faultURI, old: "v1", new: "v2"}}, h.take())
	})
}

// versionLog is a ResourceHandler that records the version of every entry
// it is told, and whose OnUpdate of gateURI waits for gate: a handler busy
// on another URI.
type versionLog struct {
	mu      sync.Mutex // protects told and wrong
	told    map[string]mcpsync.ResourceVersion
	wrong   []string
	gateURI string
	gate    chan struct{}
}

func (h *versionLog) OnAdd(e mcpsync.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.told[e.Version.URI] = e.Version
}

func (h *versionLog) OnUpdate(old, new mcpsync.Entry) {
	if new.Version.URI == h.gateURI && h.gate != nil {
		<-h.gate
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if last := h.told[new.Version.URI]; old.Version != last {
		h.wrong = append(h.wrong, fmt.Sprintf("%s: old is ordinal %d of generation %d, last told ordinal %d of generation %d",
			new.Version.URI, old.Version.ReadOrdinal, old.Version.SubscriptionGeneration, last.ReadOrdinal, last.SubscriptionGeneration))
	}
	h.told[new.Version.URI] = new.Version
}

func (h *versionLog) OnDelete(last mcpsync.Entry, _ mcpsync.Deletion) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.told, last.Version.URI)
}

// OnUpdate's old entry is the entry last told, version and all, so that a
// consumer can find what it derived from it. It fails while a version of
// the same content that replaced the told one unseen (a Forget and a new
// subscription whose marks were delivered together while the handler was
// busy) becomes "last told" without a call, and the next update names as
// old a version the handler was never told of.
func TestHandlerUpdateOldIsTheEntryLastTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const other = "file:///docs/other.md"
		h := &versionLog{told: map[string]mcpsync.ResourceVersion{}, gateURI: other}
		r := buildRig(t, eras[0], rigConfig{uris: []string{other}, opts: mcpsync.ClientOptions{Handler: h}})
		_, err := r.c.SubscribeAll(t.Context(), []string{faultURI, other})
		require.NoError(t, err)
		require.NoError(t, r.c.WaitForSync(t.Context()))

		h.gate = make(chan struct{})
		r.srv.Set(other, "text/markdown", "v2") // the handler is busy with it
		quiesce()
		require.NoError(t, r.c.Forget(t.Context(), faultURI))
		r.watch(faultURI) // the same content, a new version
		quiesce()
		close(h.gate)
		quiesce()

		r.srv.Set(faultURI, "text/markdown", "v2")
		quiesce()
		h.mu.Lock()
		defer h.mu.Unlock()
		assert.Empty(t, h.wrong)
		entry, err := r.c.Lookup(faultURI)
		require.NoError(t, err)
		assert.Equal(t, entry.Version, h.told[faultURI], "the handler holds what Lookup serves")
	})
}
