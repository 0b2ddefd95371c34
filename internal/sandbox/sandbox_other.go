//go:build !linux

package sandbox

import "fmt"

// ABI returns 0: Landlock is Linux's.
func ABI() int { return 0 }

// Check refuses every policy: only Linux can confine a child here.
func Check(Policy) error {
	return fmt.Errorf("MCP children can only be sandboxed on Linux; set the role's sandbox.mode: none to run them unconfined")
}
