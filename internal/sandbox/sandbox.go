// Package sandbox confines the stdio MCP children a seat starts
// (docs/operations.md, "What an MCP child can reach"): a child sees the
// system's programs and libraries, its seat's own workspace (its HOME) and
// what its role names, and nothing else of the filesystem; it cannot signal
// or trace crewlet, and it runs without any capability even when crewlet is
// root. The mechanism is Linux Landlock, applied by a re-exec of the running
// binary just before it execs the child: a Go program cannot run code
// between fork and exec itself.
package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Mechanism is the name of the only sandbox built: Landlock.
const Mechanism = "landlock"

// helperName is the argv[0] that makes the running binary the sandbox
// helper instead of itself (see the init in landlock_linux.go).
const helperName = "crewlet-sandbox"

// Policy is what one child may reach.
type Policy struct {
	// Workspace is the seat's own directory: the child's HOME, its
	// working directory and the only place it may write unless Write
	// names more. It must exist.
	Workspace string `json:"workspace"`
	// Read are paths (directories or files) the child may read and
	// execute; Write paths it may also change.
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
	// NoNetwork refuses every TCP connect and bind (and UDP where the
	// kernel's Landlock can restrict it).
	NoNetwork bool `json:"no_network,omitempty"`
}

// systemDirs are read and executed by every child: programs, libraries and
// the kernel's views of the process itself. Nothing crewlet keeps lives
// there; config.ProtectedPaths refuses a role that names one.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys"}

// systemFiles under /etc a program needs to resolve names, users, time
// zones and certificates; the rest of /etc (where crewlet's own file and
// keys usually live) stays out of view.
var systemFiles = []string{
	"/etc/alternatives", "/etc/ca-certificates", "/etc/ssl/certs", "/etc/pki/tls/certs",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/nsswitch.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols", "/etc/passwd", "/etc/group",
	"/etc/localtime", "/etc/timezone", "/etc/mime.types", "/etc/os-release",
}

// deviceFiles a child may read and write.
var deviceFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// Env returns env with the child's HOME and TMPDIR set to its workspace, so
// that a program's dot-files and temporary files land where it may write.
func (p Policy) Env(env []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "TMPDIR=")
	})
	return append(out, "HOME="+p.Workspace, "TMPDIR="+filepath.Join(p.Workspace, ".tmp"))
}

// Prepare makes the workspace (and its .tmp) for a child running as uid and
// gid (-1: crewlet's own user), readable only by that user.
func (p Policy) Prepare(uid, gid int) error {
	for _, dir := range []string{p.Workspace, filepath.Join(p.Workspace, ".tmp")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("sandbox workspace: %w", err)
		}
		if uid >= 0 {
			if err := os.Chown(dir, uid, gid); err != nil {
				return fmt.Errorf("sandbox workspace: hand it to the run_as user: %w", err)
			}
		}
	}
	return nil
}

// Wrap makes cmd start confined by p: the running binary starts as the
// helper, confines itself and execs cmd's program with cmd's arguments and
// environment. cmd's Path must already be resolved (exec.Command does).
func (p Policy) Wrap(cmd *exec.Cmd) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	spec, err := json.Marshal(helperSpec{Policy: p, Program: cmd.Path})
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sandbox: find crewlet's own binary to confine the child with: %w", err)
	}
	cmd.Args = append([]string{helperName, string(spec), "--"}, cmd.Args...)
	cmd.Path = self
	cmd.Dir = p.Workspace
	return nil
}

// helperSpec is what the helper is told on its command line: paths only,
// never a secret (a child's secrets travel in its environment).
type helperSpec struct {
	Policy
	// Program is the resolved path of the child's executable; it may be
	// read and executed wherever it lies.
	Program string `json:"program"`
}
