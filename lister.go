package mcpsync

import (
	"context"
	"errors"
	"iter"
	"strings"

	"github.com/mcpsync/mcpsync/ledger"
)

// Entries yields, in URI order, every entry Lookup would serve subject now:
// what a prompt or an index may hold. URIs Lookup would refuse (no version,
// quarantined, pending or confirmed tombstone, another subject's version)
// are skipped; a revoked subject is served nothing. Options narrow it:
// URIPrefix selects the entries under a prefix, RequireFresh leaves out the
// entries no bound is in force for or whose bound has passed (Lookup of one
// of them says ErrStale); any other choice is the caller's, in its loop. The URIs are those known when the listing
// starts; one subscribed meanwhile, by a kept scan say, appears in every
// later listing.
//
// The listing reads each entry from the ledger when it comes to its key,
// as Lookup does, and yields outside every lock; it is no snapshot. It yields an error and stops when
// the ledger fails, ctx ends (cancelling stops the listing, nothing else),
// or subject is no subject.
func (e *Engine) Entries(ctx context.Context, subject string, opts ...LookupOption) iter.Seq2[Entry, error] {
	o := lookupOptionsOf(opts)
	return func(yield func(Entry, error) bool) {
		if err := e.checkReader(ctx, subject); err != nil {
			if errors.Is(err, ErrRevoked) {
				return // nothing is served to a revoked subject
			}
			yield(Entry{}, err)
			return
		}
		keys, err := e.candidates(ctx, subject, o.prefix)
		if err != nil {
			yield(Entry{}, err)
			return
		}
		for _, key := range keys {
			if err := ctx.Err(); err != nil {
				yield(Entry{}, err)
				return
			}
			entry, err := e.servedNow(key, subject)
			if err != nil {
				if _, refused := RefusalOf(err); refused {
					continue
				}
				yield(Entry{}, err)
				return
			}
			if e.isRevoked(subject) {
				return // revoked while listing: served nothing from now on
			}
			if o.fresh && e.fresh(key, entry) != nil {
				continue
			}
			if !yield(entry, nil) {
				return
			}
		}
	}
}

// candidates returns, in key order, the keys under prefix whose record may
// serve subject: those the ledger's index holds for the subject (a version
// it read, or an artifact derived from one), or every key when the ledger
// keeps no index.
func (e *Engine) candidates(ctx context.Context, subject, prefix string) ([]string, error) {
	var keys []string
	if x, ok := e.ledger.(ledger.Index); ok {
		all, err := x.SubjectKeys(ctx, subject)
		if err != nil {
			return nil, errorf("list %q: %w", subject, err)
		}
		for _, key := range all {
			if strings.HasPrefix(key, prefix) {
				keys = append(keys, key)
			}
		}
		return keys, nil
	}
	err := e.ledger.Range(ctx, func(key string, _ *ledger.Record) bool {
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return true
	})
	if err != nil {
		return nil, errorf("list %q: %w", subject, err)
	}
	return keys, nil
}

// Entries yields every entry Lookup would serve the client's subject now
// (Engine.Entries), each with Degraded set as Client.Lookup sets it.
func (c *Client) Entries(ctx context.Context, opts ...LookupOption) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for entry, err := range c.engine.Entries(ctx, c.opts.Subject, opts...) {
			if err == nil {
				c.degrade(&entry)
			}
			if !yield(entry, err) {
				return
			}
		}
	}
}
