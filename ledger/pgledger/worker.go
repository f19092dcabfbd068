package pgledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mcpsync/mcpsync/internal/uri"
	"github.com/mcpsync/mcpsync/ledger"
)

// Shard keeps one worker's share of a set of URIs: the workers sharing a
// fenced ledger split the URIs by rendezvous hashing over the live members
// (Assign), and each keeps the ones assigned to it subscribed through its
// Client. Its leases and membership are renewed every third of the TTL;
// every round it lets go of the URIs whose leases another worker took (the
// ledger already refuses its writes to them) or that are now assigned
// elsewhere (released first, so their new owner need not wait), and takes
// the ones assigned to it that it has not subscribed, whose leases are
// free, expired or its own: AcquireAll raises the epoch, then Subscribe
// opens a new subscription generation and reads it.
//
// A worker whose process dies is no member as soon as PostgreSQL ends its
// sessions (see Members): the next round of each other worker assigns its
// URIs anew and takes them, so a URI is taken over within one round and
// one read. One that hangs, or loses the network, stops renewing: its
// URIs move once its membership and leases expire (LeaseOptions.TTL), so
// within TTL plus one round and one read. A worker that was paused past
// its TTL finds, when it resumes, its writes refused and its leases gone,
// and lets them go.
type Shard struct {
	ledger *Ledger
	client shardClient
	opts   ShardOptions

	mu  sync.Mutex        // protects raw and held
	raw map[string]string // key -> the URI as the source spelled it
	// held is what this shard subscribed and has not let go. The ledger
	// forgets a lease the moment a write is refused for it, so Renew never
	// reports that one lost: every round lets go of what is held here and
	// no longer owned there.
	held map[string]bool
}

// ShardOptions configure a Shard.
type ShardOptions struct {
	// URIs returns the URIs to split between the workers; it is called
	// every Rescan (a scan of the server's resources, say, or a fixed list).
	URIs func(ctx context.Context) ([]string, error)
	// Rescan is how often URIs is called again; 0 means one minute.
	Rescan time.Duration
	// Every is the interval of the rounds that take over the URIs of
	// workers that died; 0 means 500 ms. Leases and membership are renewed
	// every third of the TTL, apart from the rounds.
	Every time.Duration
	// OnError, if set, is told of every failure of a round; the round goes
	// on with the next URI, and the next round tries again.
	OnError func(error)
	// OnChange, if set, is told of every URI taken (owned true) or let go.
	OnChange func(uri string, owned bool)
}

// Client is what a Shard keeps its URIs subscribed through: an
// *mcpsync.Client, whose Subscribe and Unsubscribe return S.
type Client[S any] interface {
	Subscribe(ctx context.Context, uri string) (S, error)
	Unsubscribe(ctx context.Context, uri string) (S, error)
}

// shardClient is a Client whatever it returns.
type shardClient interface {
	subscribe(ctx context.Context, uri string) error
	unsubscribe(ctx context.Context, uri string) error
}

type clientOf[S any] struct{ c Client[S] }

func (c clientOf[S]) subscribe(ctx context.Context, uri string) error {
	_, err := c.c.Subscribe(ctx, uri)
	return err
}

func (c clientOf[S]) unsubscribe(ctx context.Context, uri string) error {
	_, err := c.c.Unsubscribe(ctx, uri)
	return err
}

// NewShard returns the Shard of ledger's worker, keeping what it is
// assigned subscribed through c. The ledger must be fenced (opened with
// LeaseOptions), and c must not resume subscriptions on its own
// (ClientOptions.NoResume): what a worker keeps is decided here.
func NewShard[S any](ledger *Ledger, c Client[S], opts *ShardOptions) (*Shard, error) {
	if _, err := ledger.leasing(); err != nil {
		return nil, err
	}
	var o ShardOptions
	if opts != nil {
		o = *opts
	}
	if o.URIs == nil {
		return nil, errors.New("pgledger: ShardOptions.URIs is required")
	}
	if o.Rescan <= 0 {
		o.Rescan = time.Minute
	}
	if o.Every <= 0 {
		o.Every = 500 * time.Millisecond
	}
	return &Shard{ledger: ledger, client: clientOf[S]{c}, opts: o, raw: map[string]string{}, held: map[string]bool{}}, nil
}

// Run keeps the shard until ctx ends; then it lets every URI go (so other
// workers take them without waiting for the TTL), leaves the membership and
// returns ctx's error. Leases and membership are renewed on a goroutine of
// their own, every third of the TTL, so that no round, however much it has
// to take, lets them expire.
func (s *Shard) Run(ctx context.Context) error {
	renewed := make(chan []string, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	wg.Go(func() { s.renew(rctx, renewed) })

	var lost []string
	rescan := time.Time{}
	ticker := time.NewTicker(s.opts.Every)
	defer ticker.Stop()
	for {
		if time.Since(rescan) >= s.opts.Rescan {
			if err := s.refresh(ctx); err != nil {
				s.report(err)
			} else {
				rescan = time.Now()
			}
		}
		s.round(ctx, lost)
		lost = nil
		select {
		case <-ticker.C:
		case lost = <-renewed:
		case <-ctx.Done():
			stopRenew()
			wg.Wait()
			s.stop()
			return ctx.Err()
		}
	}
}

// renew renews leases and membership every third of the TTL until ctx
// ends, handing the keys it lost to the rounds.
func (s *Shard) renew(ctx context.Context, lost chan<- []string) {
	ticker := time.NewTicker(s.ledger.leases.ttl / 3)
	defer ticker.Stop()
	var pending []string
	for {
		keys, err := s.ledger.Renew(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.report(err)
		case len(keys) > 0:
			pending = append(pending, keys...)
		}
		if len(pending) > 0 {
			select {
			case lost <- pending:
				pending = nil
			default: // the round has not taken the last batch yet
			}
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
	}
}

// stop lets every URI go and leaves, on a context of its own: ctx ended.
func (s *Shard) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owned := s.ledger.Owned()
	s.mu.Lock()
	for key := range s.held {
		owned[key] = 0 // let go too; Release does nothing without the lease
	}
	s.mu.Unlock()
	s.letGoAll(ctx, slices.Collect(maps.Keys(owned)), true)
	if err := s.ledger.Leave(ctx); err != nil {
		s.report(err)
	}
}

// refresh reads the URIs to split again.
func (s *Shard) refresh(ctx context.Context) error {
	uris, err := s.opts.URIs(ctx)
	if err != nil {
		return fmt.Errorf("pgledger: shard: list URIs: %w", err)
	}
	raw := make(map[string]string, len(uris))
	for _, u := range uris {
		key, err := uri.Normalize(u)
		if err != nil {
			s.report(fmt.Errorf("pgledger: shard: %w", err))
			continue
		}
		raw[key] = u
	}
	s.mu.Lock()
	s.raw = raw
	s.mu.Unlock()
	return nil
}

// atOnce bounds the URIs a round subscribes or unsubscribes concurrently:
// each waits on a read or a write of the ledger, over the pool's
// connections.
const atOnce = 16

// takeChunk is how many leases a round acquires at once.
const takeChunk = 4 * atOnce

// round lets go of the lost keys and of those assigned elsewhere, and takes
// those assigned to this worker whose leases are free or expired.
func (s *Shard) round(ctx context.Context, lost []string) {
	owned := s.ledger.Owned()
	s.mu.Lock()
	for key := range s.held {
		if _, ok := owned[key]; !ok && !slices.Contains(lost, key) {
			lost = append(lost, key)
		}
	}
	s.mu.Unlock()
	var gone []string // taken by another worker: only let go
	for _, key := range lost {
		if _, ok := owned[key]; !ok {
			gone = append(gone, key)
		} // else reported lost by an older renewal, and taken again since
	}
	members, err := s.ledger.Members(ctx)
	if err != nil {
		s.report(err)
		s.letGoAll(ctx, gone, false)
		return
	}
	me := s.ledger.Worker()
	if !slices.Contains(members, me) {
		s.letGoAll(ctx, gone, false)
		return // not a member until the next renewal says so
	}
	s.mu.Lock()
	raw := s.raw
	s.mu.Unlock()
	owned = s.ledger.Owned()
	var moved, unlisted []string
	for key := range owned {
		_, listed := raw[key]
		switch {
		case !listed:
			unlisted = append(unlisted, key)
		case s.assigned(key, members) != me:
			moved = append(moved, key)
		}
	}
	// A key assigned to another worker is handed over first, all in one
	// statement, so that worker takes it at its next round however long
	// the unsubscribes take; this worker's writes of it are refused from
	// the release on. A key nobody lists any more is closed first, while
	// the lease still fences it, and released after: nobody takes it over.
	if err := s.ledger.ReleaseAll(ctx, moved); err != nil {
		s.report(err)
		moved = nil // still held: the next round tries again
	}
	s.letGoAll(ctx, append(gone, moved...), false)
	s.letGoAll(ctx, unlisted, true)

	// Wanted: what is assigned here and not subscribed, whether its lease
	// is free or still this worker's (a subscribe that failed, and whose
	// release failed too, leaves the lease held and the URI unread).
	var want []string
	s.mu.Lock()
	for key := range raw {
		if !s.held[key] && s.assigned(key, members) == me {
			want = append(want, key)
		}
	}
	s.mu.Unlock()
	// Taken a chunk at a time, with the membership read again between
	// chunks: a worker that joins meanwhile is not kept waiting until all
	// the rest is taken (the first worker up would otherwise take every
	// key before the others joined).
	for chunk := range slices.Chunk(want, takeChunk) {
		// Leases another worker still holds are left out: that worker
		// lets them go at its next round, or stops renewing them.
		taken, err := s.ledger.AcquireAll(ctx, chunk)
		if err != nil {
			s.report(err)
			return
		}
		s.each(slices.Collect(maps.Keys(taken)), func(key string) { s.take(ctx, key, raw[key]) })
		now, err := s.ledger.Members(ctx)
		if err != nil || !slices.Equal(now, members) {
			return // the next round assigns anew
		}
	}
}

// letGoAll lets every key go, atOnce at a time.
func (s *Shard) letGoAll(ctx context.Context, keys []string, release bool) {
	s.each(keys, func(key string) { s.letGo(ctx, key, release) })
}

// each runs fn for every key, atOnce at a time, and returns when all ran.
func (s *Shard) each(keys []string, fn func(key string)) {
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for _, key := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(key)
		})
	}
	wg.Wait()
}

func (s *Shard) assigned(key string, members []uuid.UUID) uuid.UUID {
	m, _ := Assign(key, members)
	return m
}

// take subscribes key, whose lease this worker just took. A subscribe that
// fails hands the lease back, so that it does not outlive a URI nobody
// reads; a later round tries again.
func (s *Shard) take(ctx context.Context, key, raw string) {
	if err := s.client.subscribe(ctx, raw); err != nil {
		s.report(fmt.Errorf("pgledger: shard: subscribe %s: %w", raw, err))
		if err := s.ledger.Release(ctx, key); err != nil {
			s.report(err)
		}
		return
	}
	s.mu.Lock()
	s.held[key] = true
	s.mu.Unlock()
	if s.opts.OnChange != nil {
		s.opts.OnChange(key, true)
	}
}

// letGo unsubscribes key and, when this worker still holds its lease,
// releases it. Unsubscribe closes the generation while the lease still
// fences it; a URI whose lease was taken is only let go (the client writes
// nothing to a row another worker holds).
func (s *Shard) letGo(ctx context.Context, key string, release bool) {
	s.mu.Lock()
	raw, ok := s.raw[key]
	delete(s.held, key)
	s.mu.Unlock()
	if !ok {
		raw = key
	}
	if err := s.client.unsubscribe(ctx, raw); err != nil && !errors.Is(err, ledger.ErrUnknownURI) {
		s.report(fmt.Errorf("pgledger: shard: unsubscribe %s: %w", raw, err))
	}
	if release {
		if err := s.ledger.Release(ctx, key); err != nil {
			s.report(err)
		}
	}
	if s.opts.OnChange != nil {
		s.opts.OnChange(key, false)
	}
}

func (s *Shard) report(err error) {
	if s.opts.OnError != nil && err != nil {
		s.opts.OnError(err)
	}
}
