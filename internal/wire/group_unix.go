//go:build unix

package wire

import (
	"os/exec"
	"syscall"
)

// OwnGroup starts cmd's process in a process group of its own, so that the
// transport ends what the server started with it (leadsGroup).
func OwnGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
}

// leadsGroup reports whether cmd's process leads a process group of its
// own (OwnGroup).
func leadsGroup(cmd *exec.Cmd) bool {
	return cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid && cmd.SysProcAttr.Pgid == 0
}

// signalGroup sends sig to every process of the group pid leads; the
// group outlives its leader while anything in it runs.
func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
