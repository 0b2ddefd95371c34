package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/crewlet/crewlet/internal/testenv/testcert"
)

// The door's keys: a listen beyond loopback needs TLS or an explicit
// api.insecure_http, naming the keys; TLS needs a pair that loads; Host
// names are names; the limits are bounded; the local token's file is
// absolute and only with the token on, and no token takes its principal.
func TestDoorKeys(t *testing.T) {
	t.Setenv("CREWLET_TEST_TOK_A", "a-long-enough-token-1")
	tokens := "auth: { tokens: [ { name: ops, role: admin, token_env: CREWLET_TEST_TOK_A } ] }\n"
	certFile, keyFile := testcert.New(t).Files(t)
	pair := `tls: { cert_file: "` + certFile + `", key_file: "` + keyFile + `" }`
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"loopback without TLS", "api: { listen: 127.0.0.1:8080 }\n", nil},
		{"beyond loopback with TLS", tokens + "api: { listen: \"0.0.0.0:8443\", " + pair + " }\n", nil},
		{"beyond loopback, plain HTTP said so", tokens + "api: { listen: \"0.0.0.0:8080\", insecure_http: true }\n", nil},
		{"beyond loopback without TLS", tokens + "api: { listen: \"0.0.0.0:8080\" }\n",
			[]string{"api.tls: unset, but api.listen 0.0.0.0:8080 is reachable beyond this machine", "api.insecure_http: true"}},
		{"half a pair", "api: { tls: { cert_file: \"" + certFile + "\" } }\n",
			[]string{"api.tls: cert_file and key_file go together"}},
		{"a pair that does not load", "api: { tls: { cert_file: \"" + certFile + "\", key_file: \"" + certFile + "\" } }\n",
			[]string{"api.tls: cannot load the pair cert_file " + certFile}},
		{"TLS and insecure_http", "api: { insecure_http: true, " + pair + " }\n",
			[]string{"api.insecure_http: true, but api.tls is set"}},
		{"hosts", "api: { hosts: [ crewlet.example.com, 10.0.0.5, \"https://x.example\", \"h:80\", Upper.example ] }\n",
			[]string{`api.hosts[2]: "https://x.example" is not a lowercase host name`, `api.hosts[3]: "h:80"`, `api.hosts[4]: "Upper.example"`}},
		{"limits", "api: { auth_failures_per_minute: -1, denied_audits_per_minute: 1001 }\n",
			[]string{"api.auth_failures_per_minute: -1 is out of range", "api.denied_audits_per_minute: 1001 is out of range"}},
		{"local token file without the token", tokens[:len(tokens)-3] + ", local_token_file: /run/crewlet/token }\n",
			[]string{`auth.local_token_file: "/run/crewlet/token" is set but no local token is minted`}},
		{"local token file, anonymous", "auth: { anonymous: true, local_token_file: /run/crewlet/token }\n",
			[]string{`auth.local_token_file: "/run/crewlet/token" is set but no local token is minted`}},
		{"anonymous beside tokens", tokens[:len(tokens)-3] + ", anonymous: true }\n",
			[]string{"auth.anonymous: true, but auth.tokens names 1 tokens"}},
		{"anonymous beside the local token", "auth: { anonymous: true, local_token: true }\n",
			[]string{"auth.anonymous: true, but auth.local_token asks for a token"}},
		{"anonymous beyond loopback", "auth: { anonymous: true }\napi: { listen: \"0.0.0.0:8080\", insecure_http: true }\n",
			[]string{"api.listen: 0.0.0.0:8080 is reachable beyond this machine but auth.tokens is empty"}},
		{"anonymous", "auth: { anonymous: true }\n", nil},
		{"no tokens: the local token by default", "auth: { local_token_file: /run/crewlet/token }\n", nil},
		{"relative local token file", "auth: { local_token: true, local_token_file: token }\n",
			[]string{`auth.local_token_file: "token" is not an absolute path`}},
		{"a token named local", "auth: { local_token: true, tokens: [ { name: local, role: viewer, token_env: CREWLET_TEST_TOK_A } ] }\n",
			[]string{`auth.tokens[0].name: "local" is the local token's principal`}},
		{"local token", "auth: { local_token: true, local_token_file: /run/crewlet/token }\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			org, err := Parse([]byte(minimal + c.yaml))
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.name == "local token" && (!org.Auth.LocalToken || org.API.DeniedAuditsPerMinute != DefaultDeniedAuditsPerMinute || org.API.AuthFailuresPerMinute != DefaultAuthFailuresPerMinute) {
					t.Fatalf("auth %+v, api %+v; want the local token on and the door's defaults", org.Auth, org.API)
				}
				switch mints := org.Auth.MintsLocalToken(); c.name {
				case "anonymous", "no tokens: the local token by default":
					if mints != (c.name != "anonymous") {
						t.Fatalf("auth %+v mints a local token: %v; want it minted with no tokens unless auth.anonymous", org.Auth, mints)
					}
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q; got:\n%v", w, err)
				}
			}
		})
	}
}

// The door's keys are classified: the listener's and the local token's
// need a restart, the Host list and the limits are hot.
func TestDoorKeyClasses(t *testing.T) {
	for key, want := range map[string]string{
		"api.tls.cert_file": ClassCold, "api.insecure_http": ClassCold, "auth.local_token": ClassCold, "auth.local_token_file": ClassCold, "auth.anonymous": ClassCold,
		"api.hosts": ClassHot, "api.auth_failures_per_minute": ClassHot, "api.denied_audits_per_minute": ClassHot,
	} {
		if got, _ := classify(key); got != want {
			t.Errorf("%s is %s; want %s", key, got, want)
		}
	}
}

// Tokens copied unchanged from deploy/production/crewlet.env.example, or
// others that are no secret, are refused by name, never shown; a random
// token is taken.
func TestPlaceholderTokensFromTheExampleEnvFileAreRefused(t *testing.T) {
	example, err := os.ReadFile("../../deploy/production/crewlet.env.example")
	if err != nil {
		t.Fatal(err)
	}
	placeholders := regexp.MustCompile(`(?m)^CREWLET_TOKEN_\w+=(.+)$`).FindAllStringSubmatch(string(example), -1)
	if len(placeholders) == 0 {
		t.Fatal("the example env file names no CREWLET_TOKEN_ variable")
	}
	var secrets []string
	for _, m := range placeholders {
		secrets = append(secrets, m[1])
	}
	secrets = append(secrets, "0000000000000000000000", "abababababababababab", "my-example-token-for-ops")
	for _, secret := range secrets {
		t.Setenv("CREWLET_TEST_TOK_P", secret)
		_, err := Parse([]byte(minimal + "auth: { tokens: [ { name: ops, role: admin, token_env: CREWLET_TEST_TOK_P } ] }\n"))
		if err == nil || !strings.Contains(err.Error(), "auth.tokens[0].token_env: the token in CREWLET_TEST_TOK_P is a placeholder") {
			t.Errorf("token %q: %v; want it refused as a placeholder", secret, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	t.Setenv("CREWLET_TEST_TOK_P", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	if _, err := Parse([]byte(minimal + "auth: { tokens: [ { name: ops, role: admin, token_env: CREWLET_TEST_TOK_P } ] }\n")); err != nil {
		t.Fatalf("a random token: %v", err)
	}
}

// A pool's role name leaves room for the spawned seats' suffix, so every
// name a spawn makes is a valid seat name.
func TestAPoolRoleTooLongForItsSpawnedNamesIsRefused(t *testing.T) {
	long := strings.Repeat("r", maxPoolRoleName+1)
	doc := minimal + "profiles: { local: { provider: scripted } }\nroles: { " + long + ": { charter: works, profile: local }, ok: { charter: works, profile: local } }\n" +
		"pools: [ { role: " + long + ", max_seats: 2 }, { role: ok, max_seats: 2 } ]\n"
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "pools[0].role: role \""+long+"\" is 51 characters; a pool's role has at most 50") || strings.Contains(err.Error(), "pools[1]") {
		t.Fatalf("pools with a role of %d characters: %v; want pools[0] refused, pools[1] taken", len(long), err)
	}
}
