package workqueue

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	require.TestingT
	Helper()
}

// get takes the next key, failing the test if there is none or the queue is shut down.
func get[K comparable](t testing.TB, q *Queue[K]) K {
	t.Helper()
	require.Positive(t, q.Len(), "Get would block")
	k, shutdown := q.Get()
	require.False(t, shutdown)
	return k
}

// goGet calls Get on a goroutine of its own; the result arrives on the channel.
func goGet[K comparable](q *Queue[K]) <-chan K {
	ch := make(chan K, 1)
	go func() {
		k, shutdown := q.Get()
		if !shutdown {
			ch <- k
		}
		close(ch)
	}()
	return ch
}

// requireGot requires the Get of goGet to have returned want once every
// goroutine of the bubble is blocked.
func requireGot[K comparable](t tb, ch <-chan K, want K, msg string) {
	t.Helper()
	synctest.Wait()
	select {
	case k, ok := <-ch:
		require.True(t, ok, "Get returned shutdown: %s", msg)
		require.Equal(t, want, k, msg)
	default:
		require.Fail(t, "Get still waits", msg)
	}
}

// blocked reports whether nothing has arrived on ch, once every goroutine
// of the bubble is blocked.
func blocked[K any](ch <-chan K) bool {
	synctest.Wait()
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func TestGetHandsOutKeysInTheOrderTheyWereAdded(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	for _, k := range []string{"c", "a", "b"} {
		q.Add(k)
	}
	require.Equal(t, 3, q.Len())
	got := []string{get(t, q), get(t, q), get(t, q)}
	require.Equal(t, []string{"c", "a", "b"}, got)
	require.Zero(t, q.Len())
}

func TestKeyIsQueuedOnceHoweverManyAddsComeBeforeGet(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	q.Add("a")
	require.Equal(t, 2, q.Len())
	require.Equal(t, "a", get(t, q))
	require.Equal(t, "b", get(t, q))
	require.Zero(t, q.Len())
}

func TestKeyAddedWhileProcessingRunsOnceMoreAfterDone(t *testing.T) {
	for _, adds := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("%d adds", adds), func(t *testing.T) {
			q := New[string](Options{})
			defer q.ShutDown()
			q.Add("a")
			require.Equal(t, "a", get(t, q))
			for range adds {
				q.Add("a")
			}
			require.Zero(t, q.Len(), "a processing key is not queued")
			q.Done("a")
			require.Equal(t, 1, q.Len())
			require.Equal(t, "a", get(t, q))
			q.Done("a")
			require.Zero(t, q.Len(), "the Adds were answered by one run")
		})
	}
}

func TestKeyIsNeverHandedToTwoGetCallersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.Add("a")
		require.Equal(t, "a", get(t, q))
		q.Add("a")
		second := goGet(q)
		require.True(t, blocked(second), "a was handed out while processing")
		q.Done("a")
		requireGot(t, second, "a", "Done hands the key to the waiting Get")
	})
}

func TestDoneOfAKeyNotProcessingChangesNothing(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.Done("a")
	q.Add("a")
	q.Done("a")
	require.Equal(t, 1, q.Len(), "a queued key is queued once")
	require.Equal(t, "a", get(t, q))
	q.Done("a")
	q.Done("a")
	require.Zero(t, q.Len())
}

func TestGetWaitsForAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		first := goGet(q)
		require.True(t, blocked(first))
		q.Add("a")
		requireGot(t, first, "a", "Add wakes a waiting Get")

		later := goGet(q)
		require.True(t, blocked(later))
		q.AddAfter("b", time.Second)
		require.True(t, blocked(later))
		time.Sleep(time.Second)
		requireGot(t, later, "b", "a delayed key wakes a waiting Get")
	})
}

func TestAddAfterMakesKeysReadyInTheOrderTheyAreDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddAfter("c", 3*time.Millisecond)
		q.AddAfter("a", time.Millisecond)
		q.AddAfter("b", 2*time.Millisecond)
		q.AddAfter("b2", 2*time.Millisecond)
		require.Equal(t, 4, q.Pending())
		require.Zero(t, q.Len())

		time.Sleep(time.Millisecond - 1)
		synctest.Wait()
		require.Zero(t, q.Len(), "ready before its delay")
		time.Sleep(1)
		synctest.Wait()
		require.Equal(t, 1, q.Len())
		require.Equal(t, 3, q.Pending())

		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		require.Zero(t, q.Pending())
		got := []string{get(t, q), get(t, q), get(t, q), get(t, q)}
		require.Equal(t, []string{"a", "b", "b2", "c"}, got, "by due time, then by call")
	})
}

func TestAddAfterWithoutDelayIsAdd(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			q := New[string](Options{})
			defer q.ShutDown()
			q.AddAfter("a", d)
			require.Equal(t, 1, q.Len())
			require.Zero(t, q.Pending())
		})
	}
}

func TestEarliestDelayOfAKeyWins(t *testing.T) {
	for _, tc := range []struct {
		name   string
		delays []time.Duration
	}{
		{"earlier second", []time.Duration{10 * time.Millisecond, 2 * time.Millisecond}},
		{"later second", []time.Duration{2 * time.Millisecond, 10 * time.Millisecond}},
		{"three", []time.Duration{5 * time.Millisecond, 2 * time.Millisecond, 7 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New[string](Options{})
				defer q.ShutDown()
				for _, d := range tc.delays {
					q.AddAfter("a", d)
				}
				require.Equal(t, 1, q.Pending(), "one pending entry per key")
				time.Sleep(2*time.Millisecond - 1)
				synctest.Wait()
				require.Zero(t, q.Len())
				time.Sleep(1)
				synctest.Wait()
				require.Equal(t, 1, q.Len(), "ready at the earliest delay")
				require.Zero(t, q.Pending())
				require.Equal(t, "a", get(t, q))
				q.Done("a")

				time.Sleep(time.Second)
				synctest.Wait()
				require.Zero(t, q.Len(), "the later delays were dropped, not run")
			})
		})
	}
}

func TestDelayedAddOfAQueuedKeyDoesNotRunItTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddAfter("a", time.Millisecond)
		q.Add("a")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, 1, q.Len())
		require.Equal(t, "a", get(t, q))
		q.Done("a")
		require.Zero(t, q.Len())
		require.Zero(t, q.Pending())
	})
}

func TestDelayDueWhileProcessingRunsTheKeyOnceMoreAfterDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.Add("a")
		require.Equal(t, "a", get(t, q))
		q.AddAfter("a", time.Millisecond)
		q.Add("a")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Zero(t, q.Len())
		q.Done("a")
		require.Equal(t, 1, q.Len())
		require.Equal(t, "a", get(t, q))
		q.Done("a")
		require.Zero(t, q.Len())
	})
}

func TestAddRateLimitedBacksOffPerKeyUntilForget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{Backoff: func(n int) time.Duration {
			return time.Duration(n) * 10 * time.Millisecond
		}})
		defer q.ShutDown()
		// readyAfter is how long after AddRateLimited the key became ready.
		readyAfter := func(k string) time.Duration {
			start := time.Now()
			q.AddRateLimited(k)
			for q.Len() == 0 {
				time.Sleep(time.Millisecond)
				synctest.Wait()
			}
			require.Equal(t, k, get(t, q))
			q.Done(k)
			return time.Since(start)
		}
		for n := 1; n <= 3; n++ {
			require.Equal(t, time.Duration(n)*10*time.Millisecond, readyAfter("a"))
			require.Equal(t, n, q.NumRequeues("a"))
		}
		require.Equal(t, 10*time.Millisecond, readyAfter("b"), "counts are per key")
		q.Forget("a")
		require.Zero(t, q.NumRequeues("a"))
		require.Equal(t, 1, q.NumRequeues("b"))
		require.Equal(t, 10*time.Millisecond, readyAfter("a"), "Forget starts the backoff over")
	})
}

func TestDefaultBackoffDoublesFrom5msTo1000s(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, 5 * time.Millisecond},
		{2, 10 * time.Millisecond},
		{3, 20 * time.Millisecond},
		{18, 5 * time.Millisecond << 17},
		{19, 1000 * time.Second},
		{1000, 1000 * time.Second},
		{math.MaxInt, 1000 * time.Second},
	} {
		assert.Equal(t, tc.want, defaultBackoff(tc.n), "n=%d", tc.n)
	}
	q := New[string](Options{})
	defer q.ShutDown()
	require.Equal(t, defaultBackoff(7), q.backoff(7))
}

func TestShutDownReleasesGetCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown() // on failure, releases the callers
		var wg sync.WaitGroup
		var released atomic.Int32
		for range 3 {
			wg.Go(func() {
				if _, shutdown := q.Get(); shutdown {
					released.Add(1)
				}
			})
		}
		synctest.Wait()
		require.Zero(t, released.Load())
		q.ShutDown()
		wg.Wait()
		require.EqualValues(t, 3, released.Load())
		_, shutdown := q.Get()
		require.True(t, shutdown, "later callers are not kept waiting")
	})
}

func TestShutDownDropsQueuedAndDelayedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("a")
		q.AddAfter("b", time.Millisecond)
		q.ShutDown()
		require.Zero(t, q.Len())
		require.Zero(t, q.Pending())
		_, shutdown := q.Get()
		require.True(t, shutdown, "a queued key is not handed out after ShutDown")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Zero(t, q.Len())
	})
}

func TestAddsAfterShutDownAreIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("p")
		require.Equal(t, "p", get(t, q))
		q.ShutDown()
		q.ShutDown()
		q.Add("a")
		q.AddAfter("b", time.Millisecond)
		q.AddAfter("c", 0)
		q.AddRateLimited("d")
		q.Add("p")
		q.Done("p")
		require.Zero(t, q.Len())
		require.Zero(t, q.Pending())
		time.Sleep(time.Second)
		synctest.Wait()
		require.Zero(t, q.Len())
		require.Zero(t, q.Pending())
		require.Zero(t, q.NumRequeues("d"))
		_, shutdown := q.Get()
		require.True(t, shutdown)
	})
}

func TestDelayedKeysStartNoGoroutines(t *testing.T) {
	q := New[int](Options{})
	before := runtime.NumGoroutine()
	for k := range 1000 {
		q.AddAfter(k, time.Hour+time.Duration(k))
	}
	require.Equal(t, 1000, q.Pending())
	require.Less(t, runtime.NumGoroutine()-before, 5)
	q.ShutDown()
}

// checkInvariants holds q's fields to the rules written beside its mutex.
func checkInvariants[K comparable](t tb, q *Queue[K]) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	seen := make(map[K]bool)
	for _, k := range q.ready {
		require.False(t, seen[k], "%v is queued twice", k)
		seen[k] = true
		require.Contains(t, q.dirty, k, "queued but not dirty")
		require.NotContains(t, q.processing, k, "queued while processing")
	}
	for k := range q.dirty {
		if _, ok := q.processing[k]; !ok {
			require.True(t, seen[k], "%v is dirty, not processing and not queued", k)
		}
	}
	require.Len(t, q.delayed, len(q.waiting))
	for i, e := range q.waiting {
		require.Equal(t, i, e.index)
		require.Same(t, e, q.delayed[e.key])
		if i > 0 {
			require.False(t, q.waiting.Less(i, (i-1)/2), "heap order")
		}
	}
	if len(q.waiting) > 0 {
		require.NotNil(t, q.timer)
	}
	if q.shutdown {
		require.Empty(t, q.ready)
		require.Empty(t, q.dirty)
		require.Empty(t, q.waiting)
	}
}

// queueModel is what a Queue[int] should look like, in the plainest terms.
type queueModel struct {
	q          *Queue[int]
	start      time.Time
	now        time.Duration // since start
	ready      []int
	dirty      map[int]bool
	processing map[int]bool
	pending    map[int]pendingAdd
	seq        int
	failures   map[int]int
	shutdown   bool
}

type pendingAdd struct {
	at  time.Duration // since start
	seq int
}

var modelKeys = []int{0, 1, 2, 3}

func (m *queueModel) add(k int) {
	if m.shutdown || m.dirty[k] {
		return
	}
	m.dirty[k] = true
	if !m.processing[k] {
		m.ready = append(m.ready, k)
	}
}

func (m *queueModel) addAfter(k int, d time.Duration) {
	if m.shutdown {
		return
	}
	if d <= 0 {
		m.add(k)
		return
	}
	if p, ok := m.pending[k]; ok && p.at <= m.now+d {
		return
	}
	m.seq++
	m.pending[k] = pendingAdd{at: m.now + d, seq: m.seq}
}

// advance lets d pass: the delayed adds due by then happen in the order
// they are due, ties in the order they were asked for.
func (m *queueModel) advance(d time.Duration) {
	m.now += d
	var due []int
	for k, p := range m.pending {
		if p.at <= m.now {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b int) int {
		pa, pb := m.pending[a], m.pending[b]
		if pa.at != pb.at {
			return int(pa.at - pb.at)
		}
		return pa.seq - pb.seq
	})
	for _, k := range due {
		delete(m.pending, k)
		m.add(k)
	}
}

func (m *queueModel) get(k int) {
	m.ready = m.ready[1:]
	delete(m.dirty, k)
	m.processing[k] = true
}

func (m *queueModel) check(t *rapid.T) {
	require.Equal(t, len(m.ready), m.q.Len())
	require.Equal(t, len(m.pending), m.q.Pending())
	for _, k := range modelKeys {
		require.Equal(t, m.failures[k], m.q.NumRequeues(k), "requeues of %d", k)
	}
	checkInvariants(t, m.q)
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	require.Equal(t, append([]int{}, m.ready...), append([]int{}, m.q.ready...), "queue order")
	require.Len(t, m.q.processing, len(m.processing))
	for k := range m.processing {
		require.Contains(t, m.q.processing, k)
	}
	require.Len(t, m.q.dirty, len(m.dirty))
	for k, p := range m.pending {
		require.Contains(t, m.q.delayed, k)
		require.Equal(t, m.start.Add(p.at), m.q.delayed[k].at, "due time of %d", k)
	}
}

func (m *queueModel) actions() map[string]func(*rapid.T) {
	key := rapid.SampledFrom(modelKeys)
	delay := rapid.Custom(func(t *rapid.T) time.Duration {
		return time.Duration(rapid.IntRange(-1, 5).Draw(t, "ms")) * time.Millisecond
	})
	return map[string]func(*rapid.T){
		"Add": func(t *rapid.T) {
			k := key.Draw(t, "key")
			m.q.Add(k)
			m.add(k)
		},
		"AddAfter": func(t *rapid.T) {
			k, d := key.Draw(t, "key"), delay.Draw(t, "delay")
			m.q.AddAfter(k, d)
			m.addAfter(k, d)
		},
		"AddRateLimited": func(t *rapid.T) {
			k := key.Draw(t, "key")
			m.q.AddRateLimited(k)
			if !m.shutdown {
				m.failures[k]++
				m.addAfter(k, time.Duration(m.failures[k])*time.Millisecond)
			}
		},
		"Forget": func(t *rapid.T) {
			k := key.Draw(t, "key")
			m.q.Forget(k)
			delete(m.failures, k)
		},
		"Get": func(t *rapid.T) {
			if len(m.ready) == 0 && !m.shutdown {
				t.Skip("Get would block")
			}
			k, shutdown := m.q.Get()
			require.Equal(t, m.shutdown, shutdown)
			if shutdown {
				return
			}
			require.Equal(t, m.ready[0], k, "FIFO")
			require.False(t, m.processing[k], "%d handed out twice", k)
			m.get(k)
		},
		"GetWaits": func(t *rapid.T) {
			// Get blocks while nothing is ready, even with processing keys
			// dirty, until an Add of an idle key.
			var idle []int
			for _, k := range modelKeys {
				if !m.processing[k] {
					idle = append(idle, k)
				}
			}
			if len(m.ready) > 0 || m.shutdown || len(idle) == 0 {
				t.Skip("Get would not block")
			}
			got := goGet(m.q)
			require.True(t, blocked(got), "Get returned with nothing ready")
			k := rapid.SampledFrom(idle).Draw(t, "key")
			m.q.Add(k)
			m.add(k)
			requireGot(t, got, k, "Add wakes a waiting Get")
			m.get(k)
		},
		"Done": func(t *rapid.T) {
			var busy []int
			for _, k := range modelKeys {
				if m.processing[k] {
					busy = append(busy, k)
				}
			}
			// Mostly keys being processed, sometimes an idle one (a no-op).
			k := rapid.SampledFrom(append(append(busy, busy...), modelKeys...)).Draw(t, "key")
			m.q.Done(k)
			if !m.processing[k] {
				return
			}
			delete(m.processing, k)
			if m.dirty[k] {
				m.ready = append(m.ready, k)
			}
		},
		"Sleep": func(t *rapid.T) {
			d := time.Duration(rapid.IntRange(1, 6).Draw(t, "ms")) * time.Millisecond
			time.Sleep(d)
			synctest.Wait()
			m.advance(d)
		},
		"ShutDown": func(t *rapid.T) {
			if rapid.IntRange(0, 9).Draw(t, "shut down rarely") > 0 {
				t.Skip("keep going")
			}
			m.q.ShutDown()
			m.shutdown = true
			m.ready, m.dirty, m.pending = nil, map[int]bool{}, map[int]pendingAdd{}
		},
		"": m.check,
	}
}

// TestQueueFollowsItsModel drives random sequences of every call, with fake
// time passing in between, against a plain model of the queue's rules and
// checks after each step that both agree on order, sets, delays and
// requeue counts, and that the queue's own invariants hold. RAPID_CHECKS
// sets the number of sequences.
func TestQueueFollowsItsModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// rapid asks a *testing.T for its deadline, which a bubble forbids;
		// wrapped, it assumes none.
		rapid.Check(bubbleTB{t}, func(rt *rapid.T) {
			m := &queueModel{
				q:          New[int](Options{Backoff: func(n int) time.Duration { return time.Duration(n) * time.Millisecond }}),
				start:      time.Now(),
				dirty:      map[int]bool{},
				processing: map[int]bool{},
				pending:    map[int]pendingAdd{},
				failures:   map[int]int{},
			}
			defer m.q.ShutDown()
			rt.Repeat(m.actions())
		})
	})
}

// bubbleTB hides from rapid that it runs on the *testing.T of a
// testing/synctest bubble.
type bubbleTB struct{ *testing.T }

// TestWorkersNeverShareAKeyAndEveryAddIsAnswered has producers add keys
// (at once, after a delay, or rate-limited) while workers process them on
// their own goroutines, yielding mid-way so that runs overlap. No key may
// be processed by two workers at once, and once the adds stop every key
// must have had a run that started after its last add.
func TestWorkersNeverShareAKeyAndEveryAddIsAnswered(t *testing.T) {
	const keys, producers, workers, addsEach = 16, 4, 6, 2000
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{Backoff: func(n int) time.Duration { return time.Duration(n%4) * time.Microsecond }})
		defer q.ShutDown()                        // on failure, releases the workers
		var lastAdd, seenByRun [keys]atomic.Int64 // add numbers, per key
		var running [keys]atomic.Int32
		var overlaps atomic.Int32

		var workersDone sync.WaitGroup
		for range workers {
			workersDone.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					if !running[k].CompareAndSwap(0, 1) {
						overlaps.Add(1)
					}
					// A run sees every add made before Get handed k out.
					seen := lastAdd[k].Load()
					runtime.Gosched()
					seenByRun[k].Store(seen)
					running[k].Store(0)
					q.Done(k)
				}
			})
		}

		var producersDone sync.WaitGroup
		for p := range producers {
			producersDone.Go(func() {
				for i := range addsEach {
					k := (p + producers*i) % keys // each key has one producer
					lastAdd[k].Store(int64(i + 1))
					switch i % 5 {
					case 0:
						q.AddAfter(k, time.Duration(i%7)*time.Microsecond)
					case 1:
						q.AddRateLimited(k)
					default:
						q.Add(k)
					}
					if i%50 == 0 {
						q.Forget(k)
					}
					if i%20 == 0 {
						// Fake time passes in steps, so that delays come due
						// at many instants, between adds.
						time.Sleep(time.Duration(p+1) * time.Microsecond)
					}
				}
			})
		}
		producersDone.Wait()
		// Let the delays (a few microseconds) run out and the workers drain
		// the queue.
		deadline := time.Now().Add(time.Millisecond)
		for synctest.Wait(); q.Pending() > 0 || q.Len() > 0; synctest.Wait() {
			require.True(t, time.Now().Before(deadline), "delayed keys never came due")
			time.Sleep(10 * time.Microsecond)
		}
		q.ShutDown()
		workersDone.Wait()

		require.Zero(t, overlaps.Load(), "a key was processed by two workers at once")
		for k := range keys {
			require.Equal(t, lastAdd[k].Load(), seenByRun[k].Load(), "key %d: its last add had no run", k)
		}
	})
}
