package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// smallChunks makes Range and Export read a few keys at a time, so that
// small ledgers cross many chunk boundaries.
func smallChunks(t *testing.T, n int) {
	old := ledgerChunk
	ledgerChunk = n
	t.Cleanup(func() { ledgerChunk = old })
}

// walk is what the indexes must say, read the slow way: every record.
func walk(t *rapid.T, l Ledger) (bySubject map[string][]string, unknown []string, keys []string) {
	bySubject = map[string][]string{}
	require.NoError(t, l.Range(context.Background(), func(key string, r *Record) bool {
		keys = append(keys, key)
		if r.State == StateUnsubscribeUnknown {
			unknown = append(unknown, key)
		}
		seen := map[string]bool{}
		if c := r.Current; c != nil && c.Status != VersionRevoked {
			seen[c.Version.Subject] = true
		}
		for _, a := range r.Artifacts {
			seen[a.Version.Subject] = true
		}
		for s := range seen {
			bySubject[s] = append(bySubject[s], key)
		}
		return true
	}))
	return bySubject, unknown, keys
}

// TestLedgerIndexesMatchAFullWalk writes random records and revocations to
// a memory ledger and checks, after every step, that its indexes (the keys
// a revocation sweeps, the unknown closes a new session ends, the subjects
// revoked since a generation) and its chunked Range say what a walk of
// every record says, also on a ledger restored from its export.
func TestLedgerIndexesMatchAFullWalk(t *testing.T) {
	smallChunks(t, 3)
	ctx := context.Background()
	subjects := []string{"user:a", "user:b", "user:c"}
	states := []SubscriptionState{StateActive, StateUnsubscribeUnknown, StateClosed, StateTombstonePending}
	statuses := []VersionStatus{VersionServed, VersionRevoked, VersionQuarantined}
	rapid.Check(t, func(rt *rapid.T) {
		l := NewMemory(nil).(*memoryLedger)
		_, err := l.Next(ctx, CounterSession, 1)
		require.NoError(rt, err)
		var joined []string
		check := func(l *memoryLedger) {
			bySubject, unknown, keys := walk(rt, l)
			require.True(rt, slices.IsSorted(keys), "Range is in key order: %v", keys)
			require.Equal(rt, len(l.records), len(keys), "Range visits every key once")
			for _, s := range append(subjects, "user:none") {
				got, err := l.SubjectKeys(ctx, s)
				require.NoError(rt, err)
				require.Equal(rt, bySubject[s], nilIfEmpty(got), "keys of %s", s)
			}
			got, recs, err := l.UnknownCloses(ctx)
			require.NoError(rt, err)
			require.Equal(rt, unknown, nilIfEmpty(got), "unknown closes")
			for i, k := range got {
				require.Same(rt, l.records[k], recs[i])
			}
			for g := 0; g <= len(joined); g++ {
				after, gen, err := l.RevokedAfter(ctx, uint64(g))
				require.NoError(rt, err)
				require.Equal(rt, uint64(len(joined)), gen)
				require.Equal(rt, joined[g:], after, "revoked after %d", g)
			}
		}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			if rapid.IntRange(0, 9).Draw(rt, "revoke") == 0 {
				s := rapid.SampledFrom(append(subjects, "user:d")).Draw(rt, "subject")
				if !slices.Contains(joined, s) {
					joined = append(joined, s)
				}
				require.NoError(rt, l.Revoke(ctx, RevokedSubject{Schema: SchemaRevokedSubject, Subject: s}))
				check(l)
				continue
			}
			key := fmt.Sprintf("file:///k/%02d", rapid.IntRange(0, 12).Draw(rt, "key"))
			cur := l.records[key]
			next := &Record{Revision: cur.revision() + 1, State: rapid.SampledFrom(states).Draw(rt, "state")}
			if next.State == StateUnsubscribeUnknown {
				next.Sub = &SubscriptionInfo{SessionGeneration: 1}
			}
			if rapid.Bool().Draw(rt, "current") {
				next.Current = &StoredVersion{
					Version: ResourceVersion{Subject: rapid.SampledFrom(subjects).Draw(rt, "reader")},
					Status:  rapid.SampledFrom(statuses).Draw(rt, "status"),
				}
			}
			switch {
			case cur != nil && rapid.Bool().Draw(rt, "keep artifacts"):
				next.Artifacts = cur.Artifacts // a write that leaves them alone shares them
			default:
				for i := range rapid.IntRange(0, 3).Draw(rt, "artifacts") {
					next.Artifacts = append(next.Artifacts, DerivedArtifact{
						ArtifactID: fmt.Sprint(i),
						Version:    ResourceVersion{Subject: rapid.SampledFrom(subjects).Draw(rt, "deriver")},
					})
				}
			}
			_, ok, err := l.CompareAndSwap(ctx, key, cur.revision(), next, nil)
			require.NoError(rt, err)
			require.True(rt, ok)
			check(l)
		}
		snap, err := l.Export(ctx)
		require.NoError(rt, err)
		restored := NewMemory(nil).(*memoryLedger)
		require.NoError(rt, restored.Restore(ctx, snap))
		joined = slices.Sorted(slices.Values(joined)) // Restore reads them in subject order
		check(restored)
	})
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestKeyIndexKeepsKeysInOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var x keyIndex
		var want []string
		for _, n := range rapid.SliceOf(rapid.IntRange(0, 5000)).Draw(rt, "keys") {
			k := fmt.Sprintf("k%05d", n)
			if _, found := slices.BinarySearch(want, k); found {
				continue
			}
			x.add(k)
			want = append(want, k)
			slices.Sort(want)
		}
		require.Equal(rt, nilIfEmpty(want), nilIfEmpty(x.after(nil, "", false, len(want)+1)))
		max := rapid.IntRange(1, 700).Draw(rt, "max")
		var got []string
		for from, last := false, ""; ; from = true {
			chunk := x.after(nil, last, from, max)
			got = append(got, chunk...)
			if len(chunk) < max {
				break
			}
			last = chunk[len(chunk)-1]
		}
		require.Equal(rt, nilIfEmpty(want), nilIfEmpty(got))
		k := fmt.Sprintf("k%05d", rapid.IntRange(0, 5000).Draw(rt, "from"))
		i, found := slices.BinarySearch(want, k)
		if found {
			i++
		}
		require.Equal(rt, nilIfEmpty(want[i:min(len(want), i+max)]), nilIfEmpty(x.after(nil, k, true, max)))
		for _, b := range x.blocks {
			require.NotEmpty(rt, b)
			require.LessOrEqual(rt, len(b), keyBlock)
		}
	})
}

// TestExportIsOneInstantAcrossChunks exports, many keys at a time, a ledger
// being written round after round (each round writes every key once, in
// order, with one outbox entry per write, and most of each round is
// acknowledged). A snapshot of one instant has every key at the same round
// or, a round under way, a prefix of the keys one round ahead, as many
// entries numbered as the records' revisions, and every retained entry
// whole although the chunks it was read from were released meanwhile.
func TestExportIsOneInstantAcrossChunks(t *testing.T) {
	smallChunks(t, 4)
	ctx := context.Background()
	l := NewMemory(&Options{OutboxRetention: 1 << 20})
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("file:///k/%03d", i)
	}
	const rounds = 40
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for rev := uint64(1); rev <= rounds; rev++ {
			for _, k := range keys {
				r := &Record{Revision: rev, LastAcceptedDigest: fmt.Sprintf("%s@%d", k, rev)}
				_, ok, err := l.CompareAndSwap(ctx, k, rev-1, r, []OutboxEntry{{Schema: SchemaInvalidation, URI: k}})
				if err != nil || !ok {
					t.Error("write failed", err)
					return
				}
			}
			// Most of each round is acknowledged, so chunks are released
			// (and reused) while exports read them.
			if err := l.Ack(ctx, DefaultConsumer, (rev-1)*uint64(len(keys))+7); err != nil {
				t.Error("ack failed", err)
				return
			}
		}
	})
	check := func() {
		snap, err := l.Export(ctx)
		require.NoError(t, err)
		var total, prev uint64
		for i, k := range keys {
			r := snap.Records[k]
			rev := r.revision()
			if i > 0 {
				require.True(t, rev == prev || rev+1 == prev, "%s at %d after a key at %d: torn", k, rev, prev)
			}
			if r != nil {
				require.Equal(t, fmt.Sprintf("%s@%d", k, rev), r.LastAcceptedDigest)
			}
			prev, total = rev, total+rev
		}
		require.Equal(t, total, snap.State.Last, "every entry belongs to a record in the snapshot")
		require.Len(t, snap.Outbox, int(snap.State.Last+1-snap.State.First))
		for i, e := range snap.Outbox {
			require.Equal(t, snap.State.First+uint64(i), e.Seq)
			require.Equal(t, keys[(e.Seq-1)%uint64(len(keys))], e.URI, "entry %d is whole", e.Seq)
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	wg.Wait()
	l.(*memoryLedger).mu.Lock()
	defer l.(*memoryLedger).mu.Unlock()
	require.Empty(t, l.(*memoryLedger).exports, "every export let go of its view")
}

// TestAcknowledgedBacklogIsReleased appends a backlog, acknowledges it in
// steps and checks that what stays allocated is what is retained, and that
// a view taken before the acknowledgements still reads every entry.
func TestAcknowledgedBacklogIsReleased(t *testing.T) {
	ctx := context.Background()
	l := NewMemory(&Options{OutboxRetention: 1 << 20}).(*memoryLedger)
	const backlog = 100_000
	for i := range backlog {
		k := fmt.Sprintf("file:///k/%d", i%7)
		cur := l.records[k]
		_, ok, err := l.CompareAndSwap(ctx, k, cur.revision(), &Record{Revision: cur.revision() + 1}, []OutboxEntry{{Schema: SchemaInvalidation, URI: k}})
		require.NoError(t, err)
		require.True(t, ok)
	}
	view := l.out.view()
	for seq := uint64(0); seq < backlog-10; seq += 997 {
		require.NoError(t, l.Ack(ctx, DefaultConsumer, seq))
	}
	require.NoError(t, l.Ack(ctx, DefaultConsumer, backlog-10))
	require.Equal(t, uint64(10), l.out.len())
	require.LessOrEqual(t, cap(l.out.chunks), 64, "the list of chunks shrank with the backlog")
	entries, err := l.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 10)
	require.Equal(t, uint64(backlog-9), entries[0].Seq)
	all := view.entries()
	require.Len(t, all, backlog)
	for i, e := range all {
		require.Equal(t, uint64(i+1), e.Seq)
	}
}
