package mcpsync

import (
	"context"
	"fmt"

	"github.com/mcpsync/mcpsync/ledger"
)

// CloseReceipt records the freezing of a subscription generation's fence.
type CloseReceipt struct {
	Schema                 string                   `json:"schema"`
	URI                    string                   `json:"uri"`
	SessionGeneration      uint64                   `json:"sessionGeneration"`
	SubscriptionGeneration uint64                   `json:"subscriptionGeneration"`
	CloseOrdinal           uint64                   `json:"closeOrdinal"`
	CloseEpoch             uint64                   `json:"closeEpoch"`
	Watermark              uint64                   `json:"watermark"`
	ReadsInFlight          int                      `json:"readsInFlight"`
	State                  ledger.SubscriptionState `json:"state"`
}

// BeginClose starts closing the URI's subscription generation (the moment
// before resources/unsubscribe is sent): by compare-and-swap it moves the
// subscription to UNSUBSCRIBING and freezes closeOrdinal (the last ordinal
// issued) and a close epoch. From then on no ordinal is issued, and every
// result of this generation, content or not-found, whenever it was sent, is
// refused with STALE_AFTER_CLOSE. Cached content stays until evicted.
//
// BeginClose is idempotent: on a generation already closing or closed it
// returns that generation's receipt.
func (e *Engine) BeginClose(rawURI string) (CloseReceipt, error) {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return CloseReceipt{}, err
	}
	var path transitions
	var epoch uint64
	next, _, err := e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		path.reset(cur)
		if cur == nil || cur.Sub == nil {
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		}
		if cur.CloseEpoch != 0 {
			return nil, nil, nil
		}
		next := clone(cur)
		if err := path.move(next, evBeginClose); err != nil {
			return nil, nil, err
		}
		if epoch == 0 {
			// Allocated before the record is written: a crash in between
			// leaves an unused epoch, never one used twice.
			var err error
			if epoch, err = e.ledger.Next(context.Background(), ledger.CounterCloseEpoch, 1); err != nil {
				return nil, nil, errorf("allocate close epoch: %w", err)
			}
		}
		next.CloseOrdinal = cur.LastIssued
		next.CloseEpoch = epoch
		closeFence(next, cur.Sub.Generation)
		next.Corroboration = nil
		return next, nil, nil
	})
	if err != nil {
		return CloseReceipt{}, err
	}
	e.emit(key, &path)
	return CloseReceipt{
		Schema:                 SchemaCloseReceipt,
		URI:                    key,
		SessionGeneration:      next.Sub.SessionGeneration,
		SubscriptionGeneration: next.Sub.Generation,
		CloseOrdinal:           next.CloseOrdinal,
		CloseEpoch:             next.CloseEpoch,
		Watermark:              next.Watermark,
		ReadsInFlight:          len(next.Tickets),
		State:                  next.State,
	}, nil
}

// FinishClose records the outcome of resources/unsubscribe: acked moves the
// closing generation to CLOSED; a lost or timed-out ack to
// UNSUBSCRIBE_UNKNOWN, which stays silent and is never reopened.
func (e *Engine) FinishClose(rawURI string, acked bool) (Subscription, error) {
	if acked {
		return e.step(rawURI, evCloseAcked, nil, e.ended)
	}
	return e.step(rawURI, evCloseLost, nil, nil)
}

// closedTold records in path the steps that close cur's generation, where
// the server needs no unsubscribe, as BeginClose then FinishClose (acked)
// take them from wherever its close is: none for a generation closed
// already, or for no generation. It changes nothing: reopen writes the
// close with the next generation.
func closedTold(cur *ledger.Record, path *transitions) error {
	path.reset(cur)
	if cur == nil || cur.Sub == nil {
		return nil
	}
	r := &ledger.Record{State: cur.State, Sub: cur.Sub}
	if cur.CloseEpoch == 0 {
		if err := path.move(r, evBeginClose); err != nil {
			return err
		}
	}
	if r.State == ledger.StateUnsubscribing {
		return path.move(r, evCloseAcked)
	}
	return nil
}

// ResolveUnsubscribe closes an UNSUBSCRIBE_UNKNOWN generation once its outcome
// was reconciled on the same session. (Ending the session closes it too.)
func (e *Engine) ResolveUnsubscribe(rawURI string) (Subscription, error) {
	return e.step(rawURI, evResolveClose, nil, e.ended)
}

// Forget evicts the URI's version and the artifacts derived from it once
// its subscription is closed (or closing: the fence already refuses every
// result of that generation), so Lookup no longer serves text nothing keeps
// fresh. Its outbox entry (ledger.InvalidateForgotten) tells consumers to delete
// what that version fed. The record stays: its fence and generations are
// never reused. An open subscription is refused with a *TransitionError
// (Unsubscribe first, or use Client.Forget); a URI with no record is
// ErrUnknownURI. Forgetting twice does nothing the second time.
func (e *Engine) Forget(rawURI string) error {
	key, err := normalizeKey(rawURI)
	if err != nil {
		return err
	}
	_, _, err = e.update(key, func(cur *ledger.Record) (*ledger.Record, []OutboxEntry, error) {
		switch {
		case cur == nil:
			return nil, nil, fmt.Errorf("%w: %s", ErrUnknownURI, key)
		case cur.Sub != nil && cur.CloseEpoch == 0:
			return nil, nil, &TransitionError{URI: key, From: cur.State, Event: evForget}
		case cur.Current == nil && len(cur.Artifacts) == 0:
			return nil, nil, nil
		}
		next := clone(cur)
		next.Current, next.Artifacts = nil, nil
		c := cur.Current
		if c == nil || c.Status == ledger.VersionTombstoned || c.Status == ledger.VersionRevoked {
			return next, nil, nil // consumers were told to delete it already
		}
		return next, []OutboxEntry{{
			Schema: SchemaInvalidation, URI: key, Reason: ledger.InvalidateForgotten,
			Previous: c.Version, Subject: c.Version.Subject, At: e.now(),
		}}, nil
	})
	return err
}

// endUnknownCloses closes every UNSUBSCRIBE_UNKNOWN generation of a session
// older than gen: its outcome no longer matters once its session is gone.
func (e *Engine) endUnknownCloses(gen uint64) error {
	ctx := context.Background()
	var keys []string
	ended := func(key string, r *ledger.Record) bool {
		if r.State == ledger.StateUnsubscribeUnknown && r.Sub.SessionGeneration < gen {
			keys = append(keys, key)
		}
		return true
	}
	if x, ok := e.ledger.(ledger.Index); ok {
		unknown, recs, err := x.UnknownCloses(ctx)
		if err != nil {
			return err
		}
		for i, key := range unknown {
			if recs[i] != nil {
				ended(key, recs[i])
			}
		}
	} else if err := e.ledger.Range(ctx, ended); err != nil {
		return err
	}
	for _, key := range keys {
		if _, err := e.ResolveUnsubscribe(key); err != nil && !isTransitionError(err) {
			return err
		}
	}
	return nil
}
