package mcpsynctest_test

import (
	"testing"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Every hostile scenario ends with a bounded heap and an error that names
// its cause, under limits small enough to measure.
func TestHostileScenarios(t *testing.T) {
	lim := mcpsync.Limits{
		MaxReadBytes: 1 << 20, MaxReadItems: 1000, MaxPageItems: 1000,
		MaxMessageBytes: 4 << 20, MaxDepth: 64, MaxNotificationsPerSecond: 1000,
	}
	for _, sc := range mcpsynctest.Scenarios(lim) {
		t.Run(sc.Name, func(t *testing.T) {
			sc.Run(t, &mcpsync.ClientOptions{Limits: &lim})
		})
	}
}
