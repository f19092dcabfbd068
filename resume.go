package mcpsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mcpsync/mcpsync/ledger"
)

// Resuming after a restart, and waiting for the first reads.
//
// A worker on a durable ledger that restarts finds in it the subscriptions
// its earlier process left open. Connect adopts them as the caller's intent
// (they are watched from the moment Connect returns, so an Unsubscribe
// cannot race them), opens each in the new session, a new subscription
// generation whose fence starts afresh, and reads it with
// ledger.TriggerReconnect: reads the earlier process issued can never pass,
// since every identity they carry was allocated by the ledger and is never
// handed out again.
//
// A resource deleted while no process watched is found by that read (a
// fenced not-found, TOMBSTONE_PENDING); once every resumed URI has had its
// read, the client scans the server's resources and reconciles the catalog,
// which confirms the tombstone when it may, under the deletion rules: a
// catalog that began after the not-found and proves the URI absent.

// adopt registers as watched every subscription an earlier session left open
// in the engine's ledger for this client's subject and ServerID, and returns
// their keys. Subscriptions of another subject or another server are left
// alone: reading them here would prove nothing about them. So are those of
// a session whose engine a live Client of this process drives: they are
// not left open, they are kept. (Processes sharing a ledger split it with
// leases: pgledger.Shard.)
func (c *Client) adopt(conn *connection) ([]string, error) {
	// The ledger is read first: a durable one does I/O, and c.mu is never
	// held across it.
	var open []Subscription
	others := map[string]int{} // subscriptions of this subject on other servers
	for sub, err := range c.engine.ResumableSubscriptions() {
		if err != nil {
			return nil, errorf("resume: %w", err)
		}
		if sub.Subject != c.opts.Subject {
			continue
		}
		if id := serverOf(sub); id != conn.caps.ServerID {
			others[id]++
			continue
		}
		if e := sub.Capabilities.Engine; e != c.engine.id {
			if _, live := drivenEngines.Load(e); live {
				continue // another engine's client of this process keeps it
			}
		}
		open = append(open, sub)
	}
	if len(others) > 0 && c.opts.Logger != nil {
		// A server that renamed itself, or a ServerID that changed, leaves
		// its subscriptions unresumed: say so rather than stay silent.
		c.opts.Logger.Warn("mcpsync: subscriptions left open for other servers are not resumed",
			"server", conn.caps.ServerID, "others", others)
	}
	var keys []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sub := range open {
		if _, ok := c.watches[sub.URI]; ok {
			continue
		}
		raw := sub.RawURI
		if raw == "" {
			raw = sub.URI
		}
		w := newWatch(sub.URI, raw, c.epochs[sub.URI]+1)
		w.opened, w.kept = true, true // its earlier process's, read anew with ledger.TriggerReconnect
		c.watches[sub.URI] = w
		keys = append(keys, sub.URI)
	}
	return keys, nil
}

// serverOf is the ServerID sub was opened with: the server's name for a
// subscription recorded before ServerID was.
func serverOf(sub Subscription) string {
	if sub.Capabilities.ServerID != "" {
		return sub.Capabilities.ServerID
	}
	return sub.Server.Name
}

// resume opens the adopted keys in the current session, waits for their
// first reads and reconciles a fresh catalog of the server's resources, so
// that a deletion during the downtime reaches the outbox.
func (c *Client) resume(keys []string) {
	if err := c.engine.refuseRevoked(c.opts.Subject); err != nil {
		c.report(errorf("resume: %w", err)) // WaitForSync says so too
		return
	}
	for _, key := range keys {
		c.mark(key)
	}
	if c.opts.Logger != nil {
		c.opts.Logger.Info("mcpsync: resumed subscriptions", "count", len(keys))
	}
	// Each round waits until every resumed URI settled (a 2026-07-28
	// stream replacement re-reads what it carried, so a URI found
	// not-found may be read again; deciding on it mid-read would miss its
	// deletion), then
	// scans and reconciles if one of them waits for evidence. Its newest
	// not-found may postdate the scan, so rounds go on, after a growing
	// pause, until none waits.
	pause := c.retry.exponential()
	for {
		if err := c.waitSynced(c.ctx, keys); err != nil {
			return // closing, or the session failed: nothing to reconcile on
		}
		missing, err := c.awaitEvidence(c.ctx, keys)
		if err != nil {
			return
		}
		conn, err := c.current()
		if err != nil || !missing || !conn.caps.Resources {
			return
		}
		cat, err := c.Scan(c.ctx, KindResources)
		if err == nil {
			_, err = c.Reconcile(cat)
		}
		if err != nil && c.ctx.Err() == nil && !errors.Is(err, ErrIllegalTransition) {
			c.report(errorf("resume: reconcile: %w", err))
		}
		if !c.wait(pause.NextBackOff()) {
			return
		}
	}
}

// awaitEvidence waits until it has seen each of keys settled, not between
// a read and its answer, and reports whether one of them waits for deletion
// evidence (TOMBSTONE_PENDING, RECONCILIATION_REQUIRED) when it was seen.
// A URI no longer watched is settled.
func (c *Client) awaitEvidence(ctx context.Context, keys []string) (bool, error) {
	keys = slices.Clone(keys)
	missing := false
	for {
		wake := c.progress.wait()
		keys = slices.DeleteFunc(keys, func(key string) bool {
			c.mu.Lock()
			_, watched := c.watches[key]
			c.mu.Unlock()
			sub, err := c.engine.Subscription(key)
			if !watched || err != nil {
				return true
			}
			switch sub.State {
			case ledger.StateDiscovered, ledger.StateSubscribing, ledger.StateUpdateSeen, ledger.StateReadPending:
				return false
			case ledger.StateTombstonePending, ledger.StateReconciliationRequired:
				missing = true
			}
			return true
		})
		if len(keys) == 0 {
			return missing, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// WaitForSync returns once every URI watched when it was called has had a
// read accepted in a subscription generation of the current session: a
// first version, or a definite answer (not found, quarantined). A URI
// unsubscribed meanwhile no longer counts. With a kept scan running
// (KeepScanning), the URIs its first successful listing subscribes count
// too: WaitForSync waits for that listing first (a failed one is told to
// OnError and does not count), or for the kept scan to stop; a kept scan
// whose first scan was put off (KeepScanOptions.After) is not waited for.
// With a Handler, it returns once the handler was also told of those URIs:
// their first versions, as added.
// It returns ctx's error when ctx ends first, ErrClientClosed when the
// client closes, the reason when healing gave up on the connection, and
// ErrRevoked once the client's subject is revoked.
//
// Called from a callback (a Handler, OnError, OnOutcome), it would wait for
// the goroutine it runs on: it returns ctx's error once ctx ends.
func (c *Client) WaitForSync(ctx context.Context) error {
	c.mu.Lock()
	listed := c.keepListed
	c.mu.Unlock()
	if listed != nil {
		if err := c.waitListed(ctx, listed.Done()); err != nil {
			return err
		}
	}
	c.mu.Lock()
	keys := make([]string, 0, len(c.watches))
	for key := range c.watches {
		keys = append(keys, key)
	}
	c.mu.Unlock()
	slices.Sort(keys)
	err := c.waitSynced(ctx, keys)
	if c.opts.Handler == nil || !c.syncedOrRefused(ctx, err) {
		return err
	}
	// Each key's first version may have been accepted after its mark was
	// queued, or its mark may still be on its way: the handler is told
	// of each key by a sweep queued behind every mark made so far.
	select {
	case <-c.syncHandler(keys):
		return err
	case <-c.stopped:
		return ErrClientClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncedOrRefused reports whether err, what waitSynced returned, says the
// keys synced: nil, or the refusals of their servers' answers.
func (c *Client) syncedOrRefused(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil, errors.Is(err, ErrClientClosed), errors.Is(err, ErrReconnectGaveUp), errors.Is(err, ErrRevoked):
		return false
	}
	return true
}

// noteRefusal remembers, or forgets, that key's last answered read was
// refused for what the server answered.
func (c *Client) noteRefusal(key string, out Outcome, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case out.Accepted:
		delete(c.refused, key)
	case errors.Is(err, ErrURIMismatch), errors.Is(err, ErrInvalidContent), errors.Is(err, ErrEmptyContents):
		c.refused[key] = err
	}
}

// waitSynced is WaitForSync for keys. It checks the keys in order and
// remembers how far it got, so each key is found synced once: waiting costs
// O(keys + wake-ups), not O(keys) per wake-up.
func (c *Client) waitSynced(ctx context.Context, keys []string) error {
	var refusals []error
	for {
		wake := c.progress.wait()
		gen, err := c.syncable()
		if err != nil {
			return err
		}
		for len(keys) > 0 {
			ok, refused := c.synced(keys[0], gen)
			if !ok {
				break
			}
			if refused != nil {
				refusals = append(refusals, errorf("%s: %w", keys[0], refused))
			}
			keys = keys[1:]
		}
		if len(keys) == 0 {
			return errors.Join(refusals...)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// syncable returns the current session's generation, or why nothing will
// sync any more: the client closed, healing gave up, or the subject was
// revoked (no read of it will ever pass the fence).
func (c *Client) syncable() (uint64, error) {
	c.mu.Lock()
	closed, state, reason, gen := c.closed, c.health.State, c.health.Reason, c.conn.gen
	c.mu.Unlock()
	switch {
	case closed:
		return 0, ErrClientClosed
	case state == ConnectionFailed:
		return 0, fmt.Errorf("%w: %s", ErrReconnectGaveUp, reason)
	}
	return gen, c.engine.refuseRevoked(c.opts.Subject)
}

// waitListed waits until listed is closed (a kept scan's first listing),
// failing as waitSynced does.
func (c *Client) waitListed(ctx context.Context, listed <-chan struct{}) error {
	for {
		wake := c.progress.wait()
		if _, err := c.syncable(); err != nil {
			return err
		}
		select {
		case <-listed:
			return nil
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// synced reports whether key is no longer watched or has had a read
// accepted in its subscription generation of session gen, or its last
// read's answer was refused (which it returns).
func (c *Client) synced(key string, gen uint64) (bool, error) {
	c.mu.Lock()
	_, watched := c.watches[key]
	refused := c.refused[key]
	c.mu.Unlock()
	if !watched {
		return true, nil
	}
	sub, err := c.engine.Subscription(key)
	if err != nil || sub.SessionGeneration != gen {
		return false, nil
	}
	switch sub.State {
	case ledger.StateTombstonePending, ledger.StateTombstoned, ledger.StateReconciliationRequired:
		return true, nil
	}
	if sub.State.Open() && sub.Watermark > 0 {
		return true, nil
	}
	return refused != nil, refused
}

// signal wakes every goroutine waiting for the next change; it allocates
// only while someone waits.
type signal struct {
	mu sync.Mutex    // protects ch
	ch chan struct{} // closed by the next notify; nil while nobody waits
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// keyedSignal is a signal per key: a waiter on one key is not woken by
// the others (a Subscribe waiting for its first read, among many).
type keyedSignal struct {
	mu sync.Mutex // protects ch
	ch map[string]chan struct{}
}

func (s *keyedSignal) wait(key string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(map[string]chan struct{})
	}
	ch := s.ch[key]
	if ch == nil {
		ch = make(chan struct{})
		s.ch[key] = ch
	}
	return ch
}

func (s *keyedSignal) notify(key string) {
	s.mu.Lock()
	if ch := s.ch[key]; ch != nil {
		close(ch)
		delete(s.ch, key)
	}
	s.mu.Unlock()
}
