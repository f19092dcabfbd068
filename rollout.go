package mcpsync

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Rollout controls, in the order a rollout uses them.
// First, shadow: a Client runs discovery, ordinals and the close fence beside
// the caller's own read path, which keeps serving, and a Shadow reports where
// the library would have refused or served something else (Observe,
// ObserveListing). Then refresh for a stable fraction of subscriptions
// (ClientOptions.RefreshFraction, Client.SetRefreshFraction), raised without
// a restart. Rolling back keeps the fence: watermarks and close receipts
// stay in the ledger (ledger.Export, ledger.NewMemoryFrom), so no old read
// loses it.

// RolloutStatus reports the gradual enablement of a Client's refresh.
type RolloutStatus struct {
	Schema string `json:"schema"`
	// RefreshFraction is the share of subscriptions whose refresh is on.
	RefreshFraction float64 `json:"refreshFraction"`
	// Enabled and Disabled count the subscriptions the client holds (opened
	// and not unsubscribed) inside and outside the fraction.
	Enabled  int `json:"enabled"`
	Disabled int `json:"disabled"`
	// Skipped counts, by trigger, the reads the client did not send because
	// their subscription was outside the fraction at the time.
	Skipped map[Trigger]uint64 `json:"skipped"`
}

// rollout is a Client's gradual enablement state.
type rollout struct {
	fraction atomic.Pointer[float64] // nil means 1: every subscription refreshes

	mu      sync.Mutex         // protects skipped
	skipped map[Trigger]uint64 // reads left out, by trigger
}

// position returns where the subscription of key sits in [0, 1), as
// SetRefreshFraction says.
func position(key string) float64 {
	sum := sha256.Sum256([]byte(key))
	// 53 bits convert to float64 exactly, so no position rounds up to 1 and
	// a fraction of 1 enables every subscription.
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// SetRefreshFraction sets the share of subscriptions that refresh, from 0
// (none) to 1 (all, the default); anything else is refused.
//
// A subscription refreshes iff its position is below f, so raising the
// fraction only ever adds subscriptions and lowering it only removes them.
// The position of a URI is the first 8 bytes of SHA-256 over its
// normalized form, read big-endian as a fraction of 2^64 (to 53 bits), so
// every process and every spelling of the URI agree on it.
//
// A subscription outside the fraction stays subscribed, discovered and
// fenced, but the client sends it no reads of its own: not the initial read
// of Subscribe, not the re-read after a reconnect, no revalidation or poll
// read, none for a notification. Revalidation timers check the fraction at
// every tick and notifications when they arrive, so a change takes effect
// without reconnecting: a subscription brought inside is refreshed from its
// next notification or timer tick (within its published staleness bound;
// Read fetches it at once), and one left outside stops being read, except
// for reads already queued. Reads the caller asks for (Read, Reconcile) are
// always sent.
//
// Lookup does not consult the fraction: while a subscription is outside it,
// nothing refreshes its local copy, so callers serve such URIs from their
// own path (RefreshEnabled says which).
func (c *Client) SetRefreshFraction(f float64) error {
	if !(f >= 0 && f <= 1) { // also refuses NaN
		return fmt.Errorf("mcpsync: refresh fraction %v is outside [0, 1]", f)
	}
	c.rollout.fraction.Store(&f)
	return nil
}

// initRollout applies ClientOptions.RefreshFraction (nil means 1).
func (c *Client) initRollout(f *float64) error {
	if f == nil {
		return nil
	}
	return c.SetRefreshFraction(*f)
}

// refreshFraction returns the current fraction.
func (c *Client) refreshFraction() float64 {
	if f := c.rollout.fraction.Load(); f != nil {
		return *f
	}
	return 1
}

// RefreshEnabled reports whether the subscription of uri is inside the
// refresh fraction, so the client refreshes it. An invalid URI is never
// inside.
func (c *Client) RefreshEnabled(uri string) bool {
	key, err := normalizeKey(uri)
	return err == nil && position(key) < c.refreshFraction()
}

// skipRefresh reports whether the client leaves out a read of key (normalized) for
// trigger because its subscription is outside the refresh fraction, and
// counts it. Only URIs this client watches are left out: anything else takes
// the usual path, which records why it triggers nothing.
func (c *Client) skipRefresh(key string, trigger Trigger) bool {
	f := c.refreshFraction()
	if f >= 1 {
		return false
	}
	c.mu.Lock()
	w := c.watches[key]
	c.mu.Unlock()
	if w == nil || w.position < f {
		return false
	}
	r := &c.rollout
	r.mu.Lock()
	if r.skipped == nil {
		r.skipped = make(map[Trigger]uint64)
	}
	r.skipped[trigger]++
	r.mu.Unlock()
	return true
}

// Rollout reports the refresh fraction and how many of the client's open
// subscriptions are inside and outside it.
func (c *Client) Rollout() RolloutStatus {
	f := c.refreshFraction()
	s := RolloutStatus{Schema: SchemaRolloutStatus, RefreshFraction: f, Skipped: map[Trigger]uint64{}}
	c.mu.Lock()
	for key := range c.watches {
		if position(key) < f {
			s.Enabled++
		} else {
			s.Disabled++
		}
	}
	c.mu.Unlock()
	c.rollout.mu.Lock()
	for k, v := range c.rollout.skipped {
		s.Skipped[k] = v
	}
	c.rollout.mu.Unlock()
	return s
}

// ShadowVerdict compares what a caller's own read path served with what the
// fence would serve.
type ShadowVerdict string

// Shadow verdicts.
const (
	// VerdictAgree: the fence would serve content with the same digest.
	VerdictAgree ShadowVerdict = "AGREE"
	// VerdictDiffers: the fence would serve content with another digest.
	VerdictDiffers ShadowVerdict = "DIFFERS"
	// VerdictWouldRefuse: the fence has no version it may serve to the
	// subject; the report's Refusal says why.
	VerdictWouldRefuse ShadowVerdict = "WOULD_REFUSE"
	// VerdictNotSynced: the engine holds no subscription of the URI that is
	// not closing or closed, so it keeps no view to compare with.
	VerdictNotSynced ShadowVerdict = "NOT_SYNCED"
)

// LookupRefusal says why Lookup would serve nothing.
type LookupRefusal string

// Lookup refusals, one per error of Engine.Lookup.
const (
	LookupNoVersion        LookupRefusal = "NO_VERSION"
	LookupRevoked          LookupRefusal = "REVOKED"
	LookupForbidden        LookupRefusal = "FORBIDDEN"
	LookupQuarantined      LookupRefusal = "QUARANTINED"
	LookupTombstonePending LookupRefusal = "TOMBSTONE_PENDING"
	LookupTombstoned       LookupRefusal = "TOMBSTONED"
	LookupStale            LookupRefusal = "STALE"
	LookupUnknownURI       LookupRefusal = "UNKNOWN_URI"
	LookupInvalidURI       LookupRefusal = "INVALID_URI"
	LookupInvalidSubject   LookupRefusal = "INVALID_SUBJECT"
)

var lookupRefusals = []struct {
	err    error
	reason LookupRefusal
}{
	{ErrNoVersion, LookupNoVersion}, {ErrRevoked, LookupRevoked}, {ErrForbidden, LookupForbidden},
	{ErrQuarantined, LookupQuarantined}, {ErrTombstonePending, LookupTombstonePending},
	{ErrTombstoned, LookupTombstoned}, {ErrStale, LookupStale}, {ErrUnknownURI, LookupUnknownURI},
	{ErrInvalidURI, LookupInvalidURI}, {ErrInvalidSubject, LookupInvalidSubject},
}

// RefusalOf names the refusal an error of Lookup stands for, so a caller
// can switch on one value (and log it) instead of on a chain of errors.Is.
// It reports false for any other error: a ledger that failed, a closed
// client.
func RefusalOf(err error) (LookupRefusal, bool) {
	for _, l := range lookupRefusals {
		if errors.Is(err, l.err) {
			return l.reason, true
		}
	}
	return "", false
}

// ShadowReport compares one response of a caller's read path with the fence.
type ShadowReport struct {
	Schema  string        `json:"schema"`
	URI     string        `json:"uri"` // normalized
	Subject string        `json:"subject"`
	Verdict ShadowVerdict `json:"verdict"`
	// Refusal is set with VerdictWouldRefuse.
	Refusal LookupRefusal `json:"refusal,omitempty"`
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
	State     SubscriptionState `json:"state,omitempty"`
	Watermark uint64            `json:"watermark"`
	Detail    string            `json:"detail,omitempty"`
	ServedAt  time.Time         `json:"servedAt"`
	// ObservedAt is when the fence's view was read (the engine's clock).
	ObservedAt time.Time `json:"observedAt"`
}

// Shadow runs the library beside a caller's existing read path: the caller
// keeps serving what it serves, and tells Observe, which reports where the
// fence would have refused or served something else. A Client syncs the
// engine as usual meanwhile.
//
// A Shadow only reads: it never changes what the caller serves and never
// writes a version, watermark, tombstone, receipt or outbox entry (the
// fence alone does). It is safe for concurrent use.
type Shadow struct {
	engine  *Engine
	subject string

	mu     sync.Mutex // protects counts
	counts map[ShadowVerdict]uint64
}

// NewShadow returns a Shadow comparing with what e would serve to subject
// (the subject the caller's path serves, and its Client reads as).
func NewShadow(e *Engine, subject string) (*Shadow, error) {
	if e == nil {
		return nil, errors.New("mcpsync: NewShadow needs an engine")
	}
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	return &Shadow{engine: e, subject: subject, counts: make(map[ShadowVerdict]uint64)}, nil
}

// Observe compares what the caller's read path served for uri at servedAt
// with what the fence would serve now (Engine.Lookup for the subject), by
// content digest (NewReadResult's, so served must carry the contents as
// read, URIs included), and counts the verdict. The two paths read at
// different moments, so a DIFFERS right after a change is expected; its rate
// is what tells. Only an invalid URI or a ledger failure returns an error,
// and that observation is not counted.
func (s *Shadow) Observe(uri string, served []Content, servedAt time.Time) (ShadowReport, error) {
	key, err := normalizeKey(uri)
	if err != nil {
		return ShadowReport{}, err
	}
	r := ShadowReport{Schema: SchemaShadowReport, URI: key, Subject: s.subject, ServedAt: servedAt, ObservedAt: s.engine.now()}
	res := NewReadResult(served)
	r.ServedDigest = res.Digest()
	if err := res.Err(); err != nil {
		r.Detail = "served content cannot be a version: " + err.Error()
	}
	sub, err := s.engine.Subscription(key)
	switch {
	case errors.Is(err, ErrUnknownURI):
		r.Verdict = VerdictNotSynced
	case err != nil:
		return ShadowReport{}, err
	default:
		r.State, r.Watermark = sub.State, sub.Watermark
		if sub.SubscriptionGeneration == 0 || sub.CloseEpoch != 0 {
			r.Verdict = VerdictNotSynced // discovered only, or closing or closed
		}
	}
	if r.Verdict == "" {
		entry, err := s.engine.Lookup(s.subject, key)
		if err != nil {
			refusal, ok := RefusalOf(err)
			if !ok {
				return ShadowReport{}, err
			}
			r.Refusal = refusal
			r.Verdict = VerdictWouldRefuse
		} else {
			v := entry.Version
			r.AcceptedDigest, r.ReadOrdinal = v.Digest, v.ReadOrdinal
			r.SessionGeneration, r.SubscriptionGeneration = v.SessionGeneration, v.SubscriptionGeneration
			r.State = entry.State
			r.Verdict = VerdictDiffers
			if r.ServedDigest == v.Digest {
				r.Verdict = VerdictAgree
			}
		}
	}
	s.mu.Lock()
	s.counts[r.Verdict]++
	s.mu.Unlock()
	return r, nil
}

// Counts returns how many observations got each verdict.
func (s *Shadow) Counts() map[ShadowVerdict]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[ShadowVerdict]uint64, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// ListingShadowReport compares a listing the caller's own path produced
// with the library's discovery scan (Client.Scan) of the same kind.
type ListingShadowReport struct {
	Schema string   `json:"schema"`
	Kind   ListKind `json:"kind"`
	// Verdict is AGREE or DIFFERS by the sets of keys (Descriptor.Key), or
	// WOULD_REFUSE when the scan produced no trustworthy set (UNRECONCILED).
	Verdict       ShadowVerdict `json:"verdict"`
	CatalogStatus CatalogStatus `json:"catalogStatus"`
	// CompletenessRefusal says why a task that needs a complete
	// enumeration would refuse the catalog now (Catalog.Proven); "" when
	// it would accept it.
	CompletenessRefusal CatalogRefusalReason `json:"completenessRefusal,omitempty"`
	// Missing are keys the caller listed and the catalog does not; Extra
	// are keys the catalog lists and the caller did not. Both sorted.
	Missing    []string  `json:"missing"`
	Extra      []string  `json:"extra"`
	ObservedAt time.Time `json:"observedAt"`
}

// ObserveListing compares the items the caller's path listed with cat, at
// now, in the engine's current session. It reads only, and is not counted
// in Counts, which covers Observe.
func (s *Shadow) ObserveListing(cat Catalog, served []Descriptor, now time.Time) ListingShadowReport {
	r := ListingShadowReport{
		Schema: SchemaListingShadowReport, Kind: cat.Kind, CatalogStatus: cat.Status,
		Missing: []string{}, Extra: []string{}, ObservedAt: now,
	}
	var ce *CatalogError
	if err := cat.refusal(now, s.engine.SessionGeneration(), s.engine.id, true); errors.As(err, &ce) {
		r.CompletenessRefusal = ce.Reason
	}
	if cat.Status == CatalogUnreconciled {
		r.Verdict = VerdictWouldRefuse
		return r
	}
	listed := make(map[string]bool, len(served))
	for _, d := range served {
		d.Kind = cat.Kind
		listed[d.Key()] = true
	}
	for key := range listed {
		if !cat.lists(key) {
			r.Missing = append(r.Missing, key)
		}
	}
	for _, d := range cat.Descriptors {
		if !listed[d.Key()] {
			r.Extra = append(r.Extra, d.Key())
		}
	}
	slices.Sort(r.Missing)
	r.Verdict = VerdictAgree
	if len(r.Missing)+len(r.Extra) > 0 {
		r.Verdict = VerdictDiffers
	}
	return r
}
