//go:build unix

package mcpsync_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system, every thread) the process
// has used: on a shared machine it moves less with other load than the
// time on the clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
