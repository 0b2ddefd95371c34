//go:build !linux

package tools

// ProtectProcess does nothing here: only Linux exposes a process's
// environment and memory to its children through /proc.
func ProtectProcess() error { return nil }
