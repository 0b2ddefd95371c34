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
