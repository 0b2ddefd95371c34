//go:build linux

package tools

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProtectProcess makes this process non-dumpable, so that a process of the
// same user without CAP_SYS_PTRACE (an MCP child crewlet started) cannot read
// its environment or memory through /proc/<pid>/environ, /mem or /maps,
// nor attach a debugger. A child running as root bypasses it: that needs
// run_as (docs/operations.md, "What an MCP child can reach").
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the process non-dumpable: %w", err)
	}
	return nil
}
