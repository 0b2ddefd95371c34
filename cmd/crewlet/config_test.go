package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

const exampleOrg = "../../deploy/examples/org.yaml"

// configCheck runs `crewlet config check` on the example org with only the
// given CREWLET_ variables set, and returns its output.
func configCheck(t *testing.T, env map[string]string) (string, error) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CREWLET_") {
			t.Setenv(name, "") // restored after the test
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, value := range env {
		t.Setenv(name, value)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"config", "check", exampleOrg}, &out, &errOut)
	return out.String(), err
}

// CREWLET_API, the CLI's API URL, is no override: config check passes with
// it exported and lists, after its ok line, the overrides it did apply, by
// key and variable, never by value (issue 11).
func TestConfigCheckOverrides(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // the line after the ok line; "" for none
	}{
		{"none", nil, ""},
		{"the CLI's API URL", map[string]string{"CREWLET_API": "http://127.0.0.1:8080"}, ""},
		{"scalar keys", map[string]string{
			"CREWLET_API":                   "http://127.0.0.1:8080",
			"CREWLET_API_LISTEN":            "127.0.0.1:9999",
			"CREWLET_TEMPORAL_ADDRESS":      "temporal.internal:7233",
			"CREWLET_ROLES_SUPPORT_REFLECT": "true",
		}, "overrides from the environment: temporal.address (CREWLET_TEMPORAL_ADDRESS), api.listen (CREWLET_API_LISTEN), roles.support.reflect (CREWLET_ROLES_SUPPORT_REFLECT)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := configCheck(t, tt.env)
			if err != nil {
				t.Fatalf("config check: %v\noutput:\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if !strings.HasPrefix(lines[0], exampleOrg+": ok (company acme, 5 seats, 4 agent)") {
				t.Errorf("first line = %q, want the ok line", lines[0])
			}
			var got string
			if len(lines) > 1 {
				got = strings.Join(lines[1:], "\n")
			}
			if got != tt.want {
				t.Errorf("after the ok line:\n%q\nwant\n%q", got, tt.want)
			}
			for _, v := range []string{"9999", "temporal.internal", "http://"} {
				if strings.Contains(out, v) {
					t.Errorf("output shows the value %q:\n%s", v, out)
				}
			}
		})
	}
}
