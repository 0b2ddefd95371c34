//go:build !unix

package tools

import "os/exec"

func setProcGroup(*exec.Cmd) {}

func killGroupNow(int) {}

// groupAlive cannot look without process groups; the SDK's Close, which
// waits for the child, is the only proof there.
func groupAlive(int) bool { return false }
