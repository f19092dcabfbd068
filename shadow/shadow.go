// Package shadow compares what a caller's own read path serves with what an mcpsync engine's fence would serve, for the first step of a rollout.
//
// A program that adopts mcpsync first runs it beside the read path it has: a
// Client syncs an Engine as usual while the program keeps serving its own
// copy, and tells an Observer what it served. The reports say where the
// library would have refused or served something else. An Observer only
// reads the engine, through its exported API: nothing the caller serves
// changes, and no version, watermark, tombstone, receipt or outbox entry is
// written (the fence alone writes them).
package shadow

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// Schemas of the reports, each in its "schema" field.
const (
	SchemaReport        = "shadowReport.v1"
	SchemaListingReport = "listingShadowReport.v1"
)

// Verdict compares what a caller's own read path served with what the
// fence would serve.
type Verdict string

// Verdicts.
const (
	// Agree: the fence would serve content with the same digest.
	Agree Verdict = "AGREE"
	// Differs: the fence would serve content with another digest.
	Differs Verdict = "DIFFERS"
	// WouldRefuse: the fence has no version it may serve to the subject;
	// the report's Refusal says why.
	WouldRefuse Verdict = "WOULD_REFUSE"
	// NotSynced: the engine holds no subscription of the URI that is not
	// closing or closed, so it keeps no view to compare with.
	NotSynced Verdict = "NOT_SYNCED"
)

// Report compares one response of a caller's read path with the fence.
type Report struct {
	Schema  string  `json:"schema"`
	URI     string  `json:"uri"` // normalized
	Subject string  `json:"subject"`
	Verdict Verdict `json:"verdict"`
	// Refusal is set with WouldRefuse.
	Refusal mcpsync.LookupRefusal `json:"refusal,omitempty"`
	// ServedDigest is the content digest of what the caller served; "" when
	// that cannot be a version (Detail says why).
	ServedDigest string `json:"servedDigest"`
	// AcceptedDigest, ReadOrdinal and the generations are those of the
	// version the fence would serve; zero when it would serve none.
	AcceptedDigest         string `json:"acceptedDigest,omitempty"`
	ReadOrdinal            uint64 `json:"readOrdinal,omitempty"`
	SessionGeneration      uint64 `json:"sessionGeneration,omitempty"`
	SubscriptionGeneration uint64 `json:"subscriptionGeneration,omitempty"`
	// State and Watermark are the URI's subscription as recorded; State is
	// "" for a URI the engine does not know.
	State     ledger.SubscriptionState `json:"state,omitempty"`
	Watermark uint64                   `json:"watermark"`
	Detail    string                   `json:"detail,omitempty"`
	ServedAt  time.Time                `json:"servedAt"`
	// ObservedAt is when the fence's view was read (the engine's clock,
	// Engine.Now).
	ObservedAt time.Time `json:"observedAt"`
}

// Observer runs the library beside a caller's existing read path: the
// caller keeps serving what it serves, and tells Observe, which reports
// where the fence would have refused or served something else. It is safe
// for concurrent use.
type Observer struct {
	engine  *mcpsync.Engine
	subject string

	mu     sync.Mutex // protects counts
	counts map[Verdict]uint64
}

// New returns an Observer comparing with what e would serve to subject
// (the subject the caller's path serves, and its Client reads as). It
// refuses, with mcpsync.ErrInvalidSubject, a subject Engine.Lookup would.
func New(e *mcpsync.Engine, subject string) (*Observer, error) {
	if e == nil {
		return nil, errors.New("shadow: New needs an engine")
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	return &Observer{engine: e, subject: subject, counts: make(map[Verdict]uint64)}, nil
}

// checkSubject refuses a subject no version may be served to, by the rule
// mcpsync.MaxSubjectBytes documents: empty, not UTF-8, longer than
// MaxSubjectBytes or holding NUL. Were the rule to grow, Lookup would
// still refuse such a subject, and Observe report it (WouldRefuse,
// INVALID_SUBJECT).
func checkSubject(subject string) error {
	switch {
	case subject == "":
		return fmt.Errorf("%w: empty subject", mcpsync.ErrInvalidSubject)
	case !utf8.ValidString(subject):
		return fmt.Errorf("%w: %q is not UTF-8", mcpsync.ErrInvalidSubject, subject)
	case len(subject) > mcpsync.MaxSubjectBytes:
		return fmt.Errorf("%w: %d bytes, more than %d", mcpsync.ErrInvalidSubject, len(subject), mcpsync.MaxSubjectBytes)
	case strings.IndexByte(subject, 0) >= 0:
		return fmt.Errorf("%w: %q holds NUL", mcpsync.ErrInvalidSubject, subject)
	}
	return nil
}

// Observe compares what the caller's read path served for uri at servedAt
// with what the fence would serve now (Engine.Lookup for the subject), by
// content digest (mcpsync.NewReadResult's, so served must carry the
// contents as read, URIs included), and counts the verdict. The two paths
// read at different moments, so a DIFFERS right after a change is
// expected; its rate is what tells. Only an invalid URI or a ledger
// failure returns an error, and that observation is not counted.
func (o *Observer) Observe(uri string, served []mcpsync.Content, servedAt time.Time) (Report, error) {
	key, err := mcpsync.NormalizeURI(uri)
	if err != nil {
		return Report{}, err
	}
	r := Report{Schema: SchemaReport, URI: key, Subject: o.subject, ServedAt: servedAt, ObservedAt: o.engine.Now()}
	res := mcpsync.NewReadResult(served)
	r.ServedDigest = res.Digest()
	if err := res.Err(); err != nil {
		r.Detail = "served content cannot be a version: " + err.Error()
	}
	sub, err := o.engine.Subscription(key)
	switch {
	case errors.Is(err, mcpsync.ErrUnknownURI):
		r.Verdict = NotSynced
	case err != nil:
		return Report{}, err
	default:
		r.State, r.Watermark = sub.State, sub.Watermark
		if sub.SubscriptionGeneration == 0 || sub.CloseEpoch != 0 {
			r.Verdict = NotSynced // discovered only, or closing or closed
		}
	}
	if r.Verdict == "" {
		entry, err := o.engine.Lookup(o.subject, key)
		if err != nil {
			refusal, ok := mcpsync.RefusalOf(err)
			if !ok {
				return Report{}, err
			}
			r.Refusal = refusal
			r.Verdict = WouldRefuse
		} else {
			v := entry.Version
			r.AcceptedDigest, r.ReadOrdinal = v.Digest, v.ReadOrdinal
			r.SessionGeneration, r.SubscriptionGeneration = v.SessionGeneration, v.SubscriptionGeneration
			r.State = entry.State
			r.Verdict = Differs
			if r.ServedDigest == v.Digest {
				r.Verdict = Agree
			}
		}
	}
	o.mu.Lock()
	o.counts[r.Verdict]++
	o.mu.Unlock()
	return r, nil
}

// Counts returns how many observations got each verdict.
func (o *Observer) Counts() map[Verdict]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.counts)
}

// ListingReport compares a listing the caller's own path produced with the
// library's discovery scan (Client.Scan) of the same kind.
type ListingReport struct {
	Schema string           `json:"schema"`
	Kind   mcpsync.ListKind `json:"kind"`
	// Verdict is AGREE or DIFFERS by the sets of keys (Descriptor.Key), or
	// WOULD_REFUSE when the scan produced no trustworthy set (UNRECONCILED).
	Verdict       Verdict               `json:"verdict"`
	CatalogStatus mcpsync.CatalogStatus `json:"catalogStatus"`
	// CompletenessRefusal says why a task that needs a complete
	// enumeration would refuse the catalog now (Catalog.ProvenIn); "" when
	// it would accept it.
	CompletenessRefusal mcpsync.CatalogRefusalReason `json:"completenessRefusal,omitempty"`
	// Missing are keys the caller listed and the catalog does not; Extra
	// are keys the catalog lists and the caller did not. Both sorted.
	Missing    []string  `json:"missing"`
	Extra      []string  `json:"extra"`
	ObservedAt time.Time `json:"observedAt"`
}

// ObserveListing compares the items the caller's path listed with cat, at
// now, in the engine's current session. It reads only, and is not counted
// in Counts, which covers Observe.
func (o *Observer) ObserveListing(cat mcpsync.Catalog, served []mcpsync.Descriptor, now time.Time) ListingReport {
	r := ListingReport{
		Schema: SchemaListingReport, Kind: cat.Kind, CatalogStatus: cat.Status,
		Missing: []string{}, Extra: []string{}, ObservedAt: now,
		CompletenessRefusal: completenessRefusal(cat, o.engine, now),
	}
	if cat.Status == mcpsync.CatalogUnreconciled {
		r.Verdict = WouldRefuse
		return r
	}
	listed := make(map[string]bool, len(served))
	for _, d := range served {
		d.Kind = cat.Kind
		listed[d.Key()] = true
	}
	catalogued := make(map[string]bool, len(cat.Descriptors))
	for _, d := range cat.Descriptors { // sorted by key, so Extra is too
		catalogued[d.Key()] = true
		if !listed[d.Key()] {
			r.Extra = append(r.Extra, d.Key())
		}
	}
	for key := range listed {
		if !catalogued[key] {
			r.Missing = append(r.Missing, key)
		}
	}
	slices.Sort(r.Missing)
	r.Verdict = Agree
	if len(r.Missing)+len(r.Extra) > 0 {
		r.Verdict = Differs
	}
	return r
}

// completenessRefusal is why Catalog.ProvenIn(e) would refuse cat, with
// staleness judged at now rather than by e's clock: ProvenIn names any
// refusal that needs no clock (not proven, another engine, another
// session) before staleness, and Proven judges staleness at now.
func completenessRefusal(cat mcpsync.Catalog, e *mcpsync.Engine, now time.Time) mcpsync.CatalogRefusalReason {
	reason := func(_ []mcpsync.Descriptor, err error) mcpsync.CatalogRefusalReason {
		if ce, ok := errors.AsType[*mcpsync.CatalogError](err); ok {
			return ce.Reason
		}
		return ""
	}
	if r := reason(cat.ProvenIn(e)); r != "" && r != mcpsync.CatalogReasonStale {
		return r
	}
	return reason(cat.Proven(now, e.SessionGeneration()))
}
