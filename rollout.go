package mcpsync

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mcpsync/mcpsync/ledger"
)

// Rollout controls, in the order a rollout uses them.
// First, shadow: a Client runs discovery, ordinals and the close fence beside
// the caller's own read path, which keeps serving, and an Observer of
// package shadow reports where the library would have refused or served
// something else. Then refresh for a stable fraction of subscriptions
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
	Skipped map[ledger.Trigger]uint64 `json:"skipped"`
}

// rollout is a Client's gradual enablement state.
type rollout struct {
	fraction atomic.Pointer[float64] // nil means 1: every subscription refreshes

	mu      sync.Mutex                // protects skipped
	skipped map[ledger.Trigger]uint64 // reads left out, by trigger
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
func (c *Client) skipRefresh(key string, trigger ledger.Trigger) bool {
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
		r.skipped = make(map[ledger.Trigger]uint64)
	}
	r.skipped[trigger]++
	r.mu.Unlock()
	return true
}

// Rollout reports the refresh fraction and how many of the client's open
// subscriptions are inside and outside it.
func (c *Client) Rollout() RolloutStatus {
	f := c.refreshFraction()
	s := RolloutStatus{Schema: SchemaRolloutStatus, RefreshFraction: f, Skipped: map[ledger.Trigger]uint64{}}
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
