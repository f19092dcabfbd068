// Package crashtest interrupts a worker process on a durable ledger at
// random points and checks, after each interruption, what the ledger kept.
//
// A crash test has two halves in the ledger's test package: a worker test,
// which is not a test but the body of the child process (Work), and the
// test proper, which runs Test.Run. The worker subscribes a few URIs and then
// reads, deletes, confirms deletions, revokes subjects and records derived
// artifacts at random, announcing on stdout each step that committed. Run
// kills it with SIGKILL at random points (and, for a ledger with
// connections, cuts them at others) and checks every time that the ledger
// holds no accepted version without its outbox entry, no outbox entry lost
// or numbered twice, no request id, session or subscription generation or
// read ordinal handed out twice, no version regression, no deletion
// tombstoned twice, and every revocation the worker saw return, in force.
package crashtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/mcpsync/mcpsync/ledger"
)

// EnvKills is the variable that sets how many times a crash test
// interrupts its worker (Kills); the default keeps make test short.
const EnvKills = "MCPSYNC_CRASH_KILLS"

// Kills is how many times a crash test interrupts its worker: def, or
// MCPSYNC_CRASH_KILLS when it is set.
func Kills(def int) int {
	if v, err := strconv.Atoi(os.Getenv(EnvKills)); err == nil && v > 0 {
		return v
	}
	return def
}

// Test is a crash test of one kind of ledger.
type Test struct {
	// Worker is the name of the test function that calls Work in the
	// child process, and Env what the child needs to find its ledger.
	Worker string
	Env    []string
	// Ledger opens, in the parent, the ledger the worker writes, for the
	// checks after an interruption; done is called once they are over.
	Ledger func(t *testing.T) (l ledger.Ledger, done func())
	// Terminate, when set, cuts the worker's connections to its ledger
	// while one of them is inside a transaction, and says what it cut. Run
	// then interrupts the worker this way at about half of its random
	// points, and the worker must go on: it is checked without being
	// stopped, and awaited again.
	Terminate func(t *testing.T) string
}

// Run interrupts the worker kills times, each time after a random number of
// announced steps, and checks the ledger after each interruption against
// what the worker announced and what earlier checks saw. Without Terminate
// every interruption kills the worker, and the next run starts on the same
// ledger; with it, about half of them terminate its connections instead:
// never the last, and otherwise always the first.
func (ct Test) Run(t *testing.T, kills int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(15, uint64(time.Now().UnixNano())))
	c := NewChecker(URIs)
	check := func(running bool) {
		l, done := ct.Ledger(t)
		defer done()
		if running {
			c.CheckRunning(t, l)
		} else {
			c.Check(t, l)
		}
	}
	terminations := 0
	for run, k := 0, 0; k < kills; run++ {
		label := fmt.Sprintf("run %d", run)
		w := Start(t, ct.Worker, slices.Concat(ct.Env, []string{envRun + "=" + strconv.Itoa(run)})...)
		for killed := false; !killed; {
			k++
			ev := w.Await(t, label, 1+rng.IntN(60))
			killed = ct.Terminate == nil || k == kills || k > 1 && rng.IntN(2) == 0
			if killed {
				ev = w.Kill(t, ev)
				t.Logf("%s: killed after %q", label, Last(ev))
			} else {
				t.Logf("%s: %s after %q", label, ct.Terminate(t), Last(ev))
				terminations++
			}
			c.Events(t, ev)
			check(!killed)
		}
	}
	if terminations > 0 {
		// Every connection terminated was in use: the worker's next call
		// on it, at the latest, fails.
		t.Logf("%d terminations cut %d calls of the worker, which went on", terminations, c.lost)
		assert.Positive(t, c.lost, "the terminations cut no call of the worker")
	}
}
