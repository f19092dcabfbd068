//go:build !unix

package main

import "os/exec"

// detach does nothing where process groups are not a Unix concept.
func detach(*exec.Cmd) {}
