//go:build race

package pgledger_test

// raceDetector: the race detector slows each worker process several
// times over, and the many-workers test measures takeovers in real time;
// `make test-workers` runs it without.
const raceDetector = true
