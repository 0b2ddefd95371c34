package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv/testcert"
)

// The deploy kit (deploy/production, deploy/systemd, deploy/container) is held
// to the code here: an example that drifted from the config loader or the CLI
// would fail the operator who copies it, not a test.
const (
	productionOrg = "../../deploy/production/org.yaml"
	productionEnv = "../../deploy/production/crewlet.env.example"
	systemdDir    = "../../deploy/systemd"
)

// readEnvFile reads KEY=VALUE lines as systemd's EnvironmentFile= does for
// the forms the example uses: comments and blank lines skipped, one pair of
// double quotes around a value removed.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		env[k] = strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

// productionEnvSet exports the env example's placeholders and nothing else
// crewlet reads (CREWLET_* from the test's own environment, and every
// variable the example names, are cleared first), with the API tokens
// replaced by random ones and the TLS files the org names by test
// certificates through their CREWLET_ overrides.
func productionEnvSet(t *testing.T) {
	t.Helper()
	env := readEnvFile(t, productionEnv)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, named := env[name]; named || strings.HasPrefix(name, "CREWLET_") {
			t.Setenv(name, "") // restored after the test
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, "CREWLET_TOKEN_") {
			// The file's tokens are placeholders crewlet refuses
			// (TestPlaceholderTokensFromTheExampleEnvFileAreRefused);
			// an operator puts a random one in each, as this does.
			v = rand.Text()
		}
		t.Setenv(k, v)
	}
	cert, key := testcert.New(t).Files(t)
	for _, k := range []string{"CREWLET_TEMPORAL_TLS_CA_FILE", "CREWLET_TEMPORAL_TLS_CERT_FILE", "CREWLET_API_TLS_CERT_FILE"} {
		t.Setenv(k, cert)
	}
	for _, k := range []string{"CREWLET_TEMPORAL_TLS_KEY_FILE", "CREWLET_API_TLS_KEY_FILE"} {
		t.Setenv(k, key)
	}
}

// The production example passes `crewlet config check` with only the env
// example's variables set, so the example names every variable the org
// needs; and it is the shape docs/operations.md ("Run it for real") says:
// Temporal over TLS, the API on the network over TLS with a token for each
// role, a worker's metrics address, labelled placement, approvals, quotas.
func TestProductionOrg(t *testing.T) {
	productionEnvSet(t)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", productionOrg}, &out, &errOut); err != nil {
		t.Fatalf("config check %s: %v\n%s", productionOrg, err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), productionOrg+": ok (company acme, 7 seats, 6 agent)") {
		t.Errorf("config check said %q; want the ok line", out.String())
	}
	org, err := config.Load(productionOrg)
	if err != nil {
		t.Fatal(err)
	}
	if !org.Temporal.TLS.Enabled || org.Temporal.TLS.CertFile == "" {
		t.Errorf("temporal.tls = %+v; want mutual TLS", org.Temporal.TLS)
	}
	if !org.API.TLS.Enabled() || config.LoopbackListen(org.API.Listen) || len(org.API.Hosts) == 0 {
		t.Errorf("api = listen %s, tls %v, hosts %v; want HTTPS beyond loopback under a host name", org.API.Listen, org.API.TLS.Enabled(), org.API.Hosts)
	}
	roles := map[string]bool{}
	for _, tok := range org.Auth.Tokens {
		roles[tok.Role] = true
	}
	for _, r := range []string{"admin", "operator", "member", "viewer"} {
		if !roles[r] {
			t.Errorf("auth.tokens has no %s token", r)
		}
	}
	if org.Metrics.Listen == "" {
		t.Error("metrics.listen unset: a worker, which serves no API, could not be scraped")
	}
	var placed, approvals bool
	for _, r := range org.Roles {
		placed = placed || len(r.Placement.Labels) > 0
		approvals = approvals || len(r.Approvals) > 0
	}
	if !placed || !approvals {
		t.Errorf("roles: a labelled placement %v, approvals %v; want both", placed, approvals)
	}
}

// unitKeys reads a systemd unit's Key=Value lines, every value of a key in
// order (a key may repeat, as ExecStart= and SystemCallFilter= do).
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=Value", path, line)
		}
		keys[k] = append(keys[k], v)
	}
	return keys
}

// Each unit runs a crewlet server command with flags that command takes,
// reads its secrets from an env file, and gives the process longer to stop
// than the process gives itself (shutdownBound of the production org), so
// systemd never kills a drain that is within its limits.
func TestSystemdUnits(t *testing.T) {
	productionEnvSet(t)
	org, err := config.Load(productionOrg)
	if err != nil {
		t.Fatal(err)
	}
	for unit, command := range map[string]string{"crewlet-worker@.service": "worker", "crewlet-api.service": "api"} {
		t.Run(unit, func(t *testing.T) {
			keys := unitKeys(t, filepath.Join(systemdDir, unit))
			if len(keys["ExecStart"]) != 1 {
				t.Fatalf("ExecStart = %q; want one command", keys["ExecStart"])
			}
			argv := strings.Fields(strings.ReplaceAll(keys["ExecStart"][0], "%i", "n1"))
			if len(argv) < 2 || filepath.Base(argv[0]) != "crewlet" || argv[1] != command {
				t.Fatalf("ExecStart = %q; want crewlet %s ...", keys["ExecStart"][0], command)
			}
			// The command parses the unit's flags and goes on to read the org
			// file: pointed at one that is not there, it stops exactly there.
			missing := filepath.Join(t.TempDir(), "org.yaml")
			args := argv[1:]
			for i, a := range args {
				if a == "--config" && i+1 < len(args) {
					args[i+1] = missing
				}
			}
			err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			var ue usageError
			if errors.As(err, &ue) || err == nil || !strings.Contains(err.Error(), "read config "+missing) {
				t.Errorf("crewlet %s: %v; want its flags taken and the missing org file reported", strings.Join(args, " "), err)
			}
			if got := keys["EnvironmentFile"]; len(got) != 1 || got[0] != "/etc/crewlet/env" {
				t.Errorf("EnvironmentFile = %q; want /etc/crewlet/env", got)
			}
			if got := keys["User"]; len(got) != 1 || got[0] == "root" {
				t.Errorf("User = %q; want one unprivileged user", got)
			}
			if got := keys["KillMode"]; len(got) != 1 || got[0] != "mixed" {
				t.Errorf("KillMode = %q; want mixed, so SIGTERM reaches crewlet alone and its drain stops its MCP children", got)
			}
			stop, err := time.ParseDuration(strings.Join(keys["TimeoutStopSec"], ""))
			if err != nil {
				t.Fatalf("TimeoutStopSec: %v", err)
			}
			if bound := shutdownBound(org); stop <= bound {
				t.Errorf("TimeoutStopSec = %s; want above the process's own shutdown bound %s", stop, bound)
			}
		})
	}
}

// The image builds with the Go release go.mod asks for, the command that
// exists, and runs as a numeric non-root user.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../deploy/container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if want := "ARG GO_VERSION=" + string(goLine[1]) + "\n"; !strings.Contains(doc, want) {
		t.Errorf("Dockerfile lacks %q: go.mod asks for go %s", want, goLine[1])
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/crewlet", `ENTRYPOINT ["/usr/local/bin/crewlet"]`} {
		if !strings.Contains(doc, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^USER [1-9][0-9]*:[1-9][0-9]*$`).MatchString(doc) {
		t.Error("Dockerfile has no numeric non-root USER line")
	}
}
