//go:build race

package mcpsync_test

// raceDetector: under the race detector sync.Pool drops items at random,
// so allocation counts that rest on a pool do not hold.
const raceDetector = true
