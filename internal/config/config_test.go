package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"text/template"
	"time"
)

const examplePath = "../../deploy/examples/org.yaml"

func TestExampleOrg(t *testing.T) {
	c, err := Load(examplePath)
	if err != nil {
		t.Fatalf("Load(%s): %v", examplePath, err)
	}

	if got, want := c.Company.Name, "acme"; got != want {
		t.Errorf("company.name = %q, want %q", got, want)
	}
	if got, want := c.Company.Timezone, "Europe/Berlin"; got != want {
		t.Errorf("company.timezone = %q, want %q", got, want)
	}
	if got, want := c.Handles(), []string{"cto", "eng-1", "eng-2", "support-1", "alice"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Handles() = %v, want %v", got, want)
	}
	var agents []string
	for _, s := range c.AgentSeats() {
		agents = append(agents, s.Handle)
	}
	if want := []string{"cto", "eng-1", "eng-2", "support-1"}; !reflect.DeepEqual(agents, want) {
		t.Errorf("AgentSeats() = %v, want %v", agents, want)
	}
	if s, ok := c.Seat("alice"); !ok || s.Kind != "human" {
		t.Errorf("Seat(alice) = %+v, %v; want a human seat", s, ok)
	}
	if s, ok := c.Seat("eng-1"); !ok || s.Kind != "agent" || s.Role != "engineer" {
		t.Errorf("Seat(eng-1) = %+v, %v; want kind agent (the default), role engineer", s, ok)
	}
	if _, ok := c.Seat("nobody"); ok {
		t.Errorf("Seat(nobody) found a seat")
	}
	p, r, ok := c.ProfileOf("cto")
	if !ok || p.Provider != "scripted" || r.Profile != "local" || r.Charter == "" {
		t.Errorf("ProfileOf(cto) = %+v, %+v, %v; want the scripted local profile and the executive role", p, r, ok)
	}
	if _, _, ok := c.ProfileOf("alice"); ok {
		t.Errorf("ProfileOf(alice) ok for a human seat")
	}

	// The rules must answer the greeting the README tells a new user to send,
	// and use only the template data the scripted provider documents.
	type replyData struct {
		Text, From, Handle, Role, Conversation string
		Groups                                 []string
	}
	rules := c.Profiles["local"].Rules
	if len(rules) < 2 {
		t.Fatalf("profile local has %d rules, want at least 2", len(rules))
	}
	for i, rule := range rules {
		re := regexp.MustCompile(rule.Match)
		tmpl := template.Must(template.New("reply").Option("missingkey=error").Parse(rule.Reply))
		data := replyData{Text: "x", From: "alice", Handle: "cto", Role: "executive", Conversation: "c1",
			Groups: make([]string, re.NumSubexp()+1)}
		if err := tmpl.Execute(io.Discard, data); err != nil {
			t.Errorf("rules[%d].reply: %v", i, err)
		}
	}
	if !regexp.MustCompile(rules[0].Match).MatchString("Hello there") {
		t.Errorf("rules[0].match %q does not match %q", rules[0].Match, "Hello there")
	}
}

// broken has one of each kind of mistake; every one must be reported at once.
const broken = `
company: { name: acme, timezone: Mars/Olympus }
mailbox: { read_batch: 0 }
schedules: []
profiles:
  local:
    provider: scripted
    delay: -1s
    rules:
      - { match: "(?i)^hello(", reply: "hi {{.From}}" }
      - { mtch: "x", reply: "{{.From" }
  gpt:
    provider: openai
roles:
  cto: { profile: local }
  engineer: { profil: local }
  support: { profile: gtp, charter: "help" }
seats:
  - { handle: cto, role: cto }
  - { handle: Eng1, role: engineer }
  - { handle: eng-2, role: enginer }
  - { handle: cto, role: support }
  - { handle: bob, kind: robot }
  - { handle: alice, kind: human, role: ghost }
  - { role: cto }
`

func TestEveryProblemReported(t *testing.T) {
	c, err := Parse([]byte(broken))
	if err == nil {
		t.Fatalf("Parse(broken) = %+v, nil; want an error", c)
	}
	if c != nil {
		t.Errorf("Parse(broken) returned a config alongside the error: %+v", c)
	}
	want := []string{
		`roles.engineer.profil: unknown key; did you mean "profile"?`,
		`profiles.local.rules[1].mtch: unknown key; did you mean "match"?`,
		`schedules: unknown key; valid keys: api, company, mailbox, postgres, profiles, redis, roles, seats, temporal`,
		`company.timezone: unknown time zone "Mars/Olympus"`,
		`mailbox.read_batch: 0 is out of range; must be between 1 and 1000`,
		`profiles.gpt.provider: unsupported provider "openai"; supported providers: scripted`,
		"profiles.local.rules[0].match: error parsing regexp: missing closing ): `(?i)^hello(`",
		`profiles.local.rules[1].reply: template: reply:1: unclosed action`,
		`profiles.local.delay: -1s is negative; must be 0 or more`,
		`roles.engineer.profile: required; known profiles: gpt, local`,
		`roles.support.profile: unknown profile "gtp"; known profiles: gpt, local; did you mean "gpt"?`,
		`seats[1].handle: invalid handle "Eng1"; names must be lowercase letters`,
		`seats[2].role: unknown role "enginer"; known roles: cto, engineer, support; did you mean "engineer"?`,
		`seats[3].handle: duplicate handle "cto" (also seats[0])`,
		`seats[4].kind: unknown kind "robot"; must be one of: agent, human`,
		`seats[5].role: unknown role "ghost"; known roles: cto, engineer, support`,
		`seats[6].handle: required`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q\ngot:\n%s", w, msg)
		}
	}
	lines := strings.Split(msg, "\n")
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d (one per line)\ngot:\n%s", len(lines), len(want), msg)
	}
	if strings.Contains(msg, `seats[5].role: unknown role "ghost"; known roles: cto, engineer, support; did you mean`) {
		t.Errorf("suggested a role for %q, which is close to none\ngot:\n%s", "ghost", msg)
	}

	_, again := Parse([]byte(broken))
	if again == nil || again.Error() != msg {
		t.Errorf("problems not in a stable order\nfirst:\n%s\nsecond:\n%v", msg, again)
	}
}

// minimal is the smallest valid org.
const minimal = `
company: { name: acme }
seats: [ { handle: alice, kind: human } ]
`

func TestProblems(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error, each on its own line
		not  []string // substrings that must not appear
	}{
		{
			name: "empty file",
			yaml: ``,
			want: []string{"company.name: required", "seats: at least one seat is required"},
		},
		{
			name: "agent role required",
			yaml: `
company: { name: acme }
roles: { support: { profile: p } }
profiles: { p: { provider: scripted } }
seats: [ { handle: s1 } ]
`,
			want: []string{"seats[0].role: required for an agent seat; known roles: support"},
		},
		{
			name: "profile provider required",
			yaml: minimal + `profiles: { p: { rules: [] } }`,
			want: []string{"profiles.p.provider: required; supported providers: scripted"},
		},
		{
			name: "duration without unit",
			yaml: minimal + `profiles: { p: { provider: scripted, delay: 2 } }`,
			want: []string{`profiles.p.delay: invalid duration 2; write it with a unit, e.g. "2s"`},
		},
		{
			name: "bad duration string",
			yaml: minimal + `profiles: { p: { provider: scripted, delay: "2 sec" } }
roles: { r: { profile: p } }`,
			want: []string{`profiles.p.delay: invalid duration "2 sec"`},
			// the profile did not decode whole, but it exists: the role naming
			// it must not be told otherwise.
			not: []string{`unknown profile "p"`},
		},
		{
			name: "wrong type",
			yaml: minimal + `mailbox: { read_batch: lots }`,
			want: []string{`mailbox.read_batch: invalid value "lots"; want an integer`},
			not:  []string{"out of range"},
		},
		{
			name: "mapping expected",
			yaml: `company: acme
seats: [ { handle: alice, kind: human } ]`,
			want: []string{`company: expected a map or struct, got "string"`},
			not:  []string{"company.name"},
		},
		{
			name: "unknown key far from any",
			yaml: minimal + `api: { zzz: 1 }`,
			want: []string{"api.zzz: unknown key; valid keys: listen"},
			not:  []string{"did you mean"},
		},
		{
			name: "invalid profile and role names",
			yaml: minimal + `profiles: { "-p": { provider: scripted } }
roles: { "r x": { profile: "-p" } }`,
			want: []string{`profiles.-p: invalid profile name "-p"`, `roles.r x: invalid role name "r x"`},
		},
		{
			name: "local time zone",
			yaml: `company: { name: acme, timezone: Local }
seats: [ { handle: alice, kind: human } ]`,
			want: []string{`company.timezone: "Local" differs from host to host`},
		},
		{
			name: "read batch too large",
			yaml: minimal + `mailbox: { read_batch: 1001 }`,
			want: []string{"mailbox.read_batch: 1001 is out of range"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse: no error; want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || strings.Contains(l, w)
				}
				if !found {
					t.Errorf("error lacks %q\ngot:\n%v", w, err)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error contains %q\ngot:\n%v", n, err)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal): %v", err)
	}
	tests := []struct {
		key       string
		got, want any
	}{
		{"company.timezone", c.Company.Timezone, "UTC"},
		{"temporal.address", c.Temporal.Address, "127.0.0.1:7233"},
		{"temporal.namespace", c.Temporal.Namespace, "default"},
		{"temporal.task_queue", c.Temporal.TaskQueue, "crewlet"},
		{"postgres.url_env", c.Postgres.URLEnv, "CREWLET_PG_URL"},
		{"redis.url_env", c.Redis.URLEnv, "CREWLET_REDIS_URL"},
		{"api.listen", c.API.Listen, "127.0.0.1:8080"},
		{"mailbox.key_prefix", c.Mailbox.KeyPrefix, "crewlet"},
		{"mailbox.read_batch", c.Mailbox.ReadBatch, 16},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %v, want %v", tt.key, tt.got, tt.want)
			}
		})
	}
}

func TestSeatKindDefault(t *testing.T) {
	c, err := Parse([]byte(`
company: { name: acme }
profiles: { p: { provider: scripted, delay: 250ms } }
roles: { r: { profile: p } }
seats: [ { handle: a, role: r } ]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := c.Seats[0].Kind; got != "agent" {
		t.Errorf("seats[0].kind = %q, want %q", got, "agent")
	}
	if got, want := c.Profiles["p"].Delay, 250*time.Millisecond; got != want {
		t.Errorf("profiles.p.delay = %v, want %v", got, want)
	}
}

func TestEnvOverride(t *testing.T) {
	t.Setenv("CREWLET_API_LISTEN", "0.0.0.0:9999")
	t.Setenv("CREWLET_TEMPORAL_ADDRESS", "temporal:7233")
	t.Setenv("CREWLET_MAILBOX_READ_BATCH", "64")

	c, err := Parse([]byte(minimal + `api: { listen: 127.0.0.1:1 }`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		env       string
		got, want any
	}{
		{"CREWLET_API_LISTEN over the file", c.API.Listen, "0.0.0.0:9999"},
		{"CREWLET_TEMPORAL_ADDRESS over the default", c.Temporal.Address, "temporal:7233"},
		{"CREWLET_MAILBOX_READ_BATCH", c.Mailbox.ReadBatch, 64},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}

	t.Setenv("CREWLET_MAILBOX_READ_BATCH", "0")
	if _, err := Parse([]byte(minimal)); err == nil || !strings.Contains(err.Error(), "mailbox.read_batch: 0 is out of range") {
		t.Errorf("an env override is not validated: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"missing file", filepath.Join(dir, "nope.yaml"), []string{filepath.Join(dir, "nope.yaml"), "no such file"}},
		{"not YAML", write("org.yaml", "company: [acme\n"), []string{filepath.Join(dir, "org.yaml"), "not valid YAML"}},
		{"YAML but not a mapping", write("list.yaml", "- a\n- b\n"), []string{filepath.Join(dir, "list.yaml"), "not valid YAML"}},
		{"any extension is YAML", write("org.conf", "company: { name: acme }\n"), []string{filepath.Join(dir, "org.conf"), "seats: at least one seat is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, nil; want an error", tt.path, c)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q\ngot: %v", w, err)
				}
			}
		})
	}
}

func TestNearest(t *testing.T) {
	tests := []struct {
		s          string
		candidates []string
		want       string
		ok         bool
	}{
		{"profil", []string{"charter", "profile"}, "profile", true},
		{"gtp", []string{"gpt", "local"}, "gpt", true},
		{"enginer", []string{"cto", "engineer", "support"}, "engineer", true},
		{"hnadle", []string{"handle", "kind", "role"}, "handle", true},
		{"ghost", []string{"cto", "engineer", "support"}, "", false},
		{"x", []string{"y"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			got, ok := nearest(tt.s, tt.candidates)
			if got != tt.want && tt.ok || ok != tt.ok {
				t.Errorf("nearest(%q, %v) = %q, %v; want %q, %v", tt.s, tt.candidates, got, ok, tt.want, tt.ok)
			}
		})
	}
}
