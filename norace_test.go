//go:build !race

package mcpsync_test

const raceDetector = false
