package pgledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mcpsync/mcpsync/ledger"
)

// Lease errors.
var (
	// ErrNotLeaseholder: a fenced CompareAndSwap of a key whose lease this
	// worker does not hold at the epoch it took it with. Nothing was
	// written. Every such refusal is a *LeaseError. It is the engine's
	// ledger.ErrNotLeaseholder, on which the engine and the client let
	// such a URI go.
	ErrNotLeaseholder = ledger.ErrNotLeaseholder
	// ErrLeaseHeld: Acquire of a lease another worker holds and has not let
	// expire.
	ErrLeaseHeld = errors.New("pgledger: lease held by another worker")
)

// fencedSQLState is the SQLSTATE compare_and_swap raises when the lease
// check fails.
const fencedSQLState = "MCF01"

// DefaultLeaseTTL is how long a lease and a membership last without Renew
// when LeaseOptions does not say.
const DefaultLeaseTTL = 15 * time.Second

// LeaseOptions make a ledger fenced: every CompareAndSwap of a key requires,
// in its transaction, that this worker holds the key's lease at the epoch
// Acquire took it with.
type LeaseOptions struct {
	// Worker is this worker's identity; the zero UUID means a new random
	// one. Two ledgers must never share one.
	Worker uuid.UUID
	// TTL is how long a lease (and this worker's membership) lasts past
	// the last Acquire or Renew; 0 means DefaultLeaseTTL. Only other
	// workers read it: an expired lease still lets its holder write until
	// another worker takes it.
	TTL time.Duration
}

// LeaseError is a write refused by the fence: Worker did not hold the lease
// of Key at Epoch (0: it never took it).
type LeaseError struct {
	Key    string
	Worker uuid.UUID
	Epoch  uint64
}

func (e *LeaseError) Error() string {
	if e.Epoch == 0 {
		return fmt.Sprintf("pgledger: %s: worker %s holds no lease of it", e.Key, e.Worker)
	}
	return fmt.Sprintf("pgledger: %s: lease taken from worker %s (epoch %d)", e.Key, e.Worker, e.Epoch)
}

// Is makes every LeaseError match ErrNotLeaseholder.
func (e *LeaseError) Is(target error) bool { return target == ErrNotLeaseholder }

// leases is a fenced ledger's side: the leases this worker took.
type leases struct {
	worker uuid.UUID
	ttl    time.Duration

	mu    sync.Mutex        // protects owned, acquiring and dropped
	owned map[string]uint64 // key -> the epoch this worker took it at
	// acquiring counts, by key, the AcquireAll calls in flight; dropped
	// marks the keys among them that were released or lost meanwhile,
	// whose acquisition is then not recorded: which statement the
	// database ran last is unknown, and a lease believed held must be.
	acquiring map[string]int
	dropped   map[string]bool
}

func newLeases(o LeaseOptions) (*leases, error) {
	if o.Worker == uuid.Nil {
		id, err := uuid.NewRandom()
		if err != nil {
			return nil, fmt.Errorf("pgledger: worker identity: %w", err)
		}
		o.Worker = id
	}
	if o.TTL < 0 {
		return nil, errors.New("pgledger: negative lease TTL")
	}
	if o.TTL == 0 {
		o.TTL = DefaultLeaseTTL
	}
	return &leases{worker: o.Worker, ttl: o.TTL, owned: map[string]uint64{},
		acquiring: map[string]int{}, dropped: map[string]bool{}}, nil
}

func (s *leases) epoch(key string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.owned[key]
	return e, ok
}

// keep records key as held at epoch again, unless it was taken since.
func (s *leases) keep(key string, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owned[key]; !ok {
		s.owned[key] = epoch
	}
}

// lose forgets key's lease if it is still held at epoch.
func (s *leases) lose(key string, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLocked(key, epoch)
}

func (s *leases) loseLocked(key string, epoch uint64) {
	if s.owned[key] == epoch {
		delete(s.owned, key)
	}
	if s.acquiring[key] > 0 {
		s.dropped[key] = true
	}
}

// fence returns the lease owner and epoch a CompareAndSwap of key passes to
// compare_and_swap: NULLs on an unfenced ledger.
func (l *Ledger) fence(key string) (int64, error) {
	if l.leases == nil {
		return 0, nil
	}
	epoch, ok := l.leases.epoch(key)
	if !ok {
		return 0, &LeaseError{Key: key, Worker: l.leases.worker}
	}
	return int64(epoch), nil
}

// lost forgets the lease of key at epoch, which a write found another
// worker took, and returns the *LeaseError that refuses the write.
func (l *Ledger) lost(key string, epoch int64) error {
	l.leases.lose(key, uint64(epoch))
	return &LeaseError{Key: key, Worker: l.leases.worker, Epoch: uint64(epoch)}
}

func (l *Ledger) leasing() (*leases, error) {
	if l.leases == nil {
		return nil, errors.New("pgledger: ledger opened without LeaseOptions")
	}
	return l.leases, nil
}

// Worker returns the identity this ledger's leases are held under, or the
// zero UUID when it is not fenced.
func (l *Ledger) Worker() uuid.UUID {
	if l.leases == nil {
		return uuid.Nil
	}
	return l.leases.worker
}

// Acquire takes the lease of key for TTL and returns its epoch. A lease
// nobody holds starts at epoch 1; one that expired, or that was released,
// is taken at its epoch plus one, which fences every write its previous
// holder still has in flight or will attempt: the database's clock decides
// expiry, and the epoch decides writes. Acquiring a lease this worker holds
// extends it and keeps its epoch. A lease another worker holds and has not
// let expire is refused with ErrLeaseHeld.
func (l *Ledger) Acquire(ctx context.Context, key string) (uint64, error) {
	taken, err := l.AcquireAll(ctx, []string{key})
	if err != nil {
		return 0, err
	}
	epoch, ok := taken[key]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrLeaseHeld, key)
	}
	return epoch, nil
}

// AcquireAll is Acquire of every key in one statement: it returns the
// epochs of the leases it took or extended, and leaves out those another
// worker holds.
func (l *Ledger) AcquireAll(ctx context.Context, keys []string) (map[string]uint64, error) {
	s, err := l.leasing()
	if err != nil {
		return nil, err
	}
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	// In key order, as every statement locks leases: new keys are
	// inserted in the order given, and an insert waits for another
	// transaction's insert of the same key.
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	held := make([]int64, len(keys)) // 0, which no epoch is, where not held
	s.mu.Lock()
	for i, k := range keys {
		held[i] = int64(s.owned[k])
		s.acquiring[k]++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range keys {
			if s.acquiring[k]--; s.acquiring[k] == 0 {
				delete(s.acquiring, k)
				delete(s.dropped, k)
			}
		}
	}()
	taken := make(map[string]uint64, len(keys))
	err = pgx.BeginFunc(ctx, l.control, func(tx pgx.Tx) error {
		clear(taken)
		if _, err := tx.Exec(ctx, l.q.lockKeys, keys); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, l.q.acquire, keys, s.worker, s.ttl.Microseconds(), held)
		if err != nil {
			return err
		}
		var key string
		var epoch int64
		_, err = pgx.ForEachRow(rows, []any{&key, &epoch}, func() error {
			taken[key] = uint64(epoch)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: acquire: %w", err)
	}
	s.mu.Lock()
	for k, e := range taken {
		// Released or lost meanwhile: as if this acquire came first, it
		// returns the lease, which is not believed held.
		if !s.dropped[k] {
			s.owned[k] = e
		}
	}
	s.mu.Unlock()
	return taken, nil
}

// Renew extends every lease this worker holds and its membership (see
// Members) by TTL, and returns the keys whose leases another worker took
// since, which it no longer holds. A worker renews well within TTL; one
// that does not (paused, partitioned) may lose its leases, and then its
// writes to those keys are refused.
func (l *Ledger) Renew(ctx context.Context) (lost []string, err error) {
	s, err := l.leasing()
	if err != nil {
		return nil, err
	}
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	owned := maps.Clone(s.owned)
	s.mu.Unlock()
	keys := make([]string, 0, len(owned))
	epochs := make([]int64, 0, len(owned))
	for k, e := range owned {
		keys, epochs = append(keys, k), append(epochs, int64(e))
	}
	alive, err := l.alive.ensure(ctx)
	if err != nil {
		return nil, err
	}
	renewed := map[string]bool{}
	err = pgx.BeginFunc(ctx, l.control, func(tx pgx.Tx) error {
		clear(renewed)
		if _, err := tx.Exec(ctx, l.q.heartbeat, s.worker, alive); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.lockOwn, keys, s.worker); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, l.q.renew, s.worker, s.ttl.Microseconds(), keys, epochs)
		if err != nil {
			return err
		}
		var key string
		_, err = pgx.ForEachRow(rows, []any{&key}, func() error {
			renewed[key] = true
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: renew: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range owned {
		// Lost only if still held as when the renewal began: one released
		// meanwhile was let go here, not taken.
		if !renewed[k] && s.owned[k] == e {
			s.loseLocked(k, e)
			lost = append(lost, k)
		}
	}
	return lost, nil
}

// Release gives up the lease of key: it expires at once, and the next
// worker to acquire it raises its epoch. Writes of key are refused from
// now on.
func (l *Ledger) Release(ctx context.Context, key string) error {
	return l.ReleaseAll(ctx, []string{key})
}

// ReleaseAll is Release of every key in one statement; keys this worker
// does not hold are passed over.
func (l *Ledger) ReleaseAll(ctx context.Context, keys []string) error {
	s, err := l.leasing()
	if err != nil {
		return err
	}
	var names []string
	var epochs []int64
	for _, k := range keys {
		if e, ok := s.epoch(k); ok && !slices.Contains(names, k) {
			names, epochs = append(names, k), append(epochs, int64(e))
		}
	}
	if len(names) == 0 {
		return nil
	}
	// Forgotten first, so no write of this worker's starts on them
	// meanwhile; kept again if the release did not reach the database, so
	// that a retry releases them and this worker may still write, and take
	// them again.
	for i, k := range names {
		s.lose(k, uint64(epochs[i]))
	}
	err = l.usable(ctx)
	if err == nil {
		err = pgx.BeginFunc(ctx, l.control, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, l.q.lockOwn, names, s.worker); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, l.q.release, names, s.worker, epochs)
			return err
		})
		if err != nil {
			err = fmt.Errorf("pgledger: release: %w", err)
		}
	}
	if err != nil {
		for i, k := range names {
			s.keep(k, uint64(epochs[i]))
		}
	}
	return err
}

// Owned returns the leases this worker holds, as far as it knows: key to
// epoch. A lease another worker took shows as lost at the next Renew or
// refused write.
func (l *Ledger) Owned() map[string]uint64 {
	if l.leases == nil {
		return map[string]uint64{}
	}
	l.leases.mu.Lock()
	defer l.leases.mu.Unlock()
	return maps.Clone(l.leases.owned)
}

// Lease is a key's lease as the database holds it.
type Lease struct {
	Owner     uuid.UUID
	Epoch     uint64
	ExpiresAt time.Time // -infinity once released: the zero time
	// Live says the lease had not expired, by the database's clock, and
	// its owner was not known dead (see Members) when it was read: its
	// owner may write the key.
	Live bool
}

// Leases returns every key's lease, fenced ledger or not: who holds what,
// for operators and tests.
func (l *Ledger) Leases(ctx context.Context) (map[string]Lease, error) {
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, l.q.leases)
	if err != nil {
		return nil, fmt.Errorf("pgledger: leases: %w", err)
	}
	out := map[string]Lease{}
	var key string
	var epoch int64
	var expires pgtype.Timestamptz
	var ls Lease
	_, err = pgx.ForEachRow(rows, []any{&key, &ls.Owner, &epoch, &expires, &ls.Live}, func() error {
		ls.Epoch, ls.ExpiresAt = uint64(epoch), time.Time{}
		if expires.InfinityModifier == pgtype.Finite {
			ls.ExpiresAt = expires.Time
		}
		out[key] = ls
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgledger: leases: %w", err)
	}
	return out, nil
}

// Members returns the workers whose membership has not expired (their
// last Renew was within their TTL, as this worker's TTL counts it) and
// whose process is not known dead, in UUID order. A fenced ledger holds a
// lock in a database session of its own for as long as it is open; when
// its process dies, PostgreSQL ends that session, and from then on the
// worker is no member, and its leases are taken as if they had expired.
// That is safe whether or not it is really dead (its session may have
// been ended while it lives): the epochs fence its writes. Such a worker
// locks anew, and is a member again, at its next Renew.
func (l *Ledger) Members(ctx context.Context) ([]uuid.UUID, error) {
	s, err := l.leasing()
	if err != nil {
		return nil, err
	}
	if err := l.usable(ctx); err != nil {
		return nil, err
	}
	rows, err := l.control.Query(ctx, l.q.members, s.ttl.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("pgledger: members: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("pgledger: members: %w", err)
	}
	return out, nil
}

// Leave ends this worker's membership at once, so that the others
// reassign its keys without waiting for it to expire. Its leases are not
// released: the workers that take them over raise their epochs.
func (l *Ledger) Leave(ctx context.Context) error {
	s, err := l.leasing()
	if err != nil {
		return err
	}
	if err := l.usable(ctx); err != nil {
		return err
	}
	if _, err := l.control.Exec(ctx, l.q.leave, s.worker); err != nil {
		return fmt.Errorf("pgledger: leave: %w", err)
	}
	return nil
}

// Assign returns the member that should hold key's lease: the one with the
// highest rendezvous score for it. When a member joins, only the keys it
// now scores highest for move (to it); when one leaves, only its keys move.
// It returns false when there is no member.
func Assign(key string, members []uuid.UUID) (uuid.UUID, bool) {
	var best uuid.UUID
	var top uint64
	found := false
	for _, m := range members {
		if s := rendezvous(m, key); !found || s > top || s == top && string(m[:]) > string(best[:]) {
			best, top, found = m, s, true
		}
	}
	return best, found
}

// Assigned returns the keys, of those given, that Assign gives this worker
// among the live Members: the leases it should hold. A worker acquires
// those it does not hold and releases those it holds and is no longer
// assigned.
func (l *Ledger) Assigned(ctx context.Context, keys []string) ([]string, error) {
	members, err := l.Members(ctx)
	if err != nil {
		return nil, err
	}
	// Until its first Renew a worker is not a member, yet it is live.
	if !slices.Contains(members, l.leases.worker) {
		members = append(members, l.leases.worker)
	}
	var mine []string
	for _, k := range keys {
		if m, _ := Assign(k, members); m == l.leases.worker {
			mine = append(mine, k)
		}
	}
	return mine, nil
}

// rendezvous scores worker for key: FNV-1a of both, then a 64-bit
// finalizer so that close inputs spread over the whole range.
func rendezvous(worker uuid.UUID, key string) uint64 {
	h := fnv.New64a()
	h.Write(worker[:])
	h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// leaseQueries are the lease statements in the ledger's schema.
func leaseQueries(n names, q *queries) {
	// The statements that change many leases lock them first, in key
	// order, as compare_and_swap_all does: two of them, or one and a batch
	// of writes, never wait on each other in a circle.
	q.lockOwn = n.expand(`SELECT FROM {{schema}}.leases WHERE key = ANY($1) AND owner = $2 ORDER BY key FOR UPDATE`)
	// Every row of the keys, not only the ones takeable now: one that
	// turns takeable before the acquire runs is locked then, out of order.
	q.lockKeys = n.expand(`SELECT FROM {{schema}}.leases WHERE key = ANY($1) ORDER BY key FOR UPDATE`)
	// A lease is taken when nobody holds it, when it expired, or when this
	// worker holds it at the epoch given for it (then it keeps its epoch);
	// anything else returns no row for its key. A key inserted by another
	// worker since this statement's snapshot is left to that worker.
	q.acquire = n.expand(`WITH h AS (SELECT * FROM unnest($1::text[], $4::bigint[]) AS h (key, held)),
		taken AS (
			UPDATE {{schema}}.leases AS l SET
				owner = $2,
				epoch = CASE WHEN l.owner = $2 AND l.epoch = h.held THEN l.epoch ELSE l.epoch + 1 END,
				expires_at = now() + $3 * interval '1 microsecond'
			FROM h
			WHERE l.key = h.key AND ((l.owner = $2 AND l.epoch = h.held) OR l.expires_at <= now()
				OR l.owner IN (SELECT {{schema}}.gone()))
			RETURNING l.key, l.epoch),
		fresh AS (
			INSERT INTO {{schema}}.leases (key, owner, epoch, expires_at)
			SELECT h.key, $2, 1, now() + $3 * interval '1 microsecond' FROM h
			WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.leases AS l WHERE l.key = h.key)
			ORDER BY h.key
			ON CONFLICT (key) DO NOTHING
			RETURNING key, epoch)
		SELECT key, epoch FROM taken UNION ALL SELECT key, epoch FROM fresh`)
	// A released lease stays released: a renewal that began before the
	// release must not extend it.
	q.renew = n.expand(`UPDATE {{schema}}.leases AS l SET expires_at = now() + $2 * interval '1 microsecond'
		FROM unnest($3::text[], $4::bigint[]) AS h (key, epoch)
		WHERE l.key = h.key AND l.epoch = h.epoch AND l.owner = $1 AND l.expires_at > '-infinity'
		RETURNING l.key`)
	q.aliveLock = n.expand(`UPDATE {{schema}}.members SET alive_lock = $2 WHERE worker = $1`)
	q.heartbeat = n.expand(`INSERT INTO {{schema}}.members (worker, heartbeat_at, alive_lock) VALUES ($1, now(), $2)
		ON CONFLICT (worker) DO UPDATE SET heartbeat_at = now(), alive_lock = $2`)
	q.release = n.expand(`UPDATE {{schema}}.leases AS l SET expires_at = '-infinity'
		FROM unnest($1::text[], $3::bigint[]) AS h (key, epoch)
		WHERE l.key = h.key AND l.owner = $2 AND l.epoch = h.epoch`)
	q.members = n.expand(`SELECT worker FROM {{schema}}.members
		WHERE heartbeat_at > now() - $1 * interval '1 microsecond' AND worker NOT IN (SELECT {{schema}}.gone())
		ORDER BY worker`)
	q.leases = n.expand(`SELECT key, owner, epoch, expires_at, expires_at > now() AND owner NOT IN (SELECT {{schema}}.gone())
		FROM {{schema}}.leases`)
	q.leave = n.expand(`DELETE FROM {{schema}}.members WHERE worker = $1`)
}
