package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const brokenOrg = `company: { name: acme }
roles:
  engineer: { charter: builds, profil: local }
  support: { charter: helps, profile: gtp }
profiles:
  local: { provider: scriptd, rules: [ { match: "(", reply: "x" } ] }
seats:
  - { handle: cto, role: enginer }
  - { handle: cto, role: support, kind: robot }
`

func writeFile(t testing.TB, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCrewlet runs the binary with env and returns its combined output and exit code.
func runCrewlet(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("run crewlet %v: %v", args, err)
		return "", -1
	}
}

func TestConfigCheckNamesEveryProblem(t *testing.T) {
	out, code := runCrewlet(t, os.Environ(), "config", "check", writeFile(t, "org.yaml", brokenOrg))
	if code == 0 {
		t.Fatalf("config check of a broken file exited 0:\n%s", out)
	}
	for _, want := range []string{
		`roles.engineer.profil: unknown key; did you mean "profile"?`,
		`roles.engineer.profile: required`,
		`roles.support.profile: unknown profile "gtp"`,
		`profiles.local.provider: unsupported provider "scriptd"`,
		`profiles.local.rules[0].match: error parsing regexp`,
		`seats[0].role: unknown role "enginer"`,
		`seats[1].handle: duplicate handle "cto" (also seats[0])`,
		`seats[1].kind: unknown kind "robot"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, code = runCrewlet(t, os.Environ(), "config", "check", exampleOrg)
	if code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("config check of the example org: exit %d\n%s", code, out)
	}
}

func TestServeRefusesToStartHalfConfigured(t *testing.T) {
	t.Run("invalid org file", func(t *testing.T) {
		out, code := runCrewlet(t, os.Environ(), "serve", "--config", writeFile(t, "org.yaml", brokenOrg))
		if code == 0 || !strings.Contains(out, `duplicate handle "cto"`) {
			t.Fatalf("exit %d; want non-zero naming the problems:\n%s", code, out)
		}
	})
	t.Run("connection env var not set", func(t *testing.T) {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CREWLET_PG_URL=") {
				env = append(env, kv)
			}
		}
		out, code := runCrewlet(t, env, "serve", "--config", exampleOrg)
		if code == 0 || !strings.Contains(out, "CREWLET_PG_URL") || strings.Contains(out, "api_listening") {
			t.Fatalf("exit %d; want non-zero naming CREWLET_PG_URL before anything starts:\n%s", code, out)
		}
	})
	t.Run("unknown command", func(t *testing.T) {
		out, code := runCrewlet(t, os.Environ(), "launch")
		if code != 2 || !strings.Contains(out, `unknown command "launch"`) {
			t.Fatalf("exit %d; want 2 with the usage:\n%s", code, out)
		}
	})
}

// The binary answers --help on stdout with exit 0, and a command line it
// cannot run on stderr with exit 2 and that command's usage line; a
// failure past the command line is exit 1, on stderr too.
func TestCLIHelpAndErrorsByExitCode(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"seats", "ls", "--help"}, 0, "GET /seats", ""},
		{[]string{"seats", "show"}, 2, "", "takes HANDLE; got 0 argument(s) []; usage: crewlet seats show HANDLE [flags]\nrun `crewlet seats show --help`"},
		{[]string{"seats", "ls", "--api", "http://127.0.0.1:1"}, 1, "", "cannot reach the crewlet API at http://127.0.0.1:1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			cmd := exec.Command(binary, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) ||
				(tc.stdout == "") != (stdout.Len() == 0) || (tc.stderr == "") != (stderr.Len() == 0) {
				t.Fatalf("exit %d; want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
		})
	}
}
