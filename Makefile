GO ?= go
# RAPID_CHECKS is the number of random interleavings each model-based test runs.
RAPID_CHECKS ?= 2000
export RAPID_CHECKS

.PHONY: test test-long test-crash test-workers lint cover bench bench-scale examples gate gate-long

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# Three worker processes on one PostgreSQL database, without the race
# detector (it measures takeovers in real time); CI runs it after make test.
test-workers:
	$(GO) test -count=1 -run TestManyWorkers ./ledger/pgledger/

test-long:
	RAPID_CHECKS=100000 $(GO) test -count=1 -run 'Model' -timeout 60m ./...

# The ledgers' crash tests at full strength: a worker interrupted at 200
# random points, with SIGKILL or, on PostgreSQL, by terminating its
# connections; on the bolt ledger once with a fresh client each run and
# once resuming what the last run left open (make test: 20 each).
test-crash:
	MCPSYNC_CRASH_KILLS=200 $(GO) test -count=1 -run '^TestCrash(Consistency|Resume)$$' ./ledger/boltledger/ ./ledger/pgledger/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

cover:
	$(GO) test -count=1 -coverprofile=coverage.out ./...
	$(GO) tool cover -func=coverage.out | tail -1

# BenchmarkTakeover kills 20 worker processes (a few minutes): it runs
# once, after the rest.
bench:
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkTakeover$$' -benchmem -count=6 $$($(GO) list ./... | grep -v /interop)
	$(GO) test -run '^$$' -bench '^BenchmarkTakeover$$' -benchtime 1x ./ledger/pgledger/

# The scale figures at 10,000 subscriptions (make bench runs them at 1,000):
# each era's time, the 2026-07-28/legacy ratio, and bytes and goroutines
# per subscription.
bench-scale:
	MCPSYNC_SCALE_N=10000 $(GO) test -run '^$$' -bench 'SubscribeMany|SubscriptionMemory|EraReads' -benchtime 1x -count 5 -timeout 60m .

bench-interop:
	$(GO) test -run '^$$' -bench FirstVersion -count=6 ./interop/

examples:
	@for d in examples/*/; do echo "== $$d"; $(GO) run ./$$d || exit 1; done

# The release gate: one line per figure, JSON beside it, non-zero on any FAIL.
# make test runs its short form through the package's tests; this long form
# also times a fenced read against mcp-go's own, interleaved, in process and
# over stdio, and fails a read ratio above 1.15x.
gate:
	$(GO) run ./cmd/mcpsync-gate -json gate.json

gate-long:
	$(GO) run ./cmd/mcpsync-gate -orderings 1000000 -json gate-long.json
