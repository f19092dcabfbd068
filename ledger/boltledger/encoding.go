package boltledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/mcpsync/mcpsync/internal/jsontext"
	"github.com/mcpsync/mcpsync/ledger"
)

// The stored form of records and outbox entries.
//
// A record is stored as its revision (8 bytes, big-endian) and a body, an
// outbox entry as a body alone. A body that begins with '{' is the JSON of
// ledger.EncodeRecord or EncodeOutboxEntry, which files of the schemas
// before this one hold and which is read still; one that begins with
// formatBinary is the binary form below, which every write stores. Any
// other first byte is ErrLedgerCorrupt.
//
// The binary form is the JSON form's fields in the order Go declares them,
// without names: an unsigned integer as a uvarint, a signed one as a
// varint, a bool as one byte (0 or 1), a string or a byte slice as its
// length (uvarint) and its bytes, a pointer as a byte saying whether it is
// set and then what it points to, a slice as its length and its items (a
// slice JSON stores as null when nil as its length plus one, 0 for nil). It
// reads back exactly what the JSON form reads back, so that a record is
// the same whichever form it was last written in: each string as JSON
// stores it (jsontext.AsStored: invalid UTF-8 as U+FFFD), each time as
// RFC 3339 gives it back (appendTime), a slice JSON leaves out when empty
// as nil. A record's body leaves out its revision, which the prefix holds;
// an outbox entry's begins with its number (8 bytes, big-endian), written
// in the transaction that numbers it.
//
// The JSON of records and outbox entries was about an eighth of the CPU of
// a notification storm on this ledger read by 64 workers
// (BenchmarkNotificationStorm), and the entries' JSON was encoded in the
// committer's transaction, the one serial step of every group commit.

// formatBinary is the first byte of a body of the binary form.
const formatBinary = 1

// entrySeqAt is where an outbox entry's number sits in its binary body.
const entrySeqAt, entrySeqEnd = 1, 9

var errTruncated = errors.New("truncated")

// encodeRecord returns the stored form of r: its revision and its body.
func encodeRecord(r *ledger.Record) ([]byte, error) {
	e := encoder{b: make([]byte, 0, recordSize(r))}
	e.b = binary.BigEndian.AppendUint64(e.b, r.Revision)
	e.b = append(e.b, formatBinary)
	e.record(r)
	if e.err != nil {
		return nil, e.err
	}
	return e.b, nil
}

// decodeRecord reads encodeRecord's form, or the JSON one before it.
func decodeRecord(v []byte) (*ledger.Record, error) {
	if len(v) < 9 {
		return nil, fmt.Errorf("%w: record of %d bytes", ledger.ErrLedgerCorrupt, len(v))
	}
	switch v[8] {
	case '{':
		return ledger.DecodeRecord(v[8:])
	case formatBinary:
	default:
		return nil, fmt.Errorf("%w: record of unknown format %#x", ledger.ErrLedgerCorrupt, v[8])
	}
	d := decoder{b: v[9:]}
	r := d.record()
	r.Revision = binary.BigEndian.Uint64(v)
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("%w: record: %w", ledger.ErrLedgerCorrupt, err)
	}
	return r, nil
}

// encodeEntry returns the stored form of e; numberEntry writes its number.
func encodeEntry(e ledger.OutboxEntry) ([]byte, error) {
	enc := encoder{b: make([]byte, 0, 384)}
	enc.b = append(enc.b, formatBinary)
	enc.b = binary.BigEndian.AppendUint64(enc.b, e.Seq)
	enc.str(e.Schema)
	enc.str(e.URI)
	enc.str(string(e.Reason))
	enc.version(&e.Version)
	enc.version(&e.Previous)
	enc.str(e.Subject)
	if enc.present(e.Artifact != nil) {
		enc.artifact(e.Artifact)
	}
	if enc.present(e.Evidence != nil) {
		enc.str(string(e.Evidence.Kind))
		enc.str(e.Evidence.SnapshotID)
		enc.strings(e.Evidence.Scans, false)
		enc.uint(uint64(len(e.Evidence.Reads)))
		for _, r := range e.Evidence.Reads {
			enc.uint(r)
		}
	}
	enc.time(e.At)
	enc.str(e.Engine)
	if enc.err != nil {
		return nil, enc.err
	}
	return enc.b, nil
}

// numberEntry writes seq as the number of b, encodeEntry's form.
func numberEntry(b []byte, seq uint64) {
	binary.BigEndian.PutUint64(b[entrySeqAt:entrySeqEnd], seq)
}

// decodeEntry reads encodeEntry's form, or the JSON one before it.
func decodeEntry(v []byte) (ledger.OutboxEntry, error) {
	if len(v) > 0 && v[0] == '{' {
		return ledger.DecodeOutboxEntry(v)
	}
	if len(v) < entrySeqEnd || v[0] != formatBinary {
		return ledger.OutboxEntry{}, fmt.Errorf("%w: outbox entry of %d bytes, not of a known format", ledger.ErrLedgerCorrupt, len(v))
	}
	d := decoder{b: v[entrySeqEnd:]}
	e := ledger.OutboxEntry{Seq: binary.BigEndian.Uint64(v[entrySeqAt:entrySeqEnd])}
	e.Schema = d.str()
	e.URI = d.str()
	e.Reason = ledger.InvalidationReason(d.str())
	d.version(&e.Version)
	d.version(&e.Previous)
	e.Subject = d.str()
	if d.present() {
		e.Artifact = new(ledger.DerivedArtifact)
		d.artifact(e.Artifact)
	}
	if d.present() {
		ev := &ledger.DeletionEvidence{Kind: ledger.EvidenceKind(d.str()), SnapshotID: d.str()}
		ev.Scans = d.strings(false)
		if n := d.count(1); n > 0 {
			ev.Reads = make([]uint64, n)
			for i := range ev.Reads {
				ev.Reads[i] = d.uint()
			}
		}
		e.Evidence = ev
	}
	e.At = d.time()
	e.Engine = d.str()
	if err := d.end(); err != nil {
		return ledger.OutboxEntry{}, fmt.Errorf("%w: outbox entry: %w", ledger.ErrLedgerCorrupt, err)
	}
	if e.Schema != ledger.SchemaInvalidation {
		return ledger.OutboxEntry{}, fmt.Errorf("%w: outbox entry schema %q, want %q", ledger.ErrLedgerSchema, e.Schema, ledger.SchemaInvalidation)
	}
	return e, nil
}

// recordSize is about the size of r's stored form: its contents, and room
// for the rest.
func recordSize(r *ledger.Record) int {
	n := 512 + 96*len(r.Tickets) + 256*len(r.Artifacts)
	if r.Current != nil {
		for _, c := range r.Current.Contents {
			n += 32 + len(c.URI) + len(c.MIMEType) + len(c.Text) + len(c.Data)
		}
	}
	return n
}

type encoder struct {
	b   []byte
	err error // the first time JSON could not store either
}

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// present writes whether a pointer is set, and returns it.
func (e *encoder) present(set bool) bool {
	e.bool(set)
	return set
}

func (e *encoder) str(s string) {
	s = jsontext.AsStored(s)
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// strings writes ss; null says JSON stores a nil ss as null (no omitempty).
func (e *encoder) strings(ss []string, null bool) {
	switch {
	case null && ss == nil:
		e.uint(0)
	case null:
		e.uint(uint64(len(ss)) + 1)
	default:
		e.uint(uint64(len(ss)))
	}
	for _, s := range ss {
		e.str(s)
	}
}

// Time tags: how appendTime stored a time.
const (
	timeUTC    = 0 // offset 0: seconds and nanoseconds since 1970, UTC
	timeOffset = 1 // the same, and a zone offset of whole minutes
	timeText   = 2 // any other: its JSON
)

// time writes t so that it reads back as the RFC 3339 of its JSON does: in
// UTC when its offset is 0, in Local when Local has its offset at that
// instant, otherwise in an unnamed zone of its offset. A time JSON cannot
// store (a year beyond 9999) is an error here too, and one whose offset is
// not whole minutes is stored as its JSON.
func (e *encoder) time(t time.Time) {
	_, offset := t.Zone()
	if y := t.Year(); y < 0 || y > 9999 || offset%60 != 0 || offset <= -24*3600 || offset >= 24*3600 {
		js, err := t.MarshalJSON()
		if err != nil && e.err == nil {
			e.err = err
		}
		e.b = append(e.b, timeText)
		e.uint(uint64(len(js)))
		e.b = append(e.b, js...)
		return
	}
	if offset == 0 {
		e.b = append(e.b, timeUTC)
	} else {
		e.b = append(e.b, timeOffset)
	}
	e.int(t.Unix())
	e.uint(uint64(t.Nanosecond()))
	if offset != 0 {
		e.int(int64(offset / 60))
	}
}

// timeOrZero writes t of a field JSON leaves out when t.IsZero (omitzero):
// the zero instant, in whatever zone, reads back as the zero Time.
func (e *encoder) timeOrZero(t time.Time) {
	if t.IsZero() {
		t = time.Time{}
	}
	e.time(t)
}

func (e *encoder) impl(i ledger.Implementation) {
	e.str(i.Name)
	e.str(i.Version)
}

func (e *encoder) record(r *ledger.Record) {
	if e.present(r.Sub != nil) {
		e.sub(r.Sub)
	}
	e.str(string(r.State))
	e.uint(r.LastNotificationSeq)
	e.str(r.LastAcceptedDigest)
	e.uint(r.LastIssued)
	e.uint(r.Watermark)
	e.uint(r.CloseOrdinal)
	e.uint(r.CloseEpoch)
	e.uint(r.ClosedGeneration)
	e.timeOrZero(r.ValidatedAt)
	e.timeOrZero(r.NotFoundAt)
	e.timeOrZero(r.TombstonedAt)
	e.uint(r.NotFoundOrdinal)
	if c := r.Corroboration; e.present(c != nil) {
		e.uint(c.SubscriptionGeneration)
		e.uint(c.FirstRead)
		e.strings(c.Scans, true)
		e.time(c.ScanStartedAt)
		e.time(c.ScanEndedAt)
		e.uint(c.After)
	}
	if u := r.Unlisted; e.present(u != nil) {
		for _, s := range []*ledger.UnlistedScan{&u.First, &u.Last} {
			e.strings(s.Scans, true)
			e.time(s.StartedAt)
			e.time(s.EndedAt)
		}
		e.bool(u.Tombstoned)
	}
	e.uint(uint64(len(r.Tickets)))
	for i := range r.Tickets {
		t := &r.Tickets[i]
		e.str(t.Engine)
		e.str(t.URI)
		e.uint(t.SessionGeneration)
		e.uint(t.SubscriptionGeneration)
		e.uint(t.ReadOrdinal)
		e.uint(t.RequestID)
		e.str(string(t.Trigger))
		e.str(t.Subject)
		e.time(t.IssuedAt)
	}
	if c := r.Current; e.present(c != nil) {
		e.version(&c.Version)
		e.uint(uint64(len(c.Contents)))
		for i := range c.Contents {
			ct := &c.Contents[i]
			e.str(ct.URI)
			e.str(ct.MIMEType)
			e.str(ct.Text)
			e.uint(uint64(len(ct.Data)))
			e.b = append(e.b, ct.Data...)
			e.bool(ct.Binary)
		}
		e.str(string(c.Status))
	}
	e.uint(uint64(len(r.Artifacts)))
	for i := range r.Artifacts {
		e.artifact(&r.Artifacts[i])
	}
}

func (e *encoder) sub(s *ledger.SubscriptionInfo) {
	e.str(s.URI)
	e.str(s.RawURI)
	e.str(s.Subject)
	e.impl(s.Server)
	e.uint(s.SessionGeneration)
	e.str(s.SessionID)
	if c := s.Capabilities; e.present(c != nil) {
		e.str(c.Schema)
		e.str(c.ProtocolVersion)
		e.impl(c.Server)
		e.str(c.ServerID)
		e.bool(c.Resources)
		e.bool(c.Subscribe)
		e.bool(c.ListChanged)
		e.bool(c.SnapshotList)
		e.uint(c.SessionGeneration)
		e.time(c.ReceivedAt)
		e.str(c.Engine)
	}
	e.uint(s.Generation)
	e.str(string(s.Mode))
	e.str(s.ModeReason)
	e.int(int64(s.StalenessBound))
	e.time(s.StartedAt)
	e.timeOrZero(s.EndedAt)
}

func (e *encoder) version(v *ledger.ResourceVersion) {
	e.str(v.Schema)
	e.str(v.URI)
	e.str(v.MIMEType)
	e.str(v.Digest)
	e.int(v.Bytes)
	e.uint(v.ReadOrdinal)
	e.str(v.Subject)
	e.impl(v.Server)
	e.uint(v.SessionGeneration)
	e.uint(v.SubscriptionGeneration)
	e.str(v.LastModified)
}

func (e *encoder) artifact(a *ledger.DerivedArtifact) {
	e.str(a.Schema)
	e.str(a.Index)
	e.str(a.ArtifactID)
	e.version(&a.Version)
	e.time(a.RecordedAt)
}

// decoder reads the binary form. Its first error sticks: every read after
// it returns a zero value, and end returns it.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

// end returns the first error, or one for bytes left over.
func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		return fmt.Errorf("%d bytes past the end", len(d.b))
	}
	return d.err
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail(errTruncated)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(errors.New("a bool neither 0 nor 1"))
	return false
}

func (d *decoder) present() bool { return d.bool() }

// raw returns the next n bytes, n read first.
func (d *decoder) raw() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail(errTruncated)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

// str reads a string; one the encoder could not have written (not UTF-8)
// is corrupt.
func (d *decoder) str() string {
	p := d.raw()
	if !utf8.Valid(p) {
		d.fail(errors.New("a string that is not UTF-8"))
		return ""
	}
	return string(p)
}

// Fewest bytes an item of a slice takes: a count the bytes left cannot
// hold is corrupt, and allocates nothing.
const (
	minTicket   = 11 // 4 strings, 4 integers, a time of 3 bytes
	minContent  = 5
	minArtifact = 18 // 3 strings, a version of 12 bytes, a time
)

// count reads the length of a slice whose items take min bytes at least.
func (d *decoder) count(min int) int {
	n := d.uint()
	if n > uint64(len(d.b)/min) {
		d.fail(errTruncated)
		return 0
	}
	return int(n)
}

func (d *decoder) strings(null bool) []string {
	n := d.count(1)
	if null {
		if n == 0 {
			return nil
		}
		n--
	} else if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

func (d *decoder) time() time.Time {
	switch tag := d.byte(); tag {
	case timeUTC, timeOffset:
		sec := d.int()
		nsec := d.uint()
		if nsec >= uint64(time.Second) {
			d.fail(errors.New("nanoseconds beyond a second"))
			return time.Time{}
		}
		t := time.Unix(sec, int64(nsec))
		if tag == timeUTC {
			return t.UTC()
		}
		minutes := d.int()
		if minutes == 0 || minutes <= -24*60 || minutes >= 24*60 {
			d.fail(fmt.Errorf("a zone offset of %d minutes", minutes))
			return time.Time{}
		}
		offset := int(minutes) * 60
		if _, local := t.Zone(); local == offset {
			return t // as time.Parse gives it: Local, which has the offset then
		}
		return t.In(time.FixedZone("", offset))
	case timeText:
		var t time.Time
		if err := t.UnmarshalJSON(d.raw()); err != nil {
			d.fail(err)
		}
		return t
	default:
		if d.err == nil {
			d.fail(fmt.Errorf("a time of unknown form %d", tag))
		}
		return time.Time{}
	}
}

func (d *decoder) impl() ledger.Implementation {
	return ledger.Implementation{Name: d.str(), Version: d.str()}
}

func (d *decoder) record() *ledger.Record {
	r := new(ledger.Record)
	if d.present() {
		r.Sub = d.sub()
	}
	r.State = ledger.SubscriptionState(d.str())
	r.LastNotificationSeq = d.uint()
	r.LastAcceptedDigest = d.str()
	r.LastIssued = d.uint()
	r.Watermark = d.uint()
	r.CloseOrdinal = d.uint()
	r.CloseEpoch = d.uint()
	r.ClosedGeneration = d.uint()
	r.ValidatedAt = d.time()
	r.NotFoundAt = d.time()
	r.TombstonedAt = d.time()
	r.NotFoundOrdinal = d.uint()
	if d.present() {
		c := &ledger.Corroboration{SubscriptionGeneration: d.uint(), FirstRead: d.uint()}
		c.Scans = d.strings(true)
		c.ScanStartedAt = d.time()
		c.ScanEndedAt = d.time()
		c.After = d.uint()
		r.Corroboration = c
	}
	if d.present() {
		u := new(ledger.Unlisting)
		for _, s := range []*ledger.UnlistedScan{&u.First, &u.Last} {
			s.Scans = d.strings(true)
			s.StartedAt = d.time()
			s.EndedAt = d.time()
		}
		u.Tombstoned = d.bool()
		r.Unlisted = u
	}
	if n := d.count(minTicket); n > 0 {
		r.Tickets = make([]ledger.Ticket, n)
		for i := range r.Tickets {
			t := &r.Tickets[i]
			t.Engine = d.str()
			t.URI = d.str()
			t.SessionGeneration = d.uint()
			t.SubscriptionGeneration = d.uint()
			t.ReadOrdinal = d.uint()
			t.RequestID = d.uint()
			t.Trigger = ledger.Trigger(d.str())
			t.Subject = d.str()
			t.IssuedAt = d.time()
		}
	}
	if d.present() {
		c := new(ledger.StoredVersion)
		d.version(&c.Version)
		if n := d.count(minContent); n > 0 {
			c.Contents = make([]ledger.Content, n)
			for i := range c.Contents {
				ct := &c.Contents[i]
				ct.URI = d.str()
				ct.MIMEType = d.str()
				ct.Text = d.str()
				if p := d.raw(); len(p) > 0 {
					ct.Data = append([]byte(nil), p...)
				}
				ct.Binary = d.bool()
			}
		}
		c.Status = ledger.VersionStatus(d.str())
		r.Current = c
	}
	if n := d.count(minArtifact); n > 0 {
		r.Artifacts = make([]ledger.DerivedArtifact, n)
		for i := range r.Artifacts {
			d.artifact(&r.Artifacts[i])
		}
	}
	return r
}

func (d *decoder) sub() *ledger.SubscriptionInfo {
	s := &ledger.SubscriptionInfo{URI: d.str(), RawURI: d.str(), Subject: d.str(), Server: d.impl()}
	s.SessionGeneration = d.uint()
	s.SessionID = d.str()
	if d.present() {
		c := &ledger.CapabilityReceipt{Schema: d.str(), ProtocolVersion: d.str(), Server: d.impl(), ServerID: d.str()}
		c.Resources = d.bool()
		c.Subscribe = d.bool()
		c.ListChanged = d.bool()
		c.SnapshotList = d.bool()
		c.SessionGeneration = d.uint()
		c.ReceivedAt = d.time()
		c.Engine = d.str()
		s.Capabilities = c
	}
	s.Generation = d.uint()
	s.Mode = ledger.SubscriptionMode(d.str())
	s.ModeReason = d.str()
	s.StalenessBound = time.Duration(d.int())
	s.StartedAt = d.time()
	s.EndedAt = d.time()
	return s
}

func (d *decoder) version(v *ledger.ResourceVersion) {
	v.Schema = d.str()
	v.URI = d.str()
	v.MIMEType = d.str()
	v.Digest = d.str()
	v.Bytes = d.int()
	v.ReadOrdinal = d.uint()
	v.Subject = d.str()
	v.Server = d.impl()
	v.SessionGeneration = d.uint()
	v.SubscriptionGeneration = d.uint()
	v.LastModified = d.str()
}

func (d *decoder) artifact(a *ledger.DerivedArtifact) {
	a.Schema = d.str()
	a.Index = d.str()
	a.ArtifactID = d.str()
	d.version(&a.Version)
	a.RecordedAt = d.time()
}
