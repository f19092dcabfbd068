package pgledger

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// indexedRecord is a record whose current version is current's (none when
// ""), with status, and which holds an artifact of each of artifacts.
func indexedRecord(rev uint64, state ledger.SubscriptionState, current string, status ledger.VersionStatus, artifacts ...string) *ledger.Record {
	r := &ledger.Record{Revision: rev, State: state}
	if current != "" {
		r.Current = &ledger.StoredVersion{Version: ledger.ResourceVersion{Schema: ledger.SchemaResourceVersion, Subject: current}, Status: status}
	}
	for _, s := range artifacts {
		r.Artifacts = append(r.Artifacts, ledger.DerivedArtifact{Index: "vectors", ArtifactID: s, Version: ledger.ResourceVersion{Subject: s}})
	}
	return r
}

// Both statements that write records, one key's (compare_and_swap) and
// many keys' (compare_and_swap_all), file each record under every subject
// it holds, take it out of those it no longer holds, and keep each key's
// subjects apart from the others' of one statement.
func TestIndexWrites(t *testing.T) {
	ctx := context.Background()
	type write struct {
		key  string
		prev int64
		r    *ledger.Record
	}
	var l *Ledger
	swapOf := func(w write) swap {
		b, err := ledger.EncodeRecord(w.r)
		require.NoError(t, err)
		return swap{key: w.key, prev: w.prev, record: b, index: entryOf(w.r)}
	}
	paths := map[string]func(ws ...write){
		"alone": func(ws ...write) {
			for _, w := range ws {
				got, err := l.swapOne(ctx, swapOf(w))
				require.NoError(t, err)
				require.True(t, got.stored, w.key)
			}
		},
		"together": func(ws ...write) {
			var swaps []swap
			for _, w := range ws {
				swaps = append(swaps, swapOf(w))
			}
			got, err := l.swapAll(ctx, swaps)
			require.NoError(t, err)
			for i, g := range got {
				require.True(t, g.stored, ws[i].key)
			}
		},
	}
	for name, do := range paths {
		t.Run(name, func(t *testing.T) {
			conn, schema := pgtest.Schema(t)
			var err error
			l, err = Open(ctx, conn, &Options{Schema: schema})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			a, b := "file:///a", "file:///b"
			requireIndex := func(unknown []string, bySubject map[string][]string) {
				t.Helper()
				for _, s := range []string{"user:alice", "user:bob", "user:carol", "user:dave"} {
					keys, err := l.SubjectKeys(ctx, s)
					require.NoError(t, err)
					var want []string
					for _, k := range bySubject[s] {
						want = append(want, "file:///"+k)
					}
					require.Equal(t, want, keys, s)
				}
				keys, _, err := l.UnknownCloses(ctx)
				require.NoError(t, err)
				var want []string
				for _, k := range unknown {
					want = append(want, "file:///"+k)
				}
				require.Equal(t, want, keys, "unknown closes")
			}
			do(write{b, 0, indexedRecord(1, ledger.StateActive, "user:dave", ledger.VersionServed, "user:carol")},
				write{a, 0, indexedRecord(1, ledger.StateActive, "user:alice", ledger.VersionServed, "user:bob", "user:carol", "user:bob")})
			requireIndex(nil, map[string][]string{"user:alice": {"a"}, "user:bob": {"a"}, "user:carol": {"a", "b"}, "user:dave": {"b"}})

			do(write{a, 1, indexedRecord(2, ledger.StateUnsubscribeUnknown, "user:alice", ledger.VersionRevoked, "user:bob")},
				write{b, 1, indexedRecord(2, ledger.StateUnsubscribeUnknown, "user:dave", ledger.VersionServed)})
			requireIndex([]string{"a", "b"}, map[string][]string{"user:bob": {"a"}, "user:dave": {"b"}})

			do(write{a, 2, indexedRecord(3, ledger.StateClosed, "", "")},
				write{b, 2, indexedRecord(3, ledger.StateUnsubscribeUnknown, "user:dave", ledger.VersionServed, "user:alice")})
			requireIndex([]string{"b"}, map[string][]string{"user:alice": {"b"}, "user:dave": {"b"}})
		})
	}
}
