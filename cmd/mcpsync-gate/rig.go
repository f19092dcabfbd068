package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// pace runs a scenario's waits. In the program it is real time with every
// nominal interval divided by scale; in this package's tests it runs inside
// a testing/synctest bubble with scale 1 and wait set to synctest.Wait, so
// the same scenario takes its nominal (virtual) time and sleeps nowhere.
type pace struct {
	scale float64
	// wait blocks until every goroutine of the bubble is blocked; nil in
	// real time.
	wait func()
}

// d returns the real duration of a nominal one.
func (p pace) d(nominal time.Duration) time.Duration {
	return time.Duration(float64(nominal) / p.scale)
}

// nominal returns the nominal duration of a real one.
func (p pace) nominal(real time.Duration) time.Duration {
	return time.Duration(float64(real) * p.scale)
}

func (p pace) sleep(nominal time.Duration) { time.Sleep(p.d(nominal)) }

// errNotSettled is returned when a scenario's condition did not come true.
var errNotSettled = errors.New("the scenario did not settle")

// settle waits until cond holds: in a bubble until every goroutine is
// blocked, letting virtual time run on (timers such as the client's
// coalescing window) for up to 10 s; in real time by polling for up to 10 s.
func (p pace) settle(cond func() bool) error {
	if p.wait != nil {
		for range 10000 {
			p.wait()
			if cond() {
				return nil
			}
			time.Sleep(time.Millisecond) // virtual: lets pending timers fire
		}
		return errNotSettled
	}
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errNotSettled
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// yield lets the goroutines of the client catch up during a burst.
func (p pace) yield() {
	if p.wait != nil {
		p.wait()
		return
	}
	time.Sleep(time.Millisecond)
}

// gatePrincipal is the subject every client of the gate reads as.
const gatePrincipal = "user:gate"

// rig is a Client synced to an mcpsynctest server through the fault kit,
// over mcp-go's in-process transport.
type rig struct {
	srv *mcpsynctest.Server
	c   *mcpsync.Client

	mu  sync.Mutex // protects kit
	kit *mcpsynctest.Transport

	outcomes struct {
		sync.Mutex // protects n
		n          int
	}
}

func newRig(ctx context.Context, srv *mcpsynctest.Server, seed uint64, opts mcpsync.ClientOptions) (*rig, error) {
	r := &rig{srv: srv}
	opts.Subject = gatePrincipal
	if opts.ProtocolVersion == "" {
		// 2025-11-25: one resources/subscribe per URI, where 2026-07-28
		// re-sends the whole filter with every new URI.
		opts.ProtocolVersion = "2025-11-25"
	}
	opts.Seed = seed
	user := opts.OnOutcome
	opts.OnOutcome = func(o mcpsync.Outcome) {
		r.outcomes.Lock()
		r.outcomes.n++
		r.outcomes.Unlock()
		if user != nil {
			user(o)
		}
	}
	c, err := mcpsync.Connect(ctx, func(context.Context) (transport.Interface, error) {
		kit := mcpsynctest.NewTransport(srv.NewInProcessTransport(), int64(seed))
		r.mu.Lock()
		r.kit = kit
		r.mu.Unlock()
		return kit, nil
	}, &opts)
	if err != nil {
		return nil, err
	}
	r.c = c
	return r, nil
}

func (r *rig) faults() *mcpsynctest.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kit
}

// completed returns how many reads the client has handed to the fence.
func (r *rig) completed() int {
	r.outcomes.Lock()
	defer r.outcomes.Unlock()
	return r.outcomes.n
}

// served returns the text the client would serve for uri, if any.
func (r *rig) served(uri string) (string, bool) {
	e, err := r.c.Lookup(uri)
	if err != nil || len(e.Contents) == 0 {
		return "", false
	}
	return e.Contents[0].Text, true
}
