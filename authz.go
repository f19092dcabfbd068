package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpsync/mcpsync/ledger"
)

// RecordDerived records derived artifacts. Each version must be one the
// fence accepted for its URI: the current version, or an older one (a
// consumer may finish deriving after a newer version arrived; the outbox
// has already told it to re-derive). Recording the same (Index, ArtifactID)
// again replaces the earlier record. A version of a revoked subject is
// refused with ErrRevoked: the consumer must delete the artifact instead.
//
// The artifacts of one URI are recorded in one ledger write, all or none,
// so recording the chunks of a document at once costs O(1) per chunk;
// a call per chunk rewrites the URI's list each time. Artifacts of several
// URIs are recorded URI by URI: an error names the URI that failed, and
// the URIs before it are recorded.
func (e *Engine) RecordDerived(artifacts ...ledger.DerivedArtifact) error {
	var keys []string
	byKey := map[string][]ledger.DerivedArtifact{}
	for _, a := range artifacts {
		if a.Index == "" || a.ArtifactID == "" {
			return fmt.Errorf("mcpsync: derived artifact needs an index and an id")
		}
		if err := checkSubject(a.Version.Subject); err != nil {
			return fmt.Errorf("derived artifact %s: %w", a.ArtifactID, err)
		}
		key, err := normalizeKey(a.Version.URI)
		if err != nil {
			return err
		}
		a.Schema, a.Version.URI = ledger.SchemaDerivedArtifact, key
		if a.RecordedAt.IsZero() {
			a.RecordedAt = e.now()
		}
		if _, ok := byKey[key]; !ok {
			keys = append(keys, key)
		}
		byKey[key] = append(byKey[key], a)
	}
	if err := e.syncRevoked(context.Background()); err != nil {
		return err
	}
	e.revokeMu.RLock()
	defer e.revokeMu.RUnlock()
	for _, key := range keys {
		for _, a := range byKey[key] {
			if e.isRevoked(a.Version.Subject) {
				return fmt.Errorf("%w: subject %q", ErrRevoked, a.Version.Subject)
			}
		}
		if err := e.recordDerived(key, byKey[key]); err != nil {
			return err
		}
		// A revocation through another engine may have swept key between
		// the check above and the write: this engine sweeps it itself, so
		// the artifacts are announced, and refuses them.
		if err := e.syncRevoked(context.Background()); err != nil {
			return err
		}
		for _, a := range byKey[key] {
			if e.isRevoked(a.Version.Subject) {
				var rc RevocationReceipt
				if err := e.revokeRecord(key, a.Version.Subject, &rc); err != nil && !errors.Is(err, ErrNotLeaseholder) {
					return err
				}
				return fmt.Errorf("%w: subject %q", ErrRevoked, a.Version.Subject)
			}
		}
	}
	return nil
}

// recordDerived records the artifacts of key in one write.
func (e *Engine) recordDerived(key string, artifacts []ledger.DerivedArtifact) error {
	type id struct{ index, artifact string }
	latest := make(map[id]int, len(artifacts)) // the last of each id wins
	for i, a := range artifacts {
		latest[id{a.Index, a.ArtifactID}] = i
	}
	_, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if cur == nil || cur.Current == nil {
			return nil, nil, fmt.Errorf("%w: %s has no accepted version", ErrUnknownVersion, key)
		}
		c := cur.Current.Version
		for _, a := range artifacts {
			if err := derivableFrom(key, cur.Current.Status, c, a.Version); err != nil {
				return nil, nil, err
			}
			if cur.Current.Status == ledger.VersionRevoked && a.Version.Subject == c.Subject {
				return nil, nil, fmt.Errorf("%w: subject %q", ErrRevoked, a.Version.Subject)
			}
		}
		next := clone(cur)
		next.Artifacts = make([]ledger.DerivedArtifact, 0, len(cur.Artifacts)+len(latest))
		for _, held := range cur.Artifacts {
			if _, replaced := latest[id{held.Index, held.ArtifactID}]; !replaced {
				next.Artifacts = append(next.Artifacts, held)
			}
		}
		for i, a := range artifacts {
			if latest[id{a.Index, a.ArtifactID}] == i {
				next.Artifacts = append(next.Artifacts, a)
			}
		}
		return next, nil, nil
	})
	return err
}

// derivableFrom refuses an artifact's version v unless the fence accepted
// it for key, whose current version is c with status.
func derivableFrom(key string, status ledger.VersionStatus, c, v ResourceVersion) error {
	switch {
	case status == ledger.VersionQuarantined && !c.After(v) && !v.After(c):
		return fmt.Errorf("%w: %s ordinal %d was quarantined", ErrQuarantined, key, c.ReadOrdinal)
	case v.After(c):
		return fmt.Errorf("%w: %s generation %d ordinal %d is newer than the current version",
			ErrUnknownVersion, key, v.SubscriptionGeneration, v.ReadOrdinal)
	case !c.After(v) && v.Digest != c.Digest:
		return fmt.Errorf("%w: %s digest %s differs from the version accepted at that ordinal",
			ErrUnknownVersion, key, v.Digest)
	case v.SubscriptionGeneration == c.SubscriptionGeneration && v.Subject != c.Subject:
		// One generation reads for one subject: an artifact named for
		// another would escape that subject's revocation.
		return fmt.Errorf("%w: %s generation %d was read by %q, not %q",
			ErrUnknownVersion, key, c.SubscriptionGeneration, c.Subject, v.Subject)
	}
	return nil
}

// RevocationReceipt lists everything one revocation invalidated.
type RevocationReceipt struct {
	Schema    string                   `json:"schema"`
	Subject   string                   `json:"subject"`
	At        time.Time                `json:"at"`
	Versions  []ResourceVersion        `json:"versions"`
	Artifacts []ledger.DerivedArtifact `json:"artifacts"`
	// Elsewhere lists URIs whose leases other workers hold: they are not
	// swept here, and Lookup refuses the subject on them all the same;
	// their owner sweeps each at its next read of it (a read of a revoked
	// subject's generation is refused, and sweeps), or when it opens its
	// next generation.
	Elsewhere []string `json:"elsewhere,omitempty"`
}

// checkSubject refuses a subject no version may be read for or served to:
// one checkStored refuses; one longer than MaxSubjectBytes, which some
// ledger could not key a revocation by; and one holding NUL, a control
// byte no principal's name carries.
func checkSubject(subject string) error {
	if err := checkStored(subject); err != nil {
		return err
	}
	switch {
	case len(subject) > MaxSubjectBytes:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidSubject, len(subject), MaxSubjectBytes)
	case strings.IndexByte(subject, 0) >= 0:
		return fmt.Errorf("%w: %q holds NUL", ErrInvalidSubject, subject)
	}
	return nil
}

// checkStored refuses a subject no ledger keeps as given: an empty one,
// and one that is not UTF-8, which a durable ledger's JSON stores with
// U+FFFD in place of each bad byte. A revocation takes any other: a ledger
// of an earlier release may hold versions of a subject checkSubject
// refuses, and the ledger revokes it if it can store it (a ledger that
// cannot refuses it with ErrInvalidSubject).
func checkStored(subject string) error {
	switch {
	case subject == "":
		return fmt.Errorf("%w: empty subject", ErrInvalidSubject)
	case !utf8.ValidString(subject):
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidSubject, subject)
	}
	return nil
}

// RevokeSubject makes every version read by subject unservable at once:
// from the moment it is called, Lookup refuses them (ErrRevoked) and the
// fence refuses the subject's reads still in flight. It then marks each such
// version revoked and writes an outbox entry for it and for every derived
// artifact recorded against a version of the subject, so the revocation can
// be traced to each derived index. The receipt lists them all.
//
// Revocation is permanent: the ledger records the subject before anything
// is swept, so an engine opened on it later refuses the subject too, and
// finishes a sweep a crash cut short. Calling it again finds nothing new to
// invalidate.
func (e *Engine) RevokeSubject(subject string) (RevocationReceipt, error) {
	if err := checkStored(subject); err != nil {
		return RevocationReceipt{}, err
	}
	r := ledger.RevokedSubject{Schema: ledger.SchemaRevokedSubject, Subject: subject, At: e.now(), Engine: e.id}
	e.revokeMu.Lock()
	e.addRevoked(subject)
	e.revokeMu.Unlock()

	ctx := context.Background()
	if err := e.ledger.Revoke(ctx, r); err != nil {
		return RevocationReceipt{Schema: SchemaRevocationReceipt, Subject: subject, At: r.At},
			errorf("revoke %q: %w", subject, err)
	}
	return e.sweep(ctx, r)
}

// sweep marks every version of r's subject revoked and announces it and its
// artifacts, then records the sweep as done.
func (e *Engine) sweep(ctx context.Context, r ledger.RevokedSubject) (RevocationReceipt, error) {
	rc := RevocationReceipt{Schema: SchemaRevocationReceipt, Subject: r.Subject, At: r.At,
		Versions: []ResourceVersion{}, Artifacts: []ledger.DerivedArtifact{}}
	keys, err := e.subjectKeys(ctx, r.Subject)
	if err != nil {
		return rc, errorf("revoke %q: %w", r.Subject, err)
	}
	for _, key := range keys {
		err := e.revokeRecord(key, r.Subject, &rc)
		switch {
		case errors.Is(err, ErrNotLeaseholder):
			rc.Elsewhere = append(rc.Elsewhere, key)
		case err != nil:
			return rc, errorf("revoke %q: %w", r.Subject, err)
		}
	}
	if len(rc.Elsewhere) > 0 {
		// Not swept everywhere: every engine opened on the ledger tries
		// again, and owners sweep their URIs as they open them.
		return rc, nil
	}
	r.Swept = true
	if err := e.ledger.Revoke(ctx, r); err != nil {
		return rc, errorf("revoke %q: %w", r.Subject, err)
	}
	return rc, nil
}

// subjectKeys returns, in key order, the keys whose record a revocation of
// subject may change: from the ledger's index when it keeps one, or else
// every key.
func (e *Engine) subjectKeys(ctx context.Context, subject string) ([]string, error) {
	if x, ok := e.ledger.(ledger.Index); ok {
		return x.SubjectKeys(ctx, subject)
	}
	var keys []string
	err := e.ledger.Range(ctx, func(key string, _ *ledger.Record) bool {
		keys = append(keys, key)
		return true
	})
	return keys, err
}

// ForgetDerived drops the record of artifact (index, artifactID) derived from
// a version of uri, once the consumer deleted the artifact (after a
// re-derivation produced fewer pieces, a quarantine or a tombstone), so that
// a later revocation does not name it. Forgetting an unknown artifact is not
// an error.
func (e *Engine) ForgetDerived(rawURI, index, artifactID string) error {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return err
	}
	_, _, err = e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		if cur == nil {
			return nil, nil, nil
		}
		i := slices.IndexFunc(cur.Artifacts, func(a ledger.DerivedArtifact) bool {
			return a.Index == index && a.ArtifactID == artifactID
		})
		if i < 0 {
			return nil, nil, nil
		}
		next := clone(cur)
		next.Artifacts = slices.Delete(slices.Clone(cur.Artifacts), i, i+1)
		return next, nil, nil
	})
	return err
}

// sweepOpened finishes, on a URI just opened in a new generation, the
// revocations its record still carries: a sweep leaves alone the URIs other
// workers hold (ErrNotLeaseholder), so whoever opens one next sweeps it.
func (e *Engine) sweepOpened(ctx context.Context, key string, r *ledger.Record) error {
	return e.sweepSubjects(ctx, key, r.Subjects())
}

// sweepSubjects is sweepOpened of a record whose subjects (subjectsOf) are
// held: it revokes on key those of them that are revoked.
func (e *Engine) sweepSubjects(ctx context.Context, key string, held []string) error {
	if err := e.syncRevoked(ctx); err != nil {
		return err
	}
	var subjects []string
	for _, s := range held {
		if e.isRevoked(s) {
			subjects = append(subjects, s)
		}
	}
	var rc RevocationReceipt
	for _, s := range subjects {
		if err := e.revokeRecord(key, s, &rc); err != nil {
			return errorf("revoke %q: %w", s, err)
		}
	}
	return nil
}

// revokeRecord marks the URI's current version unservable if subject read
// it, and writes one outbox entry for it and one per derived artifact
// recorded against a version that subject read, in one step.
func (e *Engine) revokeRecord(key, subject string, rc *RevocationReceipt) error {
	var versions []ResourceVersion
	var artifacts []ledger.DerivedArtifact
	_, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		versions, artifacts = nil, nil
		if cur == nil {
			return nil, nil, nil
		}
		now := e.now()
		next := clone(cur)
		var entries []OutboxEntry
		if c := cur.Current; c != nil && c.Version.Subject == subject && c.Status != ledger.VersionRevoked {
			sv := *c
			sv.Status, sv.Contents = ledger.VersionRevoked, nil
			next.Current = &sv
			versions = append(versions, c.Version)
			entries = append(entries, OutboxEntry{Schema: SchemaInvalidation, URI: key, Reason: ledger.InvalidateRevoked, Previous: c.Version, Subject: subject, At: now})
		}
		next.Artifacts = nil
		for i, a := range cur.Artifacts {
			if a.Version.Subject != subject {
				next.Artifacts = append(next.Artifacts, a)
				continue
			}
			artifacts = append(artifacts, a)
			entries = append(entries, OutboxEntry{Schema: SchemaInvalidation, URI: key, Reason: ledger.InvalidateRevoked, Previous: a.Version, Subject: subject, Artifact: &cur.Artifacts[i], At: now})
		}
		if len(entries) == 0 {
			return nil, nil, nil
		}
		return next, entries, nil
	})
	if err != nil {
		return err
	}
	rc.Versions = append(rc.Versions, versions...)
	rc.Artifacts = append(rc.Artifacts, artifacts...)
	return nil
}
