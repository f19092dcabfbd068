package pgledger_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync/ledger/pgledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger/pgtest"
)

// takeoverKills is how many workers BenchmarkTakeover kills per iteration.
const takeoverKills = 20

// BenchmarkTakeover kills one of three worker processes sharing 1,000
// resources of an HTTP MCP server (one changing every shardChangeEvery), takeoverKills
// times, starting a new worker after each, and measures the takeover: from
// the SIGKILL until every URI the killed worker held is taken by a live
// worker and read (its Subscribe returned after the first read). The
// target is the lease TTL plus one second at the 99th percentile:
// p99-over-target is the 99th percentile over that, at most 1 when met.
// first-read is the time until the first of its URIs was taken and read
// (the survivors learn of the death when PostgreSQL ends the killed
// process's sessions, not when its leases expire), and take the time from
// that first URI to the last.
func BenchmarkTakeover(b *testing.B) {
	if raceDetector {
		b.Skip("three race-instrumented workers on two cores miss their leases")
	}
	conn, schema := pgtest.Schema(b)
	ctx := b.Context()
	ledger, err := pgledger.Open(ctx, conn, &pgledger.Options{Schema: schema})
	require.NoError(b, err)
	b.Cleanup(func() { ledger.Close() })

	const n = 1000
	srv, uris, hs := docsServer(b, n)
	b.Cleanup(keepChanging(ctx, srv, uris, 11).Wait)

	started := 0
	start := func() *shardProc {
		started++
		return startShard(b, fmt.Sprintf("worker-%d", started), conn, schema, hs.URL)
	}
	live := []*shardProc{start(), start(), start()}
	balanced := func() bool {
		members := make([]uuid.UUID, len(live))
		for i, p := range live {
			members[i] = p.worker
		}
		own := owners(b, ledger)
		for _, u := range uris {
			if want, _ := pgledger.Assign(u, members); own[u] != want {
				return false
			}
		}
		return true
	}

	var took, began, taking []time.Duration
	b.ResetTimer()
	for range b.N {
		for kill := range takeoverKills {
			eventually(b, time.Minute, "every URI owned by the worker it is assigned to", balanced)
			victim := live[kill%len(live)]
			var held []string
			for key, o := range owners(b, ledger) {
				if o == victim.worker {
					held = append(held, key)
				}
			}
			live = slices.DeleteFunc(live, func(p *shardProc) bool { return p == victim })
			killed := time.Now()
			require.NoError(b, victim.cmd.Process.Signal(syscall.SIGKILL))
			var first, last time.Time
			eventually(b, time.Minute, "the killed worker's URIs taken and read", func() bool {
				taken := map[string]time.Time{}
				for _, p := range live {
					for uri, at := range p.tookSince(killed) {
						if prev, ok := taken[uri]; !ok || at.Before(prev) {
							taken[uri] = at
						}
					}
				}
				first, last = time.Time{}, time.Time{}
				for _, key := range held {
					at, ok := taken[key]
					if !ok {
						return false
					}
					if at.After(last) {
						last = at
					}
					if first.IsZero() || at.Before(first) {
						first = at
					}
				}
				return true
			})
			took = append(took, last.Sub(killed))
			began = append(began, first.Sub(killed))
			taking = append(taking, last.Sub(first))
			live = append(live, start())
		}
	}
	b.StopTimer()
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[(len(took)*99+99)/100-1]
	target := shardTTL + time.Second
	slices.Sort(began)
	slices.Sort(taking)
	b.ReportMetric(float64(shardTTL.Milliseconds()), "ttl-ms")
	b.ReportMetric(float64(began[len(began)/2].Milliseconds()), "first-read-p50-ms")
	b.ReportMetric(float64(p50.Milliseconds()), "takeover-p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "takeover-p99-ms")
	b.ReportMetric(float64(taking[(len(taking)*99+99)/100-1].Milliseconds()), "take-p99-ms")
	b.ReportMetric(float64(p99)/float64(target), "p99-over-target")
	b.ReportMetric(0, "ns/op")
}
