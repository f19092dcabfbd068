package mcpsync

import (
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
			Engine: "old", Version: ResourceVersion{Digest: "old"}}, &SubscriptionInfo{URI: "file:///z", Subject: "z"})
		p.pack(&e, sub)
		got := p.unpack(e.Seq)
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
		p.pack(&e, sub)
		require.Nil(t, p.full, "%s entry kept whole", e.Reason)
		require.Equal(t, e, p.unpack(0))
	}
	// A version of the generation before the subscription's does not.
	e := OutboxEntry{Schema: SchemaInvalidation, URI: sub.URI, Reason: InvalidateUpdated, Subject: sub.Subject, Version: v(1, "b")}
	e.Previous = v(4, "a")
	e.Previous.SubscriptionGeneration = 6
	var p packedEntry
	p.pack(&e, sub)
	require.NotNil(t, p.full)
	require.Equal(t, e, p.unpack(0))
}
