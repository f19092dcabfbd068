package ledger

import (
	"slices"
	"time"
)

// outboxChunk is how many entries share one allocation. Entries are freed a
// whole chunk at a time, so discarding n entries costs n/outboxChunk steps
// and the memory of acknowledged entries is returned, not kept by a slice
// that never shrinks.
const outboxChunk = 256

// outboxSpares is how many released chunks the log keeps for reuse: a
// consumer that acknowledges up to outboxSpares*outboxChunk entries at a
// time costs no allocation per chunk, and at most that many entries' room
// stays allocated once a backlog is acknowledged.
const outboxSpares = 4

// outboxLog holds the memory ledger's retained entries, numbered
// consecutively from first to last: entry seq lives at
// chunks[0][off+seq-first], counting on. It keeps each in its packed form
// (packedEntry) and hands out OutboxEntry values.
//
// An entry is written once, when appended, and never changed while a view
// exists: a chunk is released whole, and cleared for reuse only when no
// view (a copy of the log an export reads without the lock while appends
// go on) can hold it.
type outboxLog struct {
	chunks [][]packedEntry // every chunk but the last is full
	off    int             // entries of chunks[0] already discarded
	first  uint64          // number of the oldest retained entry
	last   uint64          // number of the newest entry ever appended
	// views counts the views in use; while there are none, released
	// chunks are kept, up to outboxSpares, in spares for the next
	// appends, so a consumer keeping up costs no allocation per chunk.
	views  int
	spares [][]packedEntry
	// engines names, once each, the engines whose entries the log holds,
	// which a packed entry gives by index: a ledger is written by one
	// engine at a time, mostly, and by few in all. It grows until the log
	// holds no entry while it names more than one, and then starts anew.
	// named is its index.
	engines []string
	named   map[string]uint32
}

func (o *outboxLog) len() uint64 { return o.last + 1 - o.first }

// append adds e, numbered e.Seq (o.last+1 but for the first entry of a
// restore), packed against sub: the subscription of the record whose write
// appends it, or any other; nil when there is none.
func (o *outboxLog) append(e *OutboxEntry, sub *SubscriptionInfo) {
	n := len(o.chunks)
	if n == 0 || len(o.chunks[n-1]) == outboxChunk {
		var c []packedEntry
		if k := len(o.spares); k > 0 {
			c, o.spares[k-1] = o.spares[k-1], nil
			o.spares = o.spares[:k-1]
		} else {
			c = make([]packedEntry, 0, outboxChunk)
		}
		o.chunks = append(o.chunks, c)
		n++
	}
	c := o.chunks[n-1]
	c = c[:len(c)+1]
	o.chunks[n-1] = c
	c[len(c)-1].pack(e, sub, o.engine(e.Engine))
	o.last = e.Seq
}

// engine returns the index of name in o.engines, adding it if need be.
func (o *outboxLog) engine(name string) uint32 {
	if k := len(o.engines); k > 0 && o.engines[k-1] == name {
		return uint32(k - 1)
	}
	if i, ok := o.named[name]; ok {
		return i
	}
	if o.named == nil {
		o.named = make(map[string]uint32)
	}
	i := uint32(len(o.engines))
	o.engines = append(o.engines, name)
	o.named[name] = i
	return i
}

// at returns entry seq, which must be retained.
func (o *outboxLog) at(seq uint64) OutboxEntry {
	i := uint64(o.off) + seq - o.first
	return o.chunks[i/outboxChunk][i%outboxChunk].unpack(seq, o.engines)
}

// view returns a copy of the log that stays as it is while o goes on: it
// shares the chunks, whose entries never change, and copies only the list
// of them. The caller calls unview when done with it.
func (o *outboxLog) view() outboxLog {
	o.views++
	o.spares = nil
	v := *o
	v.chunks = slices.Clone(o.chunks)
	v.views, v.spares = 0, nil
	return v
}

func (o *outboxLog) unview() { o.views-- }

// entries returns every retained entry, in order.
func (o *outboxLog) entries() []OutboxEntry {
	out := make([]OutboxEntry, 0, o.len())
	for seq := o.first; seq <= o.last; seq++ {
		out = append(out, o.at(seq))
	}
	return out
}

// discardThrough drops every entry numbered up to seq, releasing each chunk
// whose entries are all dropped. It costs one step per chunk released, not
// per entry; the list of chunks is copied only when most of its room is
// unused, so a backlog once acknowledged does not keep its length.
func (o *outboxLog) discardThrough(seq uint64) {
	seq = min(seq, o.last)
	if seq < o.first {
		return
	}
	i := uint64(o.off) + seq - o.first + 1 // the new first entry, counted from chunks[0]
	whole := int(i / outboxChunk)
	for k := 0; k < whole && o.views == 0 && len(o.spares) < outboxSpares; k++ {
		// Not cleared: the appends that reuse it overwrite every field of
		// its entries (pack), which until then keep only what they point
		// to (subscriptions, digests, times' locations) reachable.
		o.spares = append(o.spares, o.chunks[k][:0])
	}
	clear(o.chunks[:whole])
	o.chunks = o.chunks[whole:]
	o.off = int(i % outboxChunk)
	o.first = seq + 1
	if c := cap(o.chunks); c > 64 && c > 4*len(o.chunks) {
		o.chunks = slices.Clone(o.chunks)
	}
	if o.len() == 0 && len(o.engines) > 1 {
		if o.views == 0 {
			o.engines = o.engines[:0]
			clear(o.named)
		} else {
			// A view reads the names it was made with.
			o.engines, o.named = nil, nil
		}
	}
}

// packedEntry is an outbox entry as the memory ledger keeps it, 192 bytes
// against an OutboxEntry's 448: what it shares with the subscription of the
// record it was written with (its URI and subject, and each version's URI,
// subject, server and, for the new version, generations) is read from that
// subscription, which the record holds anyway, instead of being copied into
// every entry; its number is its place in the log, and its engine an index
// in the log's names. The version it replaces keeps its own generations:
// after a resubscribe it is of the generation before. An entry of any other
// shape (an artifact, deletion evidence, a version of another URI, subject
// or server, a reason it has no code for) is kept whole in full instead, at
// the cost of an allocation.
type packedEntry struct {
	sub       *SubscriptionInfo
	full      *OutboxEntry // the entry itself when it does not pack; nil otherwise
	at        time.Time
	ver, prev packedVersion
	// prevSession and prevGeneration are Previous's generations.
	prevSession, prevGeneration uint64
	engine                      uint32 // index in outboxLog.engines
	reason                      uint8  // index in packedReasons
	has                         uint8  // hasVersion | hasPrevious
}

// What a packedEntry holds: which of its versions are set.
const (
	hasVersion = 1 << iota
	hasPrevious
)

// packedReasons are the reasons a packedEntry stores by index (pack
// numbers them); 0 stands for none (the entry is in full).
var packedReasons = [...]InvalidationReason{"", InvalidateUpdated, InvalidateTombstoned, InvalidateRevoked, InvalidateQuarantined, InvalidateForgotten}

// packedVersion is what a version of the subscription's generation holds of
// its own.
type packedVersion struct {
	digest, mimeType, lastModified string
	bytes                          int64
	readOrdinal                    uint64
}

// pack writes e into p, overwriting every field of p, packed against sub
// when e has its shape, whole otherwise; engine is e.Engine's index in the
// log's names. p.unpack(e.Seq, names) == *e either way.
func (p *packedEntry) pack(e *OutboxEntry, sub *SubscriptionInfo, engine uint32) {
	var reason uint8
	switch e.Reason {
	case InvalidateUpdated:
		reason = 1
	case InvalidateTombstoned:
		reason = 2
	case InvalidateRevoked:
		reason = 3
	case InvalidateQuarantined:
		reason = 4
	case InvalidateForgotten:
		reason = 5
	}
	var has uint8
	ok := reason != 0 && sub != nil && e.Schema == SchemaInvalidation && e.Artifact == nil && e.Evidence == nil &&
		e.URI == sub.URI && e.Subject == sub.Subject
	if ok {
		has, ok = packable(&e.Version, sub, hasVersion)
		ok = ok && (has == 0 || e.Version.SessionGeneration == sub.SessionGeneration && e.Version.SubscriptionGeneration == sub.Generation)
	}
	if ok {
		var h uint8
		h, ok = packable(&e.Previous, sub, hasPrevious)
		has |= h
	}
	if !ok {
		full := *e
		*p = packedEntry{full: &full}
		return
	}
	p.sub, p.full, p.at, p.engine, p.reason, p.has = sub, nil, e.At, engine, reason, has
	p.ver.set(&e.Version)
	p.prev.set(&e.Previous)
	p.prevSession, p.prevGeneration = e.Previous.SessionGeneration, e.Previous.SubscriptionGeneration
}

// packable reports whether v packs against sub, but for its generations,
// and with which flag: bit when it is set, none when it is the zero
// version.
func packable(v *ResourceVersion, sub *SubscriptionInfo, bit uint8) (uint8, bool) {
	if v.Schema == "" && *v == (ResourceVersion{}) {
		return 0, true
	}
	ok := v.Schema == SchemaResourceVersion && v.URI == sub.URI && v.Subject == sub.Subject && v.Server == sub.Server
	return bit, ok
}

func (p *packedVersion) set(v *ResourceVersion) {
	p.digest, p.mimeType, p.lastModified = v.Digest, v.MIMEType, v.LastModified
	p.bytes, p.readOrdinal = v.Bytes, v.ReadOrdinal
}

// unpack returns the entry p holds, numbered seq; engines are the log's
// names.
func (p *packedEntry) unpack(seq uint64, engines []string) OutboxEntry {
	if p.full != nil {
		e := *p.full
		e.Seq = seq
		return e
	}
	sub := p.sub
	e := OutboxEntry{
		Schema:  SchemaInvalidation,
		Seq:     seq,
		URI:     sub.URI,
		Reason:  packedReasons[p.reason],
		Subject: sub.Subject,
		At:      p.at,
		Engine:  engines[p.engine],
	}
	if p.has&hasVersion != 0 {
		e.Version = p.ver.version(sub, sub.SessionGeneration, sub.Generation)
	}
	if p.has&hasPrevious != 0 {
		e.Previous = p.prev.version(sub, p.prevSession, p.prevGeneration)
	}
	return e
}

func (p *packedVersion) version(sub *SubscriptionInfo, session, generation uint64) ResourceVersion {
	return ResourceVersion{
		Schema:                 SchemaResourceVersion,
		URI:                    sub.URI,
		MIMEType:               p.mimeType,
		Digest:                 p.digest,
		Bytes:                  p.bytes,
		ReadOrdinal:            p.readOrdinal,
		Subject:                sub.Subject,
		Server:                 sub.Server,
		SessionGeneration:      session,
		SubscriptionGeneration: generation,
		LastModified:           p.lastModified,
	}
}
