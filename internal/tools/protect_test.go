//go:build linux

package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/crewlet/crewlet/internal/sandbox"
	"github.com/crewlet/crewlet/internal/testenv"
)

// The probe helper is this test binary run again as crewlet would run: it
// holds probeSecret in its environment from exec and in its memory, makes
// itself non-dumpable when probeProtect says so, starts the test server as
// its own user, and prints what the server's probe_parent read of it. With
// probeRunAs it starts the server as that user instead and prints only
// Start's error ({"start": ERROR}).
const (
	probeHelperEnv  = "CREWLET_TOOLS_PROBE_HELPER"
	probeSecretEnv  = "CREWLET_TOOLS_PROBE_SECRET"
	probeProtectEnv = "CREWLET_TOOLS_PROBE_PROTECT"
	probeRunAsEnv   = "CREWLET_TOOLS_PROBE_RUN_AS"
	probeSecret     = "crewlet-probe-secret-4f1c9a"
)

// probeParent has the session's test server probe this process, with the
// address of secret as the memory to read.
func probeParent(t testing.TB, s *Session, secret []byte) map[string]string {
	t.Helper()
	args := fmt.Sprintf(`{"pid":%d,"addr":%d,"len":%d}`, os.Getpid(), uintptr(unsafe.Pointer(&secret[0])), len(secret))
	res, err := s.Call(context.Background(), "ts__probe_parent", json.RawMessage(args), "")
	runtime.KeepAlive(secret)
	if err != nil || res.IsError {
		t.Fatalf("probe_parent: %v %q", err, res.Text)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
		t.Fatalf("probe_parent answered %q: %v", res.Text, err)
	}
	return got
}

// TestProbeHelper is not a test of its own: it is the process the tests
// below start as crewlet's stand-in.
func TestProbeHelper(t *testing.T) {
	if os.Getenv(probeHelperEnv) == "" {
		t.Skip("run by TestChildCannotReadCrewletsSecrets")
	}
	if os.Getenv(probeProtectEnv) == "1" {
		if err := ProtectProcess(); err != nil {
			t.Fatal(err)
		}
	}
	secret := []byte(os.Getenv(probeSecretEnv))
	runAs := os.Getenv(probeRunAsEnv)
	s, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{os.Getenv(probeServerEnv)}, RunAs: runAs}}, nil)
	if runAs != "" {
		if err == nil {
			s.Close()
			err = fmt.Errorf("none")
		}
		if err := json.NewEncoder(os.Stdout).Encode(map[string]string{"start": err.Error()}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := json.NewEncoder(os.Stdout).Encode(probeParent(t, s, secret)); err != nil {
		t.Fatal(err)
	}
}

// runProbeHelper runs TestProbeHelper as cred's user (nil: this process's)
// and returns what its child read of it.
func runProbeHelper(t *testing.T, protect bool, cred *syscall.Credential, env ...string) map[string]string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The go tool builds the test binary where only its user may look.
	bin := filepath.Join(filepath.Dir(testserverBin), "tools.test")
	if _, err := os.Stat(bin); err != nil {
		copyExecutable(t, self, bin)
	}
	cmd := exec.Command(bin, "-test.run=^TestProbeHelper$", "-test.count=1")
	protectVal := "0"
	if protect {
		protectVal = "1"
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), probeHelperEnv + "=1", probeSecretEnv + "=" + probeSecret,
		probeProtectEnv + "=" + protectVal, probeServerEnv + "=" + testserverBin}
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("probe helper: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	// go test prints PASS after the helper's line.
	line, _, _ := strings.Cut(stdout.String(), "\n")
	var got map[string]string
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("probe helper printed %q: %v", stdout.String(), err)
	}
	return got
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// nobody is the unprivileged account the tests run as when they are root.
func nobody(t *testing.T) account {
	t.Helper()
	a, err := lookupAccount("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	return a
}

// wantRefused fails unless the probe was refused environ and mem and holds
// the secret nowhere.
func wantRefused(t *testing.T, got map[string]string) {
	t.Helper()
	for _, f := range []string{"environ", "mem"} {
		if !strings.HasPrefix(got[f], "error: ") {
			t.Errorf("the child read /proc/<crewlet>/%s: %.200q", f, got[f])
		}
	}
	for f, v := range got {
		if strings.Contains(v, probeSecret) {
			t.Errorf("the child found the secret in /proc/<crewlet>/%s", f)
		}
	}
	t.Logf("what the child read: %s", summarize(got))
}

// summarize is each probed file with "read" or its error, for the log.
func summarize(got map[string]string) string {
	var parts []string
	for _, f := range []string{"environ", "mem", "maps", "cmdline", "status"} {
		v := got[f]
		if strings.HasPrefix(v, "ok: ") {
			v = fmt.Sprintf("read %d bytes", len(v)-4)
		}
		parts = append(parts, f+": "+v)
	}
	return strings.Join(parts, "; ")
}

func TestChildCannotReadCrewletsSecrets(t *testing.T) {
	// A process of one user, as crewlet runs when it is not root: nobody's
	// when this test is root, so that no capability blurs the result.
	var sameUser *syscall.Credential
	if os.Geteuid() == 0 {
		sameUser = nobody(t).cred
	}
	t.Run("a dumpable parent is read (the probe works)", func(t *testing.T) {
		got := runProbeHelper(t, false, sameUser)
		if !strings.Contains(got["environ"], probeSecret) || !strings.Contains(got["mem"], probeSecret) {
			t.Fatalf("the probe did not read a dumpable parent: %s", summarize(got))
		}
	})
	t.Run("non-dumpable parent, child of the same user", func(t *testing.T) {
		wantRefused(t, runProbeHelper(t, true, sameUser))
	})
	t.Run("root parent, child run_as nobody", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run a child as another user")
		}
		nobody(t)
		secret := []byte(probeSecret)
		logs := &testenv.Log{}
		s, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{testserverBin}, RunAs: "nobody"}},
			slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wantRefused(t, probeParent(t, s, secret))
		if strings.Contains(logs.String(), "mcp_child_runs_as_root") {
			t.Errorf("warned of a root child that runs as nobody: %s", logs)
		}
	})
	t.Run("root parent, root child: warned", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only a root crewlet warns")
		}
		logs := &testenv.Log{}
		s, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{testserverBin}}},
			slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !strings.Contains(logs.String(), "mcp_child_runs_as_root") || !strings.Contains(logs.String(), "server=ts") {
			t.Errorf("no mcp_child_runs_as_root warning for ts: %s", logs)
		}
		t.Logf("a root child of a non-dumpable root crewlet reads: %s", summarize(runProbeHelper(t, true, nil)))
	})
}

func TestRunAsNeedsPrivilege(t *testing.T) {
	// A crewlet that is not root asks for a user not its own: nobody's
	// asking for root's when this test is root.
	var cred *syscall.Credential
	other := "nobody"
	if os.Geteuid() == 0 {
		cred, other = nobody(t).cred, "root"
	}
	got := runProbeHelper(t, false, cred, probeRunAsEnv+"="+other)
	if !strings.Contains(got["start"], "may not start a process as another user") {
		t.Fatalf("Start as %s without root: %q, want a refusal that says why", other, got["start"])
	}
}

func TestRunAsUnknownUser(t *testing.T) {
	_, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{testserverBin}, RunAs: "no-such-user-x"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `run_as "no-such-user-x": no such user`) {
		t.Fatalf("Start as an unknown user: %v", err)
	}
}

// TestSandboxedServerReadsItsWorkspaceAndNothingOfCrewlets starts the test
// server confined, as a role's default sandbox does, and has it try what a
// prompt-injected tool would: crewlet's environment and memory through
// /proc, and a file crewlet keeps. Here crewlet (this test) may run as root,
// which passes every check but the sandbox's.
func TestSandboxedServerReadsItsWorkspaceAndNothingOfCrewlets(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "local-token")
	if err := os.WriteFile(secretFile, []byte(probeSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := &sandbox.Policy{Workspace: filepath.Join(t.TempDir(), "ws", "eng-1")}
	if err := sandbox.Check(*policy); err != nil {
		t.Fatalf("this machine must sandbox MCP children: %v", err)
	}
	s, err := Start(context.Background(), []ServerConfig{{Name: "ts", Command: []string{testserverBin}, Sandbox: policy}}, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	secret := []byte(probeSecret)
	for file, got := range probeParent(t, s, secret) {
		if file != "cmdline" && file != "status" && !strings.HasPrefix(got, "error: ") {
			t.Errorf("the sandboxed server read this process's %s: %.80q", file, got)
		}
	}
	if res := call(t, s, "ts__write_file", `{"path":"kept.txt","text":"mine"}`, ""); res.IsError {
		t.Fatalf("write in its workspace: %s", res.Text)
	}
	res := call(t, s, "ts__read_files", fmt.Sprintf(`{"paths":[%q, "kept.txt", %q, "/proc/self/environ"]}`, secretFile, filepath.Join(policy.Workspace, "kept.txt")), "")
	var got map[string]string
	if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
		t.Fatalf("read_files answered %q: %v", res.Text, err)
	}
	if !strings.HasPrefix(got[secretFile], "error: ") {
		t.Errorf("the sandboxed server read a file crewlet keeps: %q", got[secretFile])
	}
	if got["kept.txt"] != "ok: mine" || got[filepath.Join(policy.Workspace, "kept.txt")] != "ok: mine" {
		t.Errorf("its own workspace: %q", got)
	}
	if env := got["/proc/self/environ"]; !strings.Contains(env, "HOME="+policy.Workspace) {
		t.Errorf("its HOME is not its workspace: %q", env)
	}
}
