//go:build !unix

package wire

import (
	"os/exec"
	"syscall"
)

// OwnGroup does nothing where processes have no groups to signal.
func OwnGroup(*exec.Cmd) {}

func leadsGroup(*exec.Cmd) bool { return false }

func signalGroup(int, syscall.Signal) {}
