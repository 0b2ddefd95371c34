//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The helper runs before anything else of the binary it is part of (crewlet
// or a test binary), so that a child is started the same way everywhere.
func init() {
	if filepath.Base(os.Args[0]) != helperName {
		return
	}
	err := runHelper(os.Args[1:])
	// Only a failure returns: say why where the child's stderr goes (the
	// node's log) and exit as a shell does for a command it could not run.
	fmt.Fprintf(os.Stderr, "crewlet sandbox: %v\n", err)
	os.Exit(126)
}

// minABI is the oldest Landlock that confines a child's filesystem view;
// minNetworkABI the oldest that can refuse its TCP connections.
const (
	minABI        = 1
	minNetworkABI = 4
)

// ABI returns the kernel's Landlock ABI version, 0 when it has none.
func ABI() int {
	v, err := llsyscall.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// Check reports whether this kernel can confine a child as p asks: Landlock
// enabled, and new enough to refuse the network when p does. The error says
// what to change.
func Check(p Policy) error {
	abi := ABI()
	if abi < minABI {
		return fmt.Errorf("this kernel has no Landlock (Linux 5.13 or later with landlock in its lsm= list); enable it, or set the role's sandbox.mode: none to run its MCP children unconfined")
	}
	if p.NoNetwork && abi < minNetworkABI {
		return fmt.Errorf("this kernel's Landlock (ABI %d) cannot refuse network access (ABI %d, Linux 6.7, can); set the role's sandbox.network: open, or run the role's seats on a newer kernel", abi, minNetworkABI)
	}
	return nil
}

// runHelper confines this process as the spec on its command line asks and
// execs the child; it returns only on failure.
func runHelper(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: %s SPEC -- ARGV...", helperName)
	}
	var spec helperSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return fmt.Errorf("read the policy: %w", err)
	}
	argv := args[2:]
	if err := Check(spec.Policy); err != nil {
		return err
	}
	fd, flags, err := config(spec.Policy).NewRulesetFD(rules(spec)...)
	if err != nil {
		return fmt.Errorf("build the Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("Landlock enforces nothing on this kernel")
	}
	// Landlock and capabilities are per thread: everything from here to
	// the exec happens on this one, which the new program then is.
	runtime.LockOSThread()
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("enforce the Landlock ruleset: %w", err)
	}
	unix.Close(fd)
	if err := syscall.Exec(spec.Program, argv, os.Environ()); err != nil {
		return fmt.Errorf("start %s: %w", spec.Program, err)
	}
	return nil
}

// config is what the ruleset handles: every filesystem right and IPC scope
// this kernel knows, and the network only when the policy refuses it, so
// that an open network stays open whatever the kernel's Landlock can do.
func config(p Policy) landlock.Config {
	c := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}
	if p.NoNetwork {
		c.HandledAccessNet = landlock.V11.HandledAccessNet
	}
	return c.BestEffort()
}

// rules are the paths the child may reach; a missing one is skipped, as a
// system directory this distribution lacks is.
func rules(s helperSpec) []landlock.Rule {
	out := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.RWFiles(deviceFiles...).IgnoreIfMissing(),
		landlock.ROFiles(s.Program),
	}
	out = append(out, pathRules(systemFiles, false)...)
	out = append(out, pathRules(s.Read, false)...)
	return append(out, pathRules(append([]string{s.Workspace}, s.Write...), true)...)
}

// pathRules grants each of paths, directories and files alike: Landlock
// refuses a directory's rights on a file.
func pathRules(paths []string, write bool) []landlock.Rule {
	out := make([]landlock.Rule, 0, len(paths))
	for _, p := range paths {
		fi, err := os.Stat(p)
		file := err == nil && !fi.IsDir()
		switch {
		case file && write:
			out = append(out, landlock.RWFiles(p))
		case file:
			out = append(out, landlock.ROFiles(p))
		case write:
			out = append(out, landlock.RWDirs(p).WithRefer().IgnoreIfMissing())
		default:
			out = append(out, landlock.RODirs(p).IgnoreIfMissing())
		}
	}
	return out
}

// dropCapabilities leaves this thread, and so the child, with no capability
// at all: a child of a crewlet running as root is then root in name only,
// owning root's files but able to do nothing a user could not (and Landlock
// keeps it from those files).
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL && err != unix.EPERM {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}
