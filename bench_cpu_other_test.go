//go:build !unix

package mcpsync_test

import "time"

// cpuTime is not measured here: the cpu-ns/op figures read 0.
func cpuTime() time.Duration { return 0 }
