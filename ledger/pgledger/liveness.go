package pgledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpsync/mcpsync/ledger"
)

// liveness is a fenced ledger's proof of life: a session advisory lock,
// under a random key, held on a connection of its own that runs nothing
// else. PostgreSQL frees the lock the moment that session ends, as it does
// when the process dies, so the other workers know a killed worker is gone
// without waiting for its leases to expire (see gone in the schema).
// A worker whose connection was ended while it lives locks a new key at
// its next Renew; meanwhile the others may take its leases, and its
// writes are refused by their epochs.
type liveness struct {
	l *Ledger

	mu     sync.Mutex // protects conn, key and closed
	conn   *pgx.Conn
	key    int64
	closed bool // by close: no new session
}

// ensure returns the key this ledger's lock is held under, connecting and
// locking anew when the connection is gone.
func (v *liveness) ensure(ctx context.Context) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return 0, ledger.ErrLedgerClosed
	}
	if v.conn != nil {
		// On a context of its own: a caller giving up must not end the
		// session (pgx closes a connection whose query it cancels).
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
		err := v.conn.Ping(pctx)
		cancel()
		if err == nil {
			return v.key, nil
		}
		v.closeLocked()
	}
	// Made by the pool, with its hooks, then the lock's own.
	pc, err := v.l.control.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgledger: liveness: %w", err)
	}
	conn := pc.Hijack()
	for {
		key := rand.Int64() // non-negative: the schema splits it into two OIDs
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&locked); err != nil {
			closeConn(conn)
			return 0, fmt.Errorf("pgledger: liveness: %w", err)
		}
		if !locked {
			continue
		}
		// Named in the membership at once, not at the next Renew: a
		// restarted worker (the same identity) would look dead until then,
		// its new leases taken as soon as acquired.
		if _, err := conn.Exec(ctx, v.l.q.aliveLock, v.l.leases.worker, key); err != nil {
			closeConn(conn)
			return 0, fmt.Errorf("pgledger: liveness: %w", err)
		}
		v.conn, v.key = conn, key
		return key, nil
	}
}

// pingTimeout bounds the check that the session still stands.
const pingTimeout = 5 * time.Second

// close ends the session, freeing the lock, for good: the ledger is
// closed.
func (v *liveness) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	v.closeLocked()
}

func (v *liveness) closeLocked() {
	if v.conn != nil {
		closeConn(v.conn)
		v.conn = nil
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}
