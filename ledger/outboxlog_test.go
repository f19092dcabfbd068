package ledger

import (
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestPackedEntryRoundTrip: whatever entry the memory ledger's log keeps,
// and whatever subscription it packs it against, it hands the entry back
// as it was given, field for field, numbered by its place.
func TestPackedEntryRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Each field of an entry and of its versions is the subscription's
		// own most of the time, and otherwise another: so entries pack
		// often, and often fail to by one field alone.
		sub := &SubscriptionInfo{
			URI:               "file:///a",
			Subject:           "alice",
			Server:            Implementation{Name: "s", Version: "1"},
			SessionGeneration: 3,
			Generation:        7,
		}
		same := func(label string) bool { return rapid.IntRange(0, 7).Draw(t, label) != 0 }
		str := func(label, own, other string) string {
			if same(label) {
				return own
			}
			return other
		}
		num := func(label string, own uint64) uint64 {
			if same(label) {
				return own
			}
			return own + 1
		}
		version := func(label string) ResourceVersion {
			if rapid.IntRange(0, 3).Draw(t, label+".zero") == 0 {
				return ResourceVersion{}
			}
			return ResourceVersion{
				Schema:                 str(label+".schema", SchemaResourceVersion, "resourceVersion.v0"),
				URI:                    str(label+".uri", sub.URI, "file:///b"),
				MIMEType:               rapid.SampledFrom([]string{"", "text/plain"}).Draw(t, label+".mime"),
				Digest:                 rapid.SampledFrom([]string{"", "sha256:00", "sha256:ff"}).Draw(t, label+".digest"),
				Bytes:                  rapid.Int64Range(-1, 3).Draw(t, label+".bytes"),
				ReadOrdinal:            rapid.Uint64Range(0, 2).Draw(t, label+".ordinal"),
				Subject:                str(label+".subject", sub.Subject, ""),
				Server:                 Implementation{Name: str(label+".server", sub.Server.Name, "t"), Version: str(label+".serverVersion", "1", "2")},
				SessionGeneration:      num(label+".session", sub.SessionGeneration),
				SubscriptionGeneration: num(label+".generation", sub.Generation),
				LastModified:           rapid.SampledFrom([]string{"", "2026-01-01T00:00:00Z"}).Draw(t, label+".modified"),
			}
		}
		e := OutboxEntry{
			Schema:   str("schema", SchemaInvalidation, "invalidation.v0"),
			Seq:      rapid.Uint64Range(1, 1<<40).Draw(t, "seq"),
			URI:      str("uri", sub.URI, "file:///b"),
			Reason:   InvalidationReason(rapid.SampledFrom([]string{"updated", "tombstoned", "revoked", "quarantined", "forgotten", "moved", ""}).Draw(t, "reason")),
			Version:  version("version"),
			Previous: version("previous"),
			Subject:  str("subject", sub.Subject, "bob"),
			At:       time.Unix(rapid.Int64Range(0, 2).Draw(t, "at"), 0),
			Engine:   rapid.SampledFrom([]string{"", "e1"}).Draw(t, "engine"),
		}
		if rapid.IntRange(0, 7).Draw(t, "artifact") == 0 {
			e.Artifact = &DerivedArtifact{Index: "i", ArtifactID: "x", Version: e.Previous}
		}
		if rapid.IntRange(0, 7).Draw(t, "evidence") == 0 {
			e.Evidence = &DeletionEvidence{}
		}
		if rapid.Bool().Draw(t, "monotonic") {
			e.At = time.Now() // a clock reading keeps its monotonic part
		}
		if rapid.IntRange(0, 7).Draw(t, "nosub") == 0 {
			sub = nil
		}
		var p packedEntry
		// A reused chunk's entry holds whatever was there before.
		p.pack(&OutboxEntry{Schema: SchemaInvalidation, URI: "file:///z", Reason: InvalidateUpdated, Subject: "z",
			Engine: "old", Version: ResourceVersion{Digest: "old"}}, &SubscriptionInfo{URI: "file:///z", Subject: "z"}, 1)
		var log outboxLog
		p.pack(&e, sub, log.engine(e.Engine))
		got := p.unpack(e.Seq, log.engines)
		require.Equal(t, e, got)
		require.True(t, e.At.Equal(got.At) && e.At == got.At, "time kept exactly")
	})
}

// TestPackedEntryShape: the entries of a subscription's own versions pack,
// and into at most 200 bytes.
func TestPackedEntryShape(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(packedEntry{}), uintptr(200))
	sub := &SubscriptionInfo{URI: "file:///a", Subject: "alice", Server: Implementation{Name: "s"}, SessionGeneration: 3, Generation: 7}
	v := func(ordinal uint64, digest string) ResourceVersion {
		return ResourceVersion{Schema: SchemaResourceVersion, URI: sub.URI, Digest: digest, ReadOrdinal: ordinal, Subject: sub.Subject,
			Server: sub.Server, SessionGeneration: 3, SubscriptionGeneration: 7}
	}
	for _, e := range []OutboxEntry{
		{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateUpdated, Subject: sub.Subject, Version: v(2, "b"), Previous: v(1, "a")},
		{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateUpdated, Subject: sub.Subject, Version: v(1, "a")},
		{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateQuarantined, Subject: sub.Subject, Version: v(2, "b"), Previous: v(1, "a")},
		{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateRevoked, Subject: sub.Subject, Previous: v(1, "a")},
	} {
		var p packedEntry
		p.pack(&e, sub, 0)
		require.Nil(t, p.full, "%s entry kept whole", e.Reason)
		require.Equal(t, e, p.unpack(0, []string{""}))
	}
	// The version a resubscribe's first update replaces is of the
	// generation before: it packs too.
	e := OutboxEntry{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateUpdated, Subject: sub.Subject, Version: v(1, "b")}
	e.Previous = v(4, "a")
	e.Previous.SessionGeneration, e.Previous.SubscriptionGeneration = 2, 6
	var p packedEntry
	p.pack(&e, sub, 0)
	require.Nil(t, p.full)
	require.Equal(t, e, p.unpack(0, []string{""}))
	// A new version of another generation does not.
	e.Version.SubscriptionGeneration = 6
	p.pack(&e, sub, 0)
	require.NotNil(t, p.full)
	require.Equal(t, e, p.unpack(0, []string{""}))
}

// TestOutboxLogModel holds the log to a plain slice of entries through
// appends from several engines, discards that release and reuse chunks
// and start its names anew, and views taken before either: every entry
// read back, from the log or from a view, is the one appended.
func TestOutboxLogModel(t *testing.T) {
	// 200 checks, whatever RAPID_CHECKS asks of the model tests; the rest
	// return at once, but for a failure, which rapid then shrinks.
	ran, failed := 0, false
	rapid.Check(t, func(t *rapid.T) {
		if ran >= 200 && !failed {
			return
		}
		ran++
		defer func() {
			if t.Failed() {
				failed = true
			}
		}()
		subs := []*SubscriptionInfo{
			{URI: "file:///a", Subject: "alice", SessionGeneration: 1, Generation: 1},
			{URI: "file:///b", Subject: "bob", SessionGeneration: 2, Generation: 5},
		}
		log := outboxLog{first: 1}
		model := []OutboxEntry{} // model[i] is entry log.first+i
		type view struct {
			log  outboxLog
			want []OutboxEntry
		}
		var views []view
		for step := range rapid.IntRange(1, 30).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1:
				seq := log.first - 1 + rapid.Uint64Range(0, uint64(len(model))).Draw(t, "through")
				before := log.first
				log.discardThrough(seq)
				model = model[log.first-before:]
			case 2:
				if rapid.Bool().Draw(t, "unview") && len(views) > 0 {
					v := views[0]
					require.Equal(t, v.want, v.log.entries(), "view of step %d", step)
					views = views[1:]
					log.unview()
				} else {
					views = append(views, view{log.view(), slices.Clone(model)})
				}
			default:
				for range rapid.IntRange(1, 120).Draw(t, "appends") {
					sub := subs[rapid.IntRange(0, 1).Draw(t, "sub")]
					e := OutboxEntry{
						Schema: SchemaInvalidation, Seq: log.last + 1, URI: sub.URI, Reason: InvalidateUpdated, Subject: sub.Subject,
						Engine: rapid.SampledFrom([]string{"e1", "e2", "e3"}).Draw(t, "engine"),
						At:     time.Unix(int64(log.last), 0),
						Version: ResourceVersion{Schema: SchemaResourceVersion, URI: sub.URI, Subject: sub.Subject,
							Digest: fmt.Sprint(log.last), SessionGeneration: sub.SessionGeneration, SubscriptionGeneration: sub.Generation},
					}
					if rapid.IntRange(0, 4).Draw(t, "whole") == 0 {
						e.Evidence = &DeletionEvidence{SnapshotID: fmt.Sprint(log.last)}
					}
					log.append(&e, sub)
					model = append(model, e)
				}
			}
			require.Equal(t, uint64(len(model)), log.len())
			require.Equal(t, model, log.entries(), "after step %d", step)
		}
		for _, v := range views {
			require.Equal(t, v.want, v.log.entries())
		}
	})
}

// TestRestoredOutboxOwnsItsEntries: a restored ledger's outbox says what
// the snapshot said, whatever the caller does with the snapshot's records
// afterwards.
func TestRestoredOutboxOwnsItsEntries(t *testing.T) {
	ctx := t.Context()
	l := NewMemory(nil)
	const key = "file:///a"
	_, err := l.Next(ctx, CounterSession, 1)
	require.NoError(t, err)
	sub := &SubscriptionInfo{URI: key, Subject: "alice", Server: Implementation{Name: "s"}, SessionGeneration: 1, Generation: 1}
	v := ResourceVersion{Schema: SchemaResourceVersion, URI: key, Subject: "alice", Server: sub.Server, SessionGeneration: 1, SubscriptionGeneration: 1, ReadOrdinal: 1}
	_, ok, err := l.CompareAndSwap(ctx, key, 0, &Record{Revision: 1, State: StateActive, Sub: sub, LastIssued: 1, Watermark: 1},
		[]OutboxEntry{{Schema: SchemaInvalidation, URI: key, Reason: InvalidateUpdated, Version: v, Subject: "alice"}})
	require.NoError(t, err)
	require.True(t, ok)
	snap, err := Export(ctx, l)
	require.NoError(t, err)
	want := slices.Clone(snap.Outbox)
	require.Len(t, want, 1)

	restored := NewMemory(nil)
	require.NoError(t, restored.Restore(ctx, snap))
	changed := *snap.Records[key].Sub
	changed.Subject, changed.Generation = "mallory", 99
	*snap.Records[key].Sub = changed // the caller's own records, changed after Restore
	got, err := restored.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
}
