package mcpsync_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// watermarks is the baseline the fence is measured against: the least a
// client can do to keep reads ordered, a mutex-guarded map of per-URI
// ordinals and watermarks with no receipts, versions or outbox.
type watermarks struct {
	mu     sync.Mutex // protects issued and marks
	issued map[string]uint64
	marks  map[string]uint64
}

func (w *watermarks) issue(key string) uint64 {
	w.mu.Lock()
	w.issued[key]++
	n := w.issued[key]
	w.mu.Unlock()
	return n
}

func (w *watermarks) accept(key string, ord uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ord <= w.marks[key] {
		return false
	}
	w.marks[key] = ord
	return true
}

func newWatermarks() *watermarks {
	return &watermarks{issued: map[string]uint64{}, marks: map[string]uint64{}}
}

// BenchmarkFence compares the fence's accept and stale paths with the bare
// watermark map, each beside its baseline. The accept path is measured with
// the ticket it needs (issue+accept, against issue+raise): a ticket can be
// accepted once. Every accept changes the digest, so each writes a version
// and an outbox entry. Read results are prepared once (NewReadResult digests
// the contents); BenchmarkDigest measures that step on its own.
func BenchmarkFence(b *testing.B) {
	results := []mcpsync.ReadResult{text(docURI, "version A"), text(docURI, "version B")}

	b.Run("baseline=issue+raise", func(b *testing.B) {
		w := newWatermarks()
		b.ReportAllocs()
		for b.Loop() {
			w.accept(docURI, w.issue(docURI))
		}
	})
	b.Run("issue+accept", func(b *testing.B) {
		e := activeEngine(b, nil)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			tk, _ := e.IssueTicket(docURI, ledger.TriggerNotification)
			out, err := e.AcceptResourceVersion(tk, results[i&1])
			if err != nil || out.Version.OutboxSeq == 0 {
				b.Fatal("not accepted", err)
			}
			i++
			if i%1024 == 0 {
				_ = e.Acknowledge(context.Background(), mcpsync.DefaultConsumer, out.Version.OutboxSeq)
			}
		}
	})
	b.Run("baseline=refuse", func(b *testing.B) {
		w := newWatermarks()
		w.accept(docURI, 2)
		b.ReportAllocs()
		for b.Loop() {
			if w.accept(docURI, 1) {
				b.Fatal("accepted")
			}
		}
	})
	b.Run("stale", func(b *testing.B) {
		e := activeEngine(b, nil)
		old, _ := e.IssueTicket(docURI, ledger.TriggerNotification)
		fresh, _ := e.IssueTicket(docURI, ledger.TriggerNotification)
		if _, err := e.AcceptResourceVersion(fresh, results[0]); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.AcceptResourceVersion(old, results[1]); err != mcpsync.ErrStaleOrdinal {
				b.Fatal("not stale", err)
			}
		}
	})
}

// BenchmarkDigest measures preparing a read result: URI normalization and
// SHA-256 over the canonical form.
func BenchmarkDigest(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		body := strings.Repeat("x", size)
		contents := []mcpsync.Content{{URI: docURI, MIMEType: "text/plain", Text: body}}
		b.Run(byteSize(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				_ = mcpsync.NewReadResult(contents)
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return "1KiB"
}

// BenchmarkNotificationStorm sends 10 notifications to each of 10,000 URIs
// and completes reads until the engine is quiescent, beside a baseline that
// reads once per notification through the same fence. reads/URI is what
// coalescing saves; the pulses all arrive before the reads go out, as in a
// burst.
func BenchmarkNotificationStorm(b *testing.B) {
	const uris, pulses = 10000, 10
	keys := make([]string, uris)
	results := make([]mcpsync.ReadResult, uris)
	for i := range keys {
		keys[i] = fmt.Sprintf("file:///storm/%05d.md", i)
		results[i] = text(keys[i], "body")
	}
	setup := func(b *testing.B, opts *mcpsync.EngineOptions) *mcpsync.Engine {
		e := newEngine(b, opts)
		for _, k := range keys {
			if _, err := e.Subscribe(k, alice); err != nil {
				b.Fatal(err)
			}
			if _, err := e.Activate(k, ledger.ModePush); err != nil {
				b.Fatal(err)
			}
		}
		return e
	}
	b.Run("baseline=read-per-notification", func(b *testing.B) {
		e := setup(b, nil)
		reads := 0
		for b.Loop() {
			for i, k := range keys {
				for range pulses {
					t, err := e.IssueTicket(k, ledger.TriggerNotification)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := e.AcceptResourceVersion(t, results[i]); err != nil {
						b.Fatal(err)
					}
					reads++
				}
			}
		}
		b.ReportMetric(float64(reads)/float64(b.N)/uris, "reads/URI")
	})
	byURI := make(map[string]mcpsync.ReadResult, uris)
	for i, k := range keys {
		byURI[k] = results[i]
	}
	b.Run("coalesced", func(b *testing.B) {
		e := setup(b, &mcpsync.EngineOptions{ConfirmSends: true})
		reads := 0
		for b.Loop() {
			var pending []ledger.Ticket
			for _, k := range keys {
				for range pulses {
					t, ok, err := e.Notify(k)
					if err != nil {
						b.Fatal(err)
					}
					if ok {
						pending = append(pending, t)
					}
				}
			}
			for len(pending) > 0 {
				t := pending[len(pending)-1]
				pending = pending[:len(pending)-1]
				e.Sending(t)
				out, err := e.FinishRead(t, byURI[t.URI])
				reads++
				if err != nil {
					b.Fatal(err)
				}
				if out.FollowUp != nil {
					pending = append(pending, *out.FollowUp)
				}
			}
		}
		b.ReportMetric(float64(reads)/float64(b.N)/uris, "reads/URI")
	})
}

// BenchmarkRecordDerived records the 4,000 chunks of one document: one call
// per chunk (each rewrites the URI's list of artifacts, O(n) per chunk)
// beside one call for them all (one write, O(1) per chunk). ns/op is per
// document.
func BenchmarkRecordDerived(b *testing.B) {
	const chunks = 4000
	for _, batch := range []bool{false, true} {
		name := "call-per-chunk"
		if batch {
			name = "one-call"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				e := activeEngine(b, nil)
				out, err := e.AcceptResourceVersion(issue(b, e, ledger.TriggerInitial), text(docURI, "v1"))
				if err != nil {
					b.Fatal(err)
				}
				all := make([]ledger.DerivedArtifact, chunks)
				for i := range all {
					all[i] = ledger.DerivedArtifact{Index: "vectors", ArtifactID: fmt.Sprintf("chunk-%d", i), Version: out.Version.Version}
				}
				b.StartTimer()
				if batch {
					err = e.RecordDerived(all...)
				} else {
					for _, a := range all {
						if err = e.RecordDerived(a); err != nil {
							break
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
