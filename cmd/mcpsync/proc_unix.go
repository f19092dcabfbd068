//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// detach puts a stdio server in a process group of its own. Ctrl-C on a
// terminal signals the whole foreground group; the server must outlive it
// so that watch can still unsubscribe, and it ends when the transport
// closes its stdin.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
