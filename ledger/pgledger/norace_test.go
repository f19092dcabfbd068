//go:build !race

package pgledger_test

const raceDetector = false
