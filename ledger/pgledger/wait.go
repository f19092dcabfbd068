package pgledger

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcpsync/mcpsync/ledger"
)

// Pauses between attempts to listen again after the listening connection
// failed: doubling from the first to the last.
const (
	relistenFirst = 50 * time.Millisecond
	relistenLast  = 5 * time.Second
)

// waiter wakes WaitOutbox callers on the notifications appends send. One
// goroutine, started by the first WaitOutbox, holds a connection of its own
// listening on the schema's channel, and listens again on a new one when
// that connection fails, until Close.
type waiter struct {
	l      *Ledger
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   sync.WaitGroup // the listening goroutine

	mu      sync.Mutex // protects every field below
	started bool       // the listening goroutine was started
	stopped bool       // Close ran: start none
	// session counts the LISTENs that took effect, and ready says one is in
	// force now: every append that commits after a read made while session
	// s is in force is announced to it, or s ends (ready changes).
	session uint64
	ready   bool
	seen    uint64        // the highest entry number announced
	wake    chan struct{} // closed, and replaced, at every announcement and every change of ready
}

func (w *waiter) init(l *Ledger) {
	w.l = l
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wake = make(chan struct{})
}

// ensure starts the listening goroutine unless it runs or Close ran.
func (w *waiter) ensure() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.stopped {
		return
	}
	w.started = true
	w.done.Add(1)
	go w.run()
}

// stop ends the listening goroutine and waits for it.
func (w *waiter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	w.done.Wait()
}

// broadcastLocked wakes every waiter.
func (w *waiter) broadcastLocked() {
	close(w.wake)
	w.wake = make(chan struct{})
}

func (w *waiter) setReady(ready bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ready {
		w.session++
	}
	w.ready = ready
	w.broadcastLocked()
}

func (w *waiter) announce(last uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = max(w.seen, last)
	w.broadcastLocked()
}

func (w *waiter) run() {
	defer w.done.Done()
	pause := relistenFirst
	for {
		listened := w.listen()
		if w.ctx.Err() != nil {
			return
		}
		if listened {
			pause = relistenFirst
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return
		}
		pause = min(2*pause, relistenLast)
	}
}

// listen connects, listens, and announces every notification until the
// connection fails or Close; it reports whether the LISTEN took effect.
func (w *waiter) listen() bool {
	// The connection is made by the pool, with its hooks (BeforeConnect
	// sets credentials that rotate, say), and then is the listener's own.
	pc, err := w.l.pool.Acquire(w.ctx)
	if err != nil {
		return false
	}
	conn := pc.Hijack()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(ctx)
	}()
	if _, err := conn.Exec(w.ctx, "LISTEN "+pgx.Identifier{w.l.names.channel}.Sanitize()); err != nil {
		return false
	}
	w.setReady(true)
	defer w.setReady(false)
	for {
		n, err := conn.WaitForNotification(w.ctx)
		if err != nil {
			return true
		}
		// The payload is the newest number the commit appended.
		if last, err := strconv.ParseUint(n.Payload, 10, 64); err == nil {
			w.announce(last)
		}
	}
}

// WaitOutbox implements ledger.Ledger: it sleeps until a notification
// announces an entry above after, reading the outbox when it starts and
// once per LISTEN in force (so an append that committed before the wait
// started returns at once, even while no LISTEN can be made, and one after
// it is announced). It never polls.
func (l *Ledger) WaitOutbox(ctx context.Context, after uint64) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	w := &l.wait
	w.ensure()
	var checked uint64 // the session whose LISTEN was in force at the last read
	first := true
	for {
		w.mu.Lock()
		wake, ready, session, seen := w.wake, w.ready, w.session, w.seen
		w.mu.Unlock()
		if seen > after {
			return nil
		}
		if first || ready && session != checked {
			first = false
			var last int64
			if err := l.pool.QueryRow(ctx, l.q.last).Scan(&last); err != nil {
				if err := l.usable(ctx); err != nil {
					return err
				}
				return fmt.Errorf("pgledger: wait outbox: %w", err)
			}
			if uint64(last) > after {
				return nil
			}
			if ready {
				checked = session
			}
		}
		select {
		case <-wake:
		case <-l.closed:
			return ledger.ErrLedgerClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
