//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// confined runs a shell command under p and returns its output and error.
func confined(t *testing.T, p Policy, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = p.Env([]string{"PATH=/usr/bin:/bin"})
	if err := p.Wrap(cmd); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func needLandlock(t *testing.T, p Policy) {
	t.Helper()
	if err := Check(p); err != nil {
		t.Fatalf("this machine must confine MCP children (the suite proves it does): %v", err)
	}
}

func newPolicy(t *testing.T) Policy {
	t.Helper()
	p := Policy{Workspace: filepath.Join(t.TempDir(), "ws")}
	if err := p.Prepare(-1, -1); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSandboxedChildCannotReadCrewletsFilesOrEnvironment(t *testing.T) {
	p := newPolicy(t)
	needLandlock(t, p)
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "local-token")
	if err := os.WriteFile(secret, []byte("the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CREWLET_SANDBOX_TEST_SECRET", "env-secret")
	for name, script := range map[string]string{
		"a file crewlet keeps":  "cat " + secret,
		"a listing of its dir":  "ls " + secretDir,
		"crewlet's environment": fmt.Sprintf("cat /proc/%d/environ", os.Getpid()),
		"crewlet's memory map":  fmt.Sprintf("cat /proc/%d/maps", os.Getpid()),
		"the rest of /etc":      "cat /etc/shadow /etc/hostname",
		"a write outside":       "echo x > " + filepath.Join(secretDir, "planted"),
	} {
		out, err := confined(t, p, script)
		if err == nil || strings.Contains(out, "the-token") || strings.Contains(out, "env-secret") {
			t.Errorf("%s: read or written from the sandbox: err=%v out=%q", name, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(secretDir, "planted")); err == nil {
		t.Error("the child planted a file outside its workspace")
	}
}

func TestSandboxedChildWorksInItsWorkspaceAsHome(t *testing.T) {
	p := newPolicy(t)
	needLandlock(t, p)
	out, err := confined(t, p, `echo kept > "$HOME/note" && cat "$HOME/note" && pwd && echo t > "$TMPDIR/x" && cat "$TMPDIR/x" && echo $HOME`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := fmt.Sprintf("kept\n%s\nt\n%s\n", p.Workspace, p.Workspace)
	if out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestSandboxedChildReadsAndWritesOnlyWhatItsRoleNames(t *testing.T) {
	p := newPolicy(t)
	needLandlock(t, p)
	readable, writable := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(readable, "doc"), []byte("doc"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Read, p.Write = []string{readable}, []string{writable}
	out, err := confined(t, p, fmt.Sprintf("cat %s/doc && echo w > %s/out", readable, writable))
	if err != nil || out != "doc" {
		t.Fatalf("granted paths: err=%v out=%q", err, out)
	}
	if out, err := confined(t, p, fmt.Sprintf("echo w > %s/planted", readable)); err == nil {
		t.Errorf("wrote into a read-only path: %q", out)
	}
}

func TestSandboxedChildHasNoCapabilities(t *testing.T) {
	p := newPolicy(t)
	needLandlock(t, p)
	out, err := confined(t, p, "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, "0000000000000000") {
			t.Errorf("the child keeps a capability: %s", line)
		}
	}
}

func TestSandboxNetworkIsOpenUnlessTheRoleClosesIt(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	// bash's /dev/tcp is not in every shell; the test binary's own helper
	// is not either, so use the one client every Debian has.
	script := "exec 3<>/dev/tcp/127.0.0.1/" + port + " && head -1 <&3"
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine for /dev/tcp")
	}
	run := func(p Policy) (string, error) {
		cmd := exec.Command(bash, "-c", script)
		cmd.Env = p.Env(nil)
		if err := p.Wrap(cmd); err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	open := newPolicy(t)
	needLandlock(t, open)
	if out, err := run(open); err != nil || out != "hello\n" {
		t.Fatalf("open network: err=%v out=%q", err, out)
	}
	closed := newPolicy(t)
	closed.NoNetwork = true
	needLandlock(t, closed)
	if out, err := run(closed); err == nil {
		t.Errorf("network none: the child connected: %q", out)
	}
}
