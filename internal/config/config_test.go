package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/crewlet/crewlet"
)

const examplePath = "../../deploy/examples/org.yaml"

func TestExampleOrg(t *testing.T) {
	t.Parallel()
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
	if want := (Nodes{HeartbeatTimeout: 3 * time.Second, DrainTimeout: time.Minute, ReleaseWait: 30 * time.Second, RebalanceInterval: 30 * time.Second,
		RebalanceMaxMoves: 4, ReconcileInterval: time.Minute, MaxToolCalls: 64}); !reflect.DeepEqual(c.Nodes, want) {
		t.Errorf("nodes = %+v, want the defaults %+v", c.Nodes, want)
	}
	if want := (Mailbox{"crewlet", 16, 24 * time.Hour, 10000, 24 * time.Hour, 10 * time.Second, 1000, 10000, time.Hour, 10000, 600, 95}); c.Mailbox != want {
		t.Errorf("mailbox = %+v, want the defaults %+v", c.Mailbox, want)
	}
	if got, want := c.Location().String(), "Europe/Berlin"; got != want {
		t.Errorf("Location() = %s, want %s", got, want)
	}
	for name, r := range c.Roles {
		if r.MaxRounds != DefaultMaxRounds {
			t.Errorf("roles.%s.max_rounds = %d, want the default %d", name, r.MaxRounds, DefaultMaxRounds)
		}
		if r.OnBusy != crewlet.OnBusyEnqueue {
			t.Errorf("roles.%s.on_busy = %q, want the default %q", name, r.OnBusy, crewlet.OnBusyEnqueue)
		}
	}
	if want := defaultMaintenance; c.Maintenance != want {
		t.Errorf("maintenance = %+v, want the defaults %+v", c.Maintenance, want)
	}
	// The example runs on any node: no role is pinned.
	groups := c.PlacementGroups()
	if len(groups) != 1 || groups[0].Key != "" || !reflect.DeepEqual(groups[0].Seats, agents) {
		t.Errorf("PlacementGroups() = %+v; want one unlabelled group of %v", groups, agents)
	}

	// The rules must answer the greeting the README tells a new user to send,
	// and use only the template data the scripted provider documents.
	type replyData struct {
		Text, From, Handle, Role, Conversation string
		Groups                                 []string
		Results                                []string
		Tools                                  map[string]string
		History                                []struct{ Role, Text, From, Body string }
		Last                                   string
	}
	rules := c.Profiles["local"].Rules
	if len(rules) < 2 {
		t.Fatalf("profile local has %d rules, want at least 2", len(rules))
	}
	for i, rule := range rules {
		re := regexp.MustCompile(rule.Match)
		tmpl := template.Must(template.New("reply").Option("missingkey=error").Parse(rule.Reply))
		data := replyData{Text: "x", From: "alice", Handle: "cto", Role: "executive", Conversation: "c1",
			Groups: make([]string, re.NumSubexp()+1), Results: make([]string, len(rule.Tools)), Tools: map[string]string{},
			History: []struct{ Role, Text, From, Body string }{{Role: "user", Text: "Message from alice (conversation c1):\n\nhi", From: "alice", Body: "hi"}}}
		for _, tool := range rule.Tools {
			data.Tools[tool.Name] = "result"
		}
		if err := tmpl.Execute(io.Discard, data); err != nil {
			t.Errorf("rules[%d].reply: %v", i, err)
		}
	}
	greeted := false
	for _, rule := range rules {
		if regexp.MustCompile(rule.Match).MatchString("Hello there") {
			greeted = len(rule.Tools) == 0 && strings.Contains(rule.Reply, "{{.From}}")
			break
		}
	}
	if !greeted {
		t.Errorf("the first rule matching %q does not greet the sender by name", "Hello there")
	}
}

// broken has one of each kind of mistake; every one must be reported at once.
const broken = `
company: { name: acme, timezone: Mars/Olympus, budget: { tokens_per_day: -1 } }
mailbox: { read_batch: 0, retry_backoff: 5ms, keep_aked: 5 }
nodes: { heartbeat_timeout: 500ms, rebalance_max_mves: 2 }
maintenance: { ledger_retention: 30m, turn_retention: 87601h }
schedule: []
profiles:
  local:
    provider: scripted
    delay: -1s
    rules:
      - { match: "(?i)^hello(", reply: "hi {{.From}}" }
      - { mtch: "x", reply: "{{.From" }
  gpt:
    provider: openai
    api_key_env: CREWLET_TEST_UNSET_KEY
roles:
  cto: { charter: works as cto, profile: local, max_rounds: 0, mcp: [ { name: fs, comand: [x] } ], placement: { labels: { zone: "eu west" } } }
  engineer: { charter: works as engineer, profil: local, placement: { lables: { tools: git } } }
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

// unsetEnv unsets an environment variable for the test's duration.
func unsetEnv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "") // restores the old value after the test
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

func TestEveryProblemReported(t *testing.T) {
	c, err := Parse([]byte(broken))
	if err == nil {
		t.Fatalf("Parse(broken) = %+v, nil; want an error", c)
	}
	if c != nil {
		t.Errorf("Parse(broken) returned a config alongside the error: %+v", c)
	}
	unsetEnv(t, "CREWLET_TEST_UNSET_KEY")
	want := []string{
		`roles.cto.mcp[0].comand: unknown key; did you mean "command"?`,
		`roles.engineer.profil: unknown key; did you mean "profile"?`,
		`profiles.local.rules[1].mtch: unknown key; did you mean "match"?`,
		`roles.engineer.placement.lables: unknown key; did you mean "labels"?`,
		`mailbox.keep_aked: unknown key; did you mean "keep_acked"?`,
		`nodes.rebalance_max_mves: unknown key; did you mean "rebalance_max_moves"?`,
		`schedule: unknown key; did you mean "schedules"?`,
		`company.timezone: unknown time zone "Mars/Olympus"`,
		`company.budget.tokens_per_day: -1 is negative; must be 0 (no cap) or more`,
		`mailbox.read_batch: 0 is out of range; must be between 1 and 1000`,
		`mailbox.retry_backoff: 5ms is out of range; must be between 10ms and 10m`,
		`nodes.heartbeat_timeout: 500ms is out of range; must be between 1s and 1m`,
		`maintenance.ledger_retention: 30m is out of range; must be between 1h and 8760h`,
		`maintenance.turn_retention: 87601h is out of range; must be between 1h and 87600h`,
		`roles.cto.placement.labels.zone: invalid label value "eu west"; label values must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`,
		`profiles.gpt.model: required for provider openai`,
		`profiles.gpt.api_key_env: environment variable CREWLET_TEST_UNSET_KEY is not set; export it before starting crewlet`,
		"profiles.local.rules[0].match: error parsing regexp: missing closing ): `(?i)^hello(`",
		`profiles.local.rules[1].reply: template: reply:1: unclosed action`,
		`profiles.local.delay: -1s is negative; must be 0 or more`,
		`roles.cto.max_rounds: 0 is out of range; must be between 1 and 256`,
		`roles.cto.mcp[0]: needs a command (a stdio server) or a url (an HTTP server)`,
		`roles.engineer.profile: required: name the role's profile (profile: x) or its pool (profiles: [x, y]); known profiles: gpt, local`,
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
			name: "stream write timeout out of range",
			yaml: minimal + `stream: { write_timeout: 500ms, heartbeat: 6m }`,
			want: []string{
				"stream.write_timeout: 500ms is out of range; must be between 1s and 5m",
				"stream.heartbeat: 6m is out of range",
			},
		},
		{
			name: "budgets negative or not numbers",
			yaml: `company: { name: acme, budget: { tokens_per_day: -1, tokens_per_week: -2, tokens_per_month: lots } }
seats: [ { handle: alice, kind: human } ]
profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, budget: { tokens_per_month: -3, tokens_per_hour: 5 } } }`,
			want: []string{
				"company.budget.tokens_per_day: -1 is negative; must be 0 (no cap) or more",
				"company.budget.tokens_per_week: -2 is negative; must be 0 (no cap) or more",
				`company.budget.tokens_per_month: invalid value "lots"; want an integer`,
				"roles.r.budget.tokens_per_month: -3 is negative; must be 0 (no cap) or more",
				`roles.r.budget.tokens_per_hour: unknown key; did you mean "tokens_per_day"?`,
			},
		},
		{
			name: "money budgets",
			yaml: `company: { name: acme, budget: { usd_per_day: -1, on_limit: ask, ask: { to: eng-1, at: 1 } } }
seats: [ { handle: alice, kind: human }, { handle: eng-1, role: r }, { handle: eng-2, role: q } ]
profiles: { p: { provider: scripted } }
evals: { budget: { usd_per_day: 5 } }
roles:
  r: { charter: works as r, profile: p, budget: { usd_per_week: 10, on_limit: ask, ask: { to: eng-1, at: 0 } } }
  q: { charter: works as q, profile: p, budget: { usd_per_month: 10, on_limit: ask } }
  s: { charter: works as s, profile: p, budget: { tokens_per_day: 10, on_limit: ask, ask: { to: nobody } } }
  t: { charter: works as t, profile: p, budget: { usd_per_day: 1, on_limit: stop } }
  u: { charter: works as u, profile: p, budget: { usd_per_day: 1, ask: { to: alice } } }`,
			want: []string{
				"company.budget.usd_per_day: is -1; a money cap is dollars, from 0 (no cap) to 1000000000",
				"company.budget.on_limit: ask asks at a share of a money cap; set usd_per_day, usd_per_week or usd_per_month",
				"company.budget.ask.at: is 1; the share of the cap at which to ask is between 0 and 1, e.g. 0.8",
				"company.budget.ask.to: eng-1 is an agent seat; the company's budget asks a person's human seat",
				"evals.budget.usd_per_day: unknown key; valid keys: tokens_per_day",
				"roles.r.budget.ask.at: is 0; the share of the cap at which to ask is between 0 and 1",
				"roles.r.budget.ask.to: eng-1 is a seat of role r; a seat is not asked about its own spending",
				"roles.q.budget.ask.to: required with on_limit: ask",
				"roles.s.budget.on_limit: ask asks at a share of a money cap",
				`roles.s.budget.ask.to: no seat "nobody"`,
				`roles.t.budget.on_limit: "stop" is not a limit policy; use hold or ask`,
				"roles.u.budget.ask: is set but on_limit is not ask",
			},
		},
		{
			name: "worker deployment",
			yaml: minimal + `temporal: { task_queue: crewlet.prod, deployment: { build_id: __v2, promote: sometimes } }`,
			want: []string{
				`temporal.deployment.build_id: "__v2" starts with "__", which Temporal reserves; set another, or leave it empty for the binary's revision`,
				`temporal.deployment.promote: unknown value "sometimes"; must be one of: first (a build becomes current when the deployment has none or no node of the current build runs), always (every starting node makes its build current), never (an operator promotes)`,
			},
			not: []string{"temporal.deployment.name"},
		},
		{
			name: "worker deployment name Temporal reserves",
			yaml: minimal + `temporal: { deployment: { name: "acme:prod", build_id: "v 2" } }`,
			want: []string{
				`temporal.deployment.name: "acme:prod" contains "." or ":", which Temporal reserves; use "-" instead`,
				`temporal.deployment.build_id: "v 2" holds a space or a control character; use letters, digits, "-" and "."`,
			},
		},
		{
			name: "max rounds out of range",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles: { low: { charter: works as low, profile: p, max_rounds: 0 }, high: { charter: works as high, profile: p, max_rounds: 257 }, neg: { charter: works as neg, profile: p, max_rounds: -1 }, ok: { charter: works as ok, profile: p, max_rounds: 256 } }`,
			want: []string{
				"roles.low.max_rounds: 0 is out of range; must be between 1 and 256",
				"roles.high.max_rounds: 257 is out of range; must be between 1 and 256",
				"roles.neg.max_rounds: -1 is out of range; must be between 1 and 256",
			},
			not: []string{"roles.ok"},
		},
		{
			name: "idle nudge out of range",
			yaml: minimal + `profiles: { p: { provider: scripted } }
nodes: { reconcile_interval: 2h }
roles:
  long: { charter: works as long, profile: p, idle_nudge: { after: 721h } }
  neg: { charter: works as neg, profile: p, idle_nudge: { after: -1m } }
  typo: { charter: works as typo, profile: p, idle_nudge: { afer: 1h } }
  ok: { charter: works as ok, profile: p, idle_nudge: { after: 1s } }
  off: { charter: works as off, profile: p, idle_nudge: { after: 0 } }`,
			want: []string{
				"nodes.reconcile_interval: 2h is out of range; must be between 1s and 1h",
				"roles.long.idle_nudge.after: 721h is out of range; must be between 1s and 720h",
				"roles.neg.idle_nudge.after: -1m is out of range; must be between 1s and 720h",
				`roles.typo.idle_nudge.afer: unknown key; did you mean "after"?`,
			},
			not: []string{"roles.ok", "roles.off"},
		},
		{
			name: "mcp servers",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles:
  r:
    charter: works as r
    profile: p
    mcp:
      - { name: fs, command: [mcp-fs, --root, /srv] }
      - { name: fs, url: "http://127.0.0.1:9000/mcp" }
      - { name: Tracker, url: "https://t.example/mcp" }
      - { name: a__b, command: [x] }
      - { name: trailing_, command: [x] }
      - { name: ` + strings.Repeat("n", 33) + `, command: [x] }
      - { command: [x] }
      - { name: none }
      - { name: both, command: [x], url: "http://h/mcp" }
      - { name: ftp, url: "ftp://h/mcp" }
      - { name: remote, url: "http://h/mcp", env: ["A=1"] }
      - { name: envs, command: [x], env: ["SECRETVALUE", "1A=x", "OK_1=fine=too"] }
      - { name: blank, command: [""] }
      - { name: typo, comand: [x] }
      - { name: secrets, command: [x], env_from: [CREWLET_TEST_KEY_SET, CREWLET_TEST_UNSET_KEY, "bad-name"] }
      - { name: remote2, url: "http://h/mcp", env_from: [CREWLET_TEST_KEY_SET] }
      - { name: remote3, url: "http://h/mcp", headers_from: { authorization: CREWLET_TEST_UNSET_KEY, "bad header": CREWLET_TEST_KEY_SET, x-ok: CREWLET_TEST_KEY_SET } }
      - { name: local, command: [x], headers_from: { authorization: CREWLET_TEST_KEY_SET } }
      - { name: asnobody, command: [x], run_as: nobody }
      - { name: asuid, command: [x], run_as: "0" }
      - { name: asghost, command: [x], run_as: no-such-user-x }
      - { name: remote4, url: "http://h/mcp", run_as: nobody }`,
			want: []string{
				`roles.r.mcp[1].name: duplicate name "fs" (also roles.r.mcp[0])`,
				`roles.r.mcp[2].name: invalid name "Tracker"; must be 1-32 of a-z, 0-9, '_' and '-'`,
				`roles.r.mcp[3].name: invalid name "a__b"; must not contain "__" nor end in "_"`,
				`roles.r.mcp[4].name: invalid name "trailing_"; must not contain "__" nor end in "_"`,
				`roles.r.mcp[5].name: invalid name "` + strings.Repeat("n", 33) + `"`,
				`roles.r.mcp[6].name: required`,
				`roles.r.mcp[7]: needs a command (a stdio server) or a url (an HTTP server)`,
				`roles.r.mcp[8]: has both command and url; set exactly one`,
				`roles.r.mcp[9].url: invalid URL "ftp://h/mcp"; want an http or https URL`,
				`roles.r.mcp[10].env: applies only to a command`,
				`roles.r.mcp[11].env[0]: has no "="; want KEY=VALUE`,
				`roles.r.mcp[11].env[1]: invalid key "1A"; want KEY=VALUE`,
				`roles.r.mcp[12].command[0]: empty program name`,
				`roles.r.mcp[13].comand: unknown key; did you mean "command"?`,
				`roles.r.mcp[14].env_from[1]: environment variable CREWLET_TEST_UNSET_KEY is not set; export it before starting crewlet`,
				`roles.r.mcp[14].env_from[2]: invalid environment variable name "bad-name"`,
				`roles.r.mcp[15].env_from: applies only to a command`,
				`roles.r.mcp[16].headers_from.authorization: environment variable CREWLET_TEST_UNSET_KEY is not set`,
				`roles.r.mcp[16].headers_from.bad header: invalid header name "bad header"`,
				`roles.r.mcp[17].headers_from: applies only to a url`,
				`roles.r.mcp[20].run_as: unknown user "no-such-user-x"; name a user of this machine`,
				`roles.r.mcp[21].run_as: applies only to a command`,
			},
			// An env entry is never shown whole: it may be a secret.
			not: []string{"roles.r.mcp[0].", "roles.r.mcp[0]:", "SECRETVALUE", "env[2]", "env_from[0]", "sk-test-value", "x-ok", "mcp[18]", "mcp[19]"},
		},
		{
			name: "unsupported provider",
			yaml: minimal + `profiles: { g: { provider: gemini, rules: [ { match: x, reply: y } ] } }`,
			want: []string{`profiles.g.provider: unsupported provider "gemini"; supported providers: anthropic, openai, scripted`},
			// what a gemini profile takes is unknown; only the provider is wrong.
			not: []string{"profiles.g.rules"},
		},
		{
			name: "openai and anthropic profiles",
			yaml: minimal + `profiles:
  nomodel: { provider: openai, api_key_env: CREWLET_TEST_KEY_SET }
  nokey: { provider: openai, model: gpt-4o-mini }
  nokeyant: { provider: anthropic, model: claude-sonnet-4-5, base_url: "http://proxy:8080" }
  badname: { provider: openai, model: m, api_key_env: openai-key }
  unset: { provider: anthropic, model: m, api_key_env: CREWLET_TEST_UNSET_KEY }
  empty: { provider: openai, model: m, api_key_env: CREWLET_TEST_KEY_EMPTY }
  badurl: { provider: openai, model: m, base_url: "localhost:11434/v1" }
  creds: { provider: openai, model: m, base_url: "ftp://u:pw@h/v1" }
  local: { provider: openai, model: llama3, base_url: "http://127.0.0.1:11434/v1", max_tokens: -1 }
  scripty: { provider: openai, model: m, api_key_env: CREWLET_TEST_KEY_SET, delay: 1s, rules: [ { match: x, reply: y } ] }`,
			want: []string{
				"profiles.nomodel.model: required for provider openai",
				"profiles.nokey.api_key_env: required for https://api.openai.com/v1; name the environment variable holding the key",
				"profiles.nokeyant.api_key_env: required for provider anthropic",
				`profiles.badname.api_key_env: invalid environment variable name "openai-key"; must match ^[A-Z_][A-Z0-9_]*$`,
				"profiles.unset.api_key_env: environment variable CREWLET_TEST_UNSET_KEY is not set; export it before starting crewlet",
				"profiles.empty.api_key_env: environment variable CREWLET_TEST_KEY_EMPTY is empty",
				`profiles.badurl.base_url: invalid URL "localhost:11434/v1"; want an http or https URL such as https://api.openai.com/v1`,
				"profiles.creds.base_url: must not hold credentials",
				"profiles.local.max_tokens: -1 is negative",
				"profiles.scripty.rules: provider openai takes no rules; they apply to provider scripted",
				"profiles.scripty.delay: provider openai takes no delay; it applies to provider scripted",
			},
			// a server of one's own needs no key; the key's value is never shown.
			not: []string{"profiles.local.api_key_env", "profiles.badurl.api_key_env", "sk-test-value", "u:pw"},
		},
		{
			name: "reserved handles",
			yaml: `company: { name: acme }
seats: [ { handle: operator, kind: human }, { handle: tickets, kind: human } ]`,
			want: []string{
				`seats[0].handle: "operator" is reserved: crewlet sends mail under that name`,
				`seats[1].handle: "tickets" is reserved: crewlet sends mail under that name`,
			},
		},
		{
			name: "context budgets",
			yaml: minimal + `profiles:
  small: { provider: scripted, context_tokens: 255 }
  huge: { provider: scripted, context_tokens: 10000001 }
  tight: { provider: openai, model: m, base_url: "http://127.0.0.1:11434/v1", context_tokens: 1000, max_tokens: 1000 }
  typo: { provider: scripted, compact_with: smal }`,
			want: []string{
				"profiles.small.context_tokens: 255 is out of range; must be between 256 and 10000000",
				"profiles.huge.context_tokens: 10000001 is out of range; must be between 256 and 10000000",
				"profiles.tight.max_tokens: 1000 leaves no room for the conversation in context_tokens (1000)",
				`profiles.typo.compact_with: unknown profile "smal"; known profiles: huge, small, tight, typo; did you mean "small"?`,
			},
		},
		{
			name: "scripted profile with remote keys",
			yaml: minimal + `profiles: { s: { provider: scripted, base_url: "http://h/v1", model: m, api_key_env: KEY, max_tokens: 10 } }`,
			want: []string{
				"profiles.s.base_url: provider scripted takes no base_url; it applies to providers anthropic and openai",
				"profiles.s.api_key_env: provider scripted takes no api_key_env",
				"profiles.s.max_tokens: provider scripted takes no max_tokens",
			},
		},
		{
			name: "scripted rules with tools",
			yaml: minimal + `profiles:
  s:
    provider: scripted
    rules:
      - { match: a, reply: ok, tools: [ { name: "", args: {} }, { name: "has space" }, { name: fs__read, args: { path: "{{.Text" , deep: [ { x: "{{end}}" } ] } } ] }
      - { match: b, fail: boom, tools: [ { name: t } ] }
      - { match: c }
      - { match: d, reply: ok, tools: [ { name: t, args: "path=x" } ] }
      - { match: e, reply: ok, tools: [ { name: t, arg: { x: 1 } } ] }`,
			want: []string{
				`profiles.s.rules[0].tools[0].name: required`,
				`profiles.s.rules[0].tools[1].name: invalid tool name "has space"; must match ^[A-Za-z0-9_-]{1,64}$`,
				`profiles.s.rules[0].tools[2].args.path: template: args:1: unclosed action`,
				`profiles.s.rules[0].tools[2].args.deep[0].x: template: args:1: unexpected {{end}}`,
				`profiles.s.rules[1]: has both tools and fail; a failing rule calls no tools`,
				`profiles.s.rules[2]: has neither reply nor fail; a rule either replies or fails`,
				`profiles.s.rules[3].tools[0].args: want a mapping, got a string`,
				`profiles.s.rules[4].tools[0].arg: unknown key; did you mean "args"?`,
			},
		},
		{
			name: "empty file",
			yaml: ``,
			want: []string{"company.name: required", "seats: at least one seat is required"},
		},
		{
			name: "agent role required",
			yaml: `
company: { name: acme }
roles: { support: { charter: works as support, profile: p } }
profiles: { p: { provider: scripted } }
seats: [ { handle: s1 } ]
`,
			want: []string{"seats[0].role: required for an agent seat; known roles: support"},
		},
		{
			name: "profile provider required",
			yaml: minimal + `profiles: { p: { rules: [] } }`,
			want: []string{"profiles.p.provider: required; supported providers: anthropic, openai, scripted"},
		},
		{
			name: "duration without unit",
			yaml: minimal + `profiles: { p: { provider: scripted, delay: 2 } }`,
			want: []string{`profiles.p.delay: invalid duration 2; write it with a unit, e.g. "2s"`},
		},
		{
			name: "bad duration string",
			yaml: minimal + `profiles: { p: { provider: scripted, delay: "2 sec" } }
roles: { r: { charter: works as r, profile: p } }`,
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
			want: []string{"api.zzz: unknown key; valid keys: allowed_origins, auth_failures_per_minute, denied_audits_per_minute, hosts, insecure_http, listen, mutations_per_minute, tls"},
			not:  []string{"did you mean"},
		},
		{
			name: "invalid profile and role names",
			yaml: minimal + `profiles: { "-p": { provider: scripted } }
roles: { "r x": { charter: works as r-x, profile: "-p" } }`,
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
		{
			name: "nodes below range",
			yaml: minimal + `nodes: { heartbeat_timeout: 999ms, drain_timeout: 0s, release_wait: -1s, rebalance_interval: 0, rebalance_max_moves: 0 }`,
			want: []string{
				"nodes.heartbeat_timeout: 999ms is out of range; must be between 1s and 1m",
				"nodes.drain_timeout: 0s is out of range; must be between 1s and 1h",
				"nodes.release_wait: -1s is out of range; must be between 0s and 1h",
				"nodes.rebalance_interval: 0s is out of range; must be between 1s and 1h",
				"nodes.rebalance_max_moves: 0 is out of range; must be between 1 and 100",
			},
		},
		{
			name: "nodes above range",
			yaml: minimal + `nodes: { heartbeat_timeout: 61s, drain_timeout: 1h0m1s, release_wait: 2h, rebalance_interval: 90m, rebalance_max_moves: 101 }`,
			want: []string{
				"nodes.heartbeat_timeout: 1m1s is out of range; must be between 1s and 1m",
				"nodes.drain_timeout: 1h0m1s is out of range; must be between 1s and 1h",
				"nodes.release_wait: 2h is out of range; must be between 0s and 1h",
				"nodes.rebalance_interval: 1h30m is out of range; must be between 1s and 1h",
				"nodes.rebalance_max_moves: 101 is out of range; must be between 1 and 100",
			},
		},
		{
			name: "nodes duration without unit",
			yaml: minimal + `nodes: { drain_timeout: 60 }`,
			want: []string{`nodes.drain_timeout: invalid duration 60; write it with a unit, e.g. "60s"`},
			not:  []string{"out of range"},
		},
		{
			name: "nodes wrong types",
			yaml: minimal + `nodes: { heartbeat_timeout: soon, rebalance_max_moves: many }`,
			want: []string{
				`nodes.heartbeat_timeout: invalid duration "soon"`,
				`nodes.rebalance_max_moves: invalid value "many"; want an integer`,
			},
			not: []string{"out of range"},
		},
		{
			name: "nodes unknown key",
			yaml: minimal + `nodes: { heartbeat_timout: 2s, beat: 1s }`,
			want: []string{
				`nodes.heartbeat_timout: unknown key; did you mean "heartbeat_timeout"?`,
				`nodes.beat: unknown key; valid keys: drain_timeout, heartbeat_timeout, max_tool_calls, mcp_allow, rebalance_interval, rebalance_max_moves, reconcile_interval, release_wait, workspaces`,
			},
		},
		{
			name: "log format and level unknown",
			yaml: minimal + `log: { format: yaml, level: verbose }`,
			want: []string{
				`log.format: unknown format "yaml"; must be one of: text, json`,
				`log.level: unknown level "verbose"; must be one of: debug, info, warn, error`,
			},
		},
		{
			name: "metrics listen not an address",
			yaml: minimal + `metrics: { listen: "9464" }`,
			want: []string{`metrics.listen: "9464" is not a host:port address, e.g. 127.0.0.1:9464; leave it empty to serve no metrics listener`},
		},
		{
			name: "metrics listen with metrics off",
			yaml: minimal + `metrics: { enabled: false, listen: "127.0.0.1:9464" }`,
			want: []string{`metrics.listen: "127.0.0.1:9464" is set but metrics.enabled is false, so it would serve nothing; remove one of them`},
		},
		{
			name: "metrics listen beyond loopback without a token",
			yaml: minimal + `metrics: { listen: "0.0.0.0:9464" }`,
			want: []string{`metrics.token_env: required: metrics.listen 0.0.0.0:9464 is reachable beyond this machine`},
		},
		{
			name: "metrics token unset and without a listener",
			yaml: minimal + `metrics: { token_env: CREWLET_TEST_UNSET_METRICS }`,
			want: []string{`metrics.token_env: set, but metrics.listen is empty`},
		},
		{
			name: "metrics token not in the environment",
			yaml: minimal + `metrics: { listen: "0.0.0.0:9464", token_env: CREWLET_TEST_UNSET_METRICS }`,
			want: []string{`metrics.token_env: environment variable CREWLET_TEST_UNSET_METRICS is not set or empty`},
		},
		{
			name: "pprof without a metrics listener",
			yaml: minimal + `metrics: { pprof: true }`,
			want: []string{`metrics.pprof: true, but metrics.listen is empty, so no listener serves the profiles; set metrics.listen or turn pprof off`},
		},
		{
			name: "log unknown key",
			yaml: minimal + `log: { formt: json }`,
			want: []string{`log.formt: unknown key; did you mean "format"?`},
		},
		{
			name: "mailbox below range",
			yaml: minimal + `mailbox: { retire_after: 999ms, keep_acked: -1, keep_acked_for: -1s, retry_backoff: 9ms, backstop: 59s }
nodes: { max_tool_calls: 0 }`,
			want: []string{
				"mailbox.backstop: 59s is out of range; must be between 1m and 24h",
				"nodes.max_tool_calls: 0 is out of range; must be between 1 and 10000",
				"mailbox.retire_after: 999ms is out of range; must be between 1s and 720h",
				"mailbox.keep_acked: -1 is out of range; must be between 0 and 10000000",
				"mailbox.keep_acked_for: -1s is out of range; must be between 0s and 8760h",
				"mailbox.retry_backoff: 9ms is out of range; must be between 10ms and 10m",
			},
		},
		{
			name: "mailbox above range",
			yaml: minimal + `mailbox: { retire_after: 721h, keep_acked: 10000001, keep_acked_for: 8761h, retry_backoff: 10m1s, backstop: 25h }
nodes: { max_tool_calls: 10001 }`,
			want: []string{
				"mailbox.backstop: 25h is out of range; must be between 1m and 24h",
				"nodes.max_tool_calls: 10001 is out of range; must be between 1 and 10000",
				"mailbox.retire_after: 721h is out of range; must be between 1s and 720h",
				"mailbox.keep_acked: 10000001 is out of range; must be between 0 and 10000000",
				"mailbox.keep_acked_for: 8761h is out of range; must be between 0s and 8760h",
				"mailbox.retry_backoff: 10m1s is out of range; must be between 10ms and 10m",
			},
		},
		{
			name: "mailbox zero durations",
			yaml: minimal + `mailbox: { retire_after: 0, keep_acked_for: 0, retry_backoff: 0s }`,
			want: []string{
				"mailbox.retire_after: 0s is out of range; must be between 1s and 720h",
				"mailbox.retry_backoff: 0s is out of range; must be between 10ms and 10m",
			},
			not: []string{"keep_acked_for"},
		},
		{
			name: "mailbox duration without unit",
			yaml: minimal + `mailbox: { retire_after: 3600, retry_backoff: 10 }`,
			want: []string{
				`mailbox.retire_after: invalid duration 3600; write it with a unit, e.g. "3600s"`,
				`mailbox.retry_backoff: invalid duration 10; write it with a unit, e.g. "10s"`,
			},
			not: []string{"out of range"},
		},
		{
			name: "mailbox wrong types",
			yaml: minimal + `mailbox: { keep_acked: all, keep_acked_for: forever }`,
			want: []string{
				`mailbox.keep_acked: invalid value "all"; want an integer`,
				`mailbox.keep_acked_for: invalid duration "forever"`,
			},
			not: []string{"out of range"},
		},
		{
			name: "mailbox unknown key",
			yaml: minimal + `mailbox: { retire_afer: 1h, zzz: 1 }`,
			want: []string{
				`mailbox.retire_afer: unknown key; did you mean "retire_after"?`,
				`mailbox.zzz: unknown key; valid keys: backstop, dead_letter_keep, human_keep, keep_acked, keep_acked_for, key_prefix, max_memory_percent, max_unread, read_batch, retire_after, retry_backoff, sender_per_minute`,
			},
		},
		{
			name: "health out of range",
			yaml: minimal + `health: { interval: 500ms, backlog: 0, failing_turns: 101, gone_after: -1s, dead_letters: 0 }`,
			want: []string{
				"health.interval: 500ms is out of range; must be between 1s and 1h",
				"health.backlog: 0 is out of range; must be between 1 and 10000000",
				"health.failing_turns: 101 is out of range; must be between 1 and 100",
				"health.gone_after: -1s is out of range; must be between 0s and 1h",
				"health.dead_letters: 0 is out of range; must be between 1 and 100000",
			},
		},
		{
			name: "health notify",
			yaml: minimal + `health:
  notify:
    - { url: 'https://user:hunter2@hooks.example/x' }
    - { url: 'ftp://hooks.example/x', states: [gone, sleepy] }
    - { url: 'https://hooks.example/y', headers_from: { authorization: CREWLET_TEST_UNSET_HOOK, 'bad header': X } }
    - { url: '' }
    - { urll: 'https://hooks.example/z' }
    - { url: 'http://hooks.example/plain' }
    - { url: 'http://127.0.0.1:9000/local' }
    - { url: 'http://localhost:9000/local' }`,
			want: []string{
				`health.notify[5].url: "http://hooks.example/plain" is plain http to another machine`,
				"health.notify[0].url: must not hold credentials; send them as a header with headers_from",
				`health.notify[1].url: invalid URL "ftp://hooks.example/x"; want an http or https URL`,
				`health.notify[1].states[1]: unknown state "sleepy"; valid states: gone, unproven_teardown, unplaceable, establishing_too_long, failing, dead_letters_rising, turn_overrunning, backlog, held, paused, waiting, ok`,
				"health.notify[2].headers_from.authorization: environment variable CREWLET_TEST_UNSET_HOOK is not set",
				`health.notify[2].headers_from.bad header: invalid header name "bad header"`,
				"health.notify[3].url: required: an http or https URL",
				`health.notify[4].urll: unknown key; did you mean "url"?`,
			},
			not: []string{"hunter2", "health.notify[6]", "health.notify[7]"},
		},
		{
			name: "maintenance below range",
			yaml: minimal + `maintenance: { interval: 999ms, ledger_retention: 59m59s }`,
			want: []string{
				"maintenance.interval: 999ms is out of range; must be between 1s and 24h",
				"maintenance.ledger_retention: 59m59s is out of range; must be between 1h and 8760h",
			},
		},
		{
			name: "maintenance above range",
			yaml: minimal + `maintenance: { interval: 24h0m1s, ledger_retention: 8761h }`,
			want: []string{
				"maintenance.interval: 24h0m1s is out of range; must be between 1s and 24h",
				"maintenance.ledger_retention: 8761h is out of range; must be between 1h and 8760h",
			},
		},
		{
			name: "maintenance zero and unitless",
			yaml: minimal + `maintenance: { interval: 0, ledger_retention: 168 }`,
			want: []string{
				"maintenance.interval: 0s is out of range; must be between 1s and 24h",
				`maintenance.ledger_retention: invalid duration 168; write it with a unit, e.g. "168s"`,
			},
			not: []string{"ledger_retention: 0s"},
		},
		{
			name: "maintenance unknown key",
			yaml: minimal + `maintenance: { intervl: 1m, retention: 1h, event_retenton: 1h }`,
			want: []string{
				`maintenance.intervl: unknown key; did you mean "interval"?`,
				`maintenance.retention: unknown key; valid keys: approval_retention, audit_retention, counterparty_retention, diary_max_per_seat, diary_retention, episode_retention, event_retention, interval, ledger_retention, message_retention, node_retention, ticket_retention, turn_retention`,
				`maintenance.event_retenton: unknown key; did you mean "event_retention"?`,
			},
		},
		{
			name: "retentions below range",
			yaml: minimal + `maintenance: { message_retention: 59m, event_retention: 0, diary_retention: 30m, episode_retention: 1m, counterparty_retention: 59m59s, node_retention: 1s,
  ticket_retention: 59m, approval_retention: 0, diary_max_per_seat: 0 }`,
			want: []string{
				"maintenance.ticket_retention: 59m is out of range; must be between 1h and 87600h",
				"maintenance.approval_retention: 0s is out of range; must be between 1h and 87600h",
				"maintenance.diary_max_per_seat: 0 is out of range; must be between 1 and 10000000",
				"maintenance.message_retention: 59m is out of range; must be between 1h and 87600h",
				"maintenance.event_retention: 0s is out of range; must be between 1h and 87600h",
				"maintenance.diary_retention: 30m is out of range; must be between 1h and 87600h",
				"maintenance.episode_retention: 1m is out of range; must be between 1h and 87600h",
				"maintenance.counterparty_retention: 59m59s is out of range; must be between 1h and 87600h",
				"maintenance.node_retention: 1s is out of range; must be between 1h and 87600h",
			},
			// out of range already; comparing it with turn_retention or
			// ledger_retention is noise
			not: []string{"shorter than maintenance.turn_retention", "shorter than maintenance.ledger_retention"},
		},
		{
			name: "retentions above range",
			yaml: minimal + `maintenance: { message_retention: 87601h, event_retention: 87601h, diary_retention: 87601h, episode_retention: 87601h, counterparty_retention: 87601h, node_retention: 87601h,
  ticket_retention: 87601h, approval_retention: 87601h, diary_max_per_seat: 10000001 }`,
			want: []string{
				"maintenance.ticket_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.approval_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.diary_max_per_seat: 10000001 is out of range; must be between 1 and 10000000",
				"maintenance.message_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.event_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.diary_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.episode_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.counterparty_retention: 87601h is out of range; must be between 1h and 87600h",
				"maintenance.node_retention: 87601h is out of range; must be between 1h and 87600h",
			},
		},
		{
			name: "retentions unitless or not durations",
			yaml: minimal + `maintenance: { message_retention: 2160, event_retention: 720, diary_retention: forever, episode_retention: 1y, counterparty_retention: -1h, node_retention: 168 }`,
			want: []string{
				`maintenance.message_retention: invalid duration 2160; write it with a unit, e.g. "2160s"`,
				`maintenance.event_retention: invalid duration 720; write it with a unit`,
				`maintenance.diary_retention: invalid duration "forever"`,
				`maintenance.episode_retention: invalid duration "1y"`,
				"maintenance.counterparty_retention: -1h is out of range; must be between 1h and 87600h",
				`maintenance.node_retention: invalid duration 168; write it with a unit`,
			},
			not: []string{"message_retention: 0s", "node_retention: 0s"},
		},
		{
			name: "maintenance not a mapping",
			yaml: minimal + `maintenance: 15m`,
			want: []string{`maintenance: expected a map or struct, got "string"`},
			not:  []string{"maintenance.interval"},
		},
		{
			name: "placement unknown key",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, placement: { label: { tools: git } } } }`,
			want: []string{`roles.r.placement.label: unknown key; did you mean "labels"?`},
		},
		{
			name: "invalid label keys and values",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles:
  r:
    charter: works as r
    profile: p
    placement:
      labels:
        "-tools": git
        zone: "eu west"
        "": x
        rack: ""
        long: ` + strings.Repeat("v", 64) + `
        ok: ` + strings.Repeat("v", 63),
			want: []string{
				`roles.r.placement.labels.-tools: invalid label key "-tools"; label keys must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`,
				`roles.r.placement.labels.zone: invalid label value "eu west"; label values must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`,
				`roles.r.placement.labels: empty label key; label keys must match`,
				`roles.r.placement.labels.rack: empty label value; label values must match`,
				`roles.r.placement.labels.long: invalid label value "` + strings.Repeat("v", 64) + `"`,
			},
			not: []string{"labels.ok"},
		},
		{
			name: "label with no value",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, placement: { labels: { tools: } } } }`,
			want: []string{`roles.r.placement.labels.tools: empty label value; label values must match`},
		},
		{
			name: "label key with a dot",
			yaml: minimal + `profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, placement: { labels: { topology.zone: eu } } } }`,
			want: []string{`roles.r.placement.labels.topology: want a string, got a mapping; a label key must not contain "."`},
		},
		{
			name: "labels not a mapping",
			yaml: `company: { name: acme }
profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, placement: { labels: [git] } } }
seats: [ { handle: a, role: r } ]`,
			want: []string{`roles.r.placement.labels`},
			// the role did not decode whole, but it exists.
			not: []string{`unknown role "r"`},
		},
		{
			name: "profile weight out of range",
			yaml: minimal + `profiles:
  neg: { provider: scripted, weight: -1 }
  big: { provider: scripted, weight: 1000001 }
  word: { provider: scripted, weight: lots }
  top: { provider: scripted, weight: 1000000 }
  zero: { provider: scripted, weight: 0 }`,
			want: []string{
				"profiles.neg.weight: -1 is out of range; must be between 0 (never picked by weighted selection) and 1000000",
				"profiles.big.weight: 1000001 is out of range; must be between 0 (never picked by weighted selection) and 1000000",
				`profiles.word.weight: invalid value "lots"; want an integer`,
			},
			not: []string{"profiles.top", "profiles.zero", "profiles.word.weight: 0"},
		},
		{
			name: "profile max_load negative",
			yaml: minimal + `profiles:
  one: { provider: scripted, max_load: -1 }
  five: { provider: scripted, max_load: -5 }
  word: { provider: scripted, max_load: many }
  none: { provider: scripted, max_load: 0 }`,
			want: []string{
				// -1 written is refused: it is not a way to say unlimited.
				"profiles.one.max_load: -1 is negative; 0 means no turns at all, and leaving out max_load means unlimited",
				"profiles.five.max_load: -5 is negative; 0 means no turns at all, and leaving out max_load means unlimited",
				`profiles.word.max_load: invalid value "many"; want an integer`,
			},
			not: []string{"profiles.none", "profiles.word.max_load: 0"},
		},
		{
			name: "weight and max_load written without a value",
			yaml: minimal + `profiles: { p: { provider: scripted, weight: , max_load: ~ } }`,
			want: []string{
				"profiles.p.weight: empty value; write a weight from 0 (never picked by weighted selection) to 1000000, or leave out weight for the default 1",
				"profiles.p.max_load: empty value; write the most concurrent turns (0 allows none), or leave out max_load for no limit",
			},
		},
		{
			name: "profile credential",
			yaml: minimal + `profiles:
  upper: { provider: scripted, credential: Main }
  spaced: { provider: scripted, credential: "a b" }
  empty: { provider: scripted, credential: "" }
  "-p": { provider: scripted }
  shared: { provider: scripted, credential: upper }`,
			want: []string{
				`profiles.upper.credential: invalid credential name "Main"; names must be lowercase letters`,
				`profiles.spaced.credential: invalid credential name "a b"`,
				`profiles.empty.credential: empty; leave it out to use the profile's name`,
				`profiles.-p: invalid profile name "-p"`,
			},
			// a credential defaulted to an invalid profile name is that
			// problem, once; a credential may be another profile's name.
			not: []string{"profiles.-p.credential", "profiles.shared"},
		},
		{
			name: "exhausted_pattern does not compile",
			yaml: minimal + `profiles:
  bad: { provider: openai, model: m, base_url: "http://127.0.0.1:11434/v1", exhausted_pattern: "(?i)quota(" }
  lookahead: { provider: scripted, exhausted_pattern: "limit(?=d)" }
  ok: { provider: scripted, exhausted_pattern: "(?i)usage limit" }`,
			want: []string{
				"profiles.bad.exhausted_pattern: error parsing regexp: missing closing ): `(?i)quota(`; want a Go (RE2) regexp",
				"profiles.lookahead.exhausted_pattern: error parsing regexp: invalid or unsupported Perl syntax: `(?=`; want a Go (RE2) regexp",
			},
			not: []string{"profiles.ok"},
		},
		{
			name: "pool profiles unknown, duplicate, empty",
			yaml: minimal + `profiles: { gpt: { provider: scripted }, local: { provider: scripted } }
roles:
  typo: { charter: works as typo, profiles: [local, gtp] }
  far: { charter: works as far, profiles: [zzzzzz] }
  dup: { charter: works as dup, profiles: [gpt, local, gpt] }
  blank: { charter: works as blank, profiles: [gpt, ""] }
  emptylist: { charter: works as emptylist, profiles: [] }
  one: { charter: works as one, profile: gtp }`,
			want: []string{
				`roles.typo.profiles[1]: unknown profile "gtp"; known profiles: gpt, local; did you mean "gpt"?`,
				`roles.far.profiles[0]: unknown profile "zzzzzz"; known profiles: gpt, local`,
				`roles.dup.profiles[2]: duplicate profile "gpt" (also roles.dup.profiles[0]); a pool names each profile once`,
				`roles.blank.profiles[1]: empty profile name; known profiles: gpt, local`,
				`roles.emptylist.profiles: empty; list at least one profile; known profiles: gpt, local`,
				// the one-item form is named by its own key
				`roles.one.profile: unknown profile "gtp"; known profiles: gpt, local; did you mean "gpt"?`,
			},
			not: []string{"roles.typo.profiles[0]", `"zzzzzz"; known profiles: gpt, local; did you mean`, "roles.dup.profiles[0]:", "roles.dup.profiles[1]:"},
		},
		{
			name: "profile and profiles both",
			yaml: minimal + `profiles: { a: { provider: scripted }, b: { provider: scripted } }
roles:
  same: { charter: works as same, profile: a, profiles: [a, b] }
  other: { charter: works as other, profile: b, profiles: [a] }
  emptylist: { charter: works as emptylist, profile: a, profiles: [] }`,
			want: []string{
				"roles.same: has both profile and profiles; use one: profile is the one-item form of profiles",
				"roles.other: has both profile and profiles; use one: profile is the one-item form of profiles",
				"roles.emptylist: has both profile and profiles; use one",
			},
		},
		{
			name: "neither profile nor profiles",
			yaml: minimal + `profiles: { a: { provider: scripted } }
roles: { r: { charter: x } }`,
			want: []string{"roles.r.profile: required: name the role's profile (profile: x) or its pool (profiles: [x, y]); known profiles: a"},
		},
		{
			name: "selection unknown",
			yaml: minimal + `profiles: { a: { provider: scripted } }
roles: { r: { charter: works as r, profiles: [a], selection: cheapest }, s: { charter: works as s, profile: a, selection: Ordered } }`,
			want: []string{
				`roles.r.selection: unknown selection "cheapest"; must be one of: weighted, ordered`,
				`roles.s.selection: unknown selection "Ordered"; must be one of: weighted, ordered`,
			},
		},
		{
			name: "on_busy unknown",
			yaml: minimal + `profiles: { a: { provider: scripted } }
roles: { r: { charter: works as r, profile: a, on_busy: drop }, s: { charter: works as s, profile: a, on_busy: "" }, t: { charter: works as t, profile: a, on_busy: interrupt } }`,
			want: []string{
				`roles.r.on_busy: "drop" is not a busy policy; use one of enqueue, reject, interrupt`,
			},
		},
		{
			name: "weighted pool of weight 0 only",
			yaml: minimal + `profiles:
  a: { provider: scripted, weight: 0 }
  b: { provider: scripted, weight: 0 }
  c: { provider: scripted }
roles:
  zero: { charter: works as zero, profiles: [a, b] }
  alone: { charter: works as alone, profile: a, selection: weighted }
  mixed: { charter: works as mixed, profiles: [a, c] }
  ordered: { charter: works as ordered, profiles: [a, b], selection: ordered }
  unknown: { charter: works as unknown, profiles: [a, x] }`,
			want: []string{
				"roles.zero.profiles: every profile of the pool has weight 0, and weighted selection never picks a profile of weight 0; give one a weight above 0, or set selection: ordered to take the pool in order",
				"roles.alone.profile: every profile of the pool has weight 0",
				`roles.unknown.profiles[1]: unknown profile "x"`,
			},
			// ordered selection does not consult weights; a pool with an
			// unknown profile is told that first.
			not: []string{"roles.mixed", "roles.ordered", "roles.unknown.profiles:"},
		},
		{
			name: "models.allow refuses other models",
			yaml: minimal + `models: { allow: [gpt-4o-mini, claude-sonnet-4-5] }
profiles:
  gpt: { provider: openai, model: gpt-4o-mini, base_url: "http://127.0.0.1:11434/v1" }
  big: { provider: openai, model: gpt-4o, base_url: "http://127.0.0.1:11434/v1" }
  local: { provider: scripted }`,
			want: []string{
				`profiles.big.model: model "gpt-4o" is not in models.allow (gpt-4o-mini, claude-sonnet-4-5); add it to models.allow or change the model`,
				`profiles.local.model: model "scripted" is not in models.allow (gpt-4o-mini, claude-sonnet-4-5); add it to models.allow or change the model`,
			},
			not: []string{"profiles.gpt"},
		},
		{
			name: "models.allow entries",
			yaml: minimal + `models: { allow: [gpt-4o, "", "  ", "gpt\tx", gpt-4o, scripted] }
profiles: { local: { provider: scripted } }`,
			want: []string{
				`models.allow[1]: empty; list model ids as profiles name them, e.g. "gpt-4o-mini"`,
				`models.allow[2]: empty; list model ids`,
				`models.allow[3]: "gpt\tx" holds a control character; list model ids as profiles name them`,
				`models.allow[4]: duplicate model "gpt-4o" (also models.allow[0])`,
			},
			not: []string{"models.allow[0]:", "models.allow[5]:", "profiles.local"},
		},
		{
			name: "a2a.push.allow entries",
			yaml: minimal + `a2a: { push: { allow: ["http://127.0.0.1:9000/hooks/", "", "ftp://hooks", "https://u:p@hooks.internal/", "http://127.0.0.1:9000/hooks/", "https://hooks.internal/?a=1"] } }`,
			want: []string{
				`a2a.push.allow[1]: empty; write a URL prefix a webhook may start with, e.g. "http://127.0.0.1:9000/hooks/"`,
				`a2a.push.allow[2]: "ftp://hooks" is not a URL prefix; write an http or https URL with a host`,
				`a2a.push.allow[3]: must not hold credentials`,
				`a2a.push.allow[4]: duplicate entry "http://127.0.0.1:9000/hooks/" (also a2a.push.allow[0])`,
				`a2a.push.allow[5]: "https://hooks.internal/?a=1" is not a URL prefix`,
			},
			not: []string{"a2a.push.allow[0]:"},
		},
		{
			name: "models.allow not a list",
			yaml: minimal + `models: { allow: { gpt: 1 } }`,
			want: []string{"models.allow"},
		},
		{
			name: "quarantine.base out of range",
			yaml: minimal + `quarantine: { base: 999ms }`,
			want: []string{"quarantine.base: 999ms is out of range; must be between 1s and 24h"},
		},
		{
			name: "quarantine.base above range",
			yaml: minimal + `quarantine: { base: 24h0m1s }`,
			want: []string{"quarantine.base: 24h0m1s is out of range; must be between 1s and 24h"},
		},
		{
			name: "quarantine.base without unit",
			yaml: minimal + `quarantine: { base: 1800 }`,
			want: []string{`quarantine.base: invalid duration 1800; write it with a unit, e.g. "1800s"`},
			not:  []string{"out of range"},
		},
		{
			name: "pool keys misspelled",
			yaml: minimal + `quarantine: { bse: 1m }
models: { alow: [m] }
profiles: { p: { provider: scripted, wieght: 2, max_laod: 3, credentail: c, exhausted_patern: x } }
roles: { r: { charter: works as r, proflies: [p], selecton: ordered } }`,
			want: []string{
				`quarantine.bse: unknown key; did you mean "base"?`,
				`models.alow: unknown key; did you mean "allow"?`,
				`profiles.p.wieght: unknown key; did you mean "weight"?`,
				`profiles.p.max_laod: unknown key; did you mean "max_load"?`,
				`profiles.p.credentail: unknown key; did you mean "credential"?`,
				`profiles.p.exhausted_patern: unknown key; did you mean "exhausted_pattern"?`,
				`roles.r.proflies: unknown key; did you mean "profiles"?`,
				`roles.r.selecton: unknown key; did you mean "selection"?`,
			},
		},
	}
	t.Setenv("CREWLET_TEST_KEY_SET", "sk-test-value")
	t.Setenv("CREWLET_TEST_KEY_EMPTY", "")
	unsetEnv(t, "CREWLET_TEST_UNSET_KEY")
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
	t.Parallel()
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal): %v", err)
	}
	tests := []struct {
		key       string
		got, want any
	}{
		{"company.timezone", c.Company.Timezone, "UTC"},
		{"company.budget", c.Company.Budget.Caps(), crewlet.BudgetCaps{}},
		{"Location()", c.Location(), time.UTC},
		{"temporal.address", c.Temporal.Address, "127.0.0.1:7233"},
		{"temporal.namespace", c.Temporal.Namespace, "default"},
		{"temporal.task_queue", c.Temporal.TaskQueue, "crewlet"},
		{"temporal.deployment.name", c.Temporal.Deployment.Name, ""},
		{"temporal.deployment.build_id", c.Temporal.Deployment.BuildID, ""},
		{"temporal.deployment.promote", c.Temporal.Deployment.Promote, "first"},
		{"postgres.url_env", c.Postgres.URLEnv, "CREWLET_PG_URL"},
		{"redis.url_env", c.Redis.URLEnv, "CREWLET_REDIS_URL"},
		{"api.listen", c.API.Listen, "127.0.0.1:8080"},
		{"mailbox.key_prefix", c.Mailbox.KeyPrefix, "crewlet"},
		{"mailbox.read_batch", c.Mailbox.ReadBatch, 16},
		{"log.format", c.Log.Format, "text"},
		{"log.level", c.Log.Level, "info"},
		{"metrics.listen", c.Metrics.Listen, ""},
		{"metrics.enabled", c.Metrics.Enabled, true},
		{"metrics.seat_labels", c.Metrics.SeatLabels, true},
		{"metrics.pprof", c.Metrics.Pprof, false},
		{"nodes.heartbeat_timeout", c.Nodes.HeartbeatTimeout, 3 * time.Second},
		{"nodes.drain_timeout", c.Nodes.DrainTimeout, 60 * time.Second},
		{"nodes.release_wait", c.Nodes.ReleaseWait, 30 * time.Second},
		{"nodes.rebalance_interval", c.Nodes.RebalanceInterval, 30 * time.Second},
		{"nodes.rebalance_max_moves", c.Nodes.RebalanceMaxMoves, 4},
		{"nodes.reconcile_interval", c.Nodes.ReconcileInterval, time.Minute},
		{"mailbox.retire_after", c.Mailbox.RetireAfter, 24 * time.Hour},
		{"mailbox.keep_acked", c.Mailbox.KeepAcked, 10000},
		{"mailbox.keep_acked_for", c.Mailbox.KeepAckedFor, 24 * time.Hour},
		{"mailbox.retry_backoff", c.Mailbox.RetryBackoff, 10 * time.Second},
		{"mailbox.human_keep", c.Mailbox.HumanKeep, 1000},
		{"mailbox.dead_letter_keep", c.Mailbox.DeadLetterKeep, 10000},
		{"maintenance.interval", c.Maintenance.Interval, 15 * time.Minute},
		{"maintenance.ledger_retention", c.Maintenance.LedgerRetention, 168 * time.Hour},
		{"maintenance.turn_retention", c.Maintenance.TurnRetention, 720 * time.Hour},
		{"maintenance.message_retention", c.Maintenance.MessageRetention, 2160 * time.Hour},
		{"maintenance.event_retention", c.Maintenance.EventRetention, 720 * time.Hour},
		{"maintenance.diary_retention", c.Maintenance.DiaryRetention, 8760 * time.Hour},
		{"maintenance.episode_retention", c.Maintenance.EpisodeRetention, 2160 * time.Hour},
		{"maintenance.counterparty_retention", c.Maintenance.CounterpartyRetention, 8760 * time.Hour},
		{"maintenance.node_retention", c.Maintenance.NodeRetention, 168 * time.Hour},
		{"quarantine.base", c.Quarantine.Base, 30 * time.Minute},
		{"models.allow (any model)", len(c.Models.Allow), 0},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %v, want %v", tt.key, tt.got, tt.want)
			}
		})
	}
}

// models has one profile of each provider, a role with every role key,
// and a role with none.
const models = `
company: { name: acme, timezone: America/New_York, budget: { tokens_per_month: 50000000 } }
profiles:
  gpt: { provider: openai, model: gpt-4o-mini, api_key_env: CREWLET_TEST_OPENAI_KEY, max_tokens: 2048, weight: 2, max_load: 8, credential: openai-main }
  ollama: { provider: openai, model: llama3, base_url: "http://127.0.0.1:11434/v1", context_tokens: 8192, compact_with: claude }
  claude: { provider: anthropic, model: claude-sonnet-4-5, api_key_env: CREWLET_TEST_ANTHROPIC_KEY }
  local:
    provider: scripted
    rules:
      - match: '(?i)^file (\S+)'
        tools:
          - name: fs__read_file
            args: { filePath: "/srv/{{index .Groups 1}}", Options: { maxBytes: 100, followLinks: false }, tags: [ "{{.From}}", 2 ] }
          - { name: tracker__list }
        reply: 'read {{len .Results}} results'
      - { match: '^boom', fail: 'always fails' }
roles:
  engineer:
    charter: works as engineer
    profile: gpt
    max_rounds: 32
    budget: { tokens_per_day: 2000000, tokens_per_week: 9000000 }
    mcp:
      - { name: tracker, url: "http://127.0.0.1:9000/mcp" }
      - { name: fs, command: [ "mcp-fs", "--root", "/srv/work" ], env: [ "LOG_LEVEL=debug", "MODE=a=b" ] }
  plain: { charter: works as plain, profile: local, reflect: true }
seats:
  - { handle: cto, role: engineer }
  - { handle: bot, role: plain }
`

func TestModelsRolesAndTools(t *testing.T) {
	t.Setenv("CREWLET_TEST_OPENAI_KEY", "sk-test-openai")
	t.Setenv("CREWLET_TEST_ANTHROPIC_KEY", "sk-ant-test")
	c, err := Parse([]byte(models))
	if err != nil {
		t.Fatalf("Parse(models): %v", err)
	}

	if got, want := c.Company.Budget.Caps(), (crewlet.BudgetCaps{TokensPerMonth: 50_000_000}); got != want {
		t.Errorf("company.budget = %+v, want %+v", got, want)
	}
	if got, want := c.Location().String(), "America/New_York"; got != want {
		t.Errorf("Location() = %s, want %s", got, want)
	}

	profiles := []struct {
		name string
		want Profile
	}{
		{"gpt", Profile{Provider: "openai", BaseURL: "https://api.openai.com/v1", Model: "gpt-4o-mini", APIKeyEnv: "CREWLET_TEST_OPENAI_KEY", MaxTokens: 2048, ContextTokens: 128000,
			Weight: 2, MaxLoad: 8, Credential: "openai-main", maxLoadSet: true}},
		{"ollama", Profile{Provider: "openai", BaseURL: "http://127.0.0.1:11434/v1", Model: "llama3", ContextTokens: 8192, CompactWith: "claude",
			Weight: DefaultWeight, MaxLoad: Unlimited, Credential: "ollama"}},
		{"claude", Profile{Provider: "anthropic", BaseURL: "https://api.anthropic.com", Model: "claude-sonnet-4-5", APIKeyEnv: "CREWLET_TEST_ANTHROPIC_KEY", ContextTokens: 200000,
			Weight: DefaultWeight, MaxLoad: Unlimited, Credential: "claude"}},
	}
	for _, tt := range profiles {
		if got := c.Profiles[tt.name]; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("profiles.%s = %+v, want %+v", tt.name, got, tt.want)
		}
	}

	// Tool arguments keep their keys' case at any depth; viper would have
	// folded them.
	rule := c.Profiles["local"].Rules[0]
	wantTools := []RuleTool{
		{Name: "fs__read_file", Args: map[string]any{
			"filePath": "/srv/{{index .Groups 1}}",
			"Options":  map[string]any{"maxBytes": 100, "followLinks": false},
			"tags":     []any{"{{.From}}", 2},
		}},
		{Name: "tracker__list"},
	}
	if !reflect.DeepEqual(rule.Tools, wantTools) {
		t.Errorf("rules[0].tools =\n%#v\nwant\n%#v", rule.Tools, wantTools)
	}
	if got := c.Profiles["local"].Rules[1]; got.Fail != "always fails" || got.Tools != nil {
		t.Errorf("rules[1] = %+v, want a failing rule with no tools", got)
	}

	eng := c.Roles["engineer"]
	if eng.MaxRounds != 32 {
		t.Errorf("roles.engineer.max_rounds = %d, want 32", eng.MaxRounds)
	}
	if got, want := eng.Budget.Caps(), (crewlet.BudgetCaps{TokensPerDay: 2_000_000, TokensPerWeek: 9_000_000}); got != want {
		t.Errorf("roles.engineer.budget = %+v, want %+v", got, want)
	}
	wantMCP := []MCPServer{
		{Name: "tracker", URL: "http://127.0.0.1:9000/mcp"},
		{Name: "fs", Command: []string{"mcp-fs", "--root", "/srv/work"}, Env: []string{"LOG_LEVEL=debug", "MODE=a=b"}},
	}
	if !reflect.DeepEqual(eng.MCP, wantMCP) {
		t.Errorf("roles.engineer.mcp = %+v, want %+v", eng.MCP, wantMCP)
	}
	plain := c.Roles["plain"]
	if plain.MaxRounds != DefaultMaxRounds || plain.Budget != (Budget{}) || plain.MCP != nil || !plain.Reflect {
		t.Errorf("roles.plain = %+v, want max_rounds %d, no budget, no mcp, reflect", plain, DefaultMaxRounds)
	}
	if eng.Reflect {
		t.Errorf("roles.engineer.reflect = true, want the default false")
	}
	if got, want := c.Profiles["local"].ContextTokens, DefaultContextTokens[ProviderScripted]; got != want {
		t.Errorf("profiles.local.context_tokens = %d, want the scripted default %d", got, want)
	}
	// No max_tokens: a quarter of the context, up to 4096, is kept for the answer.
	if got, want := c.Profiles["ollama"].InputBudget(), int64(8192-2048); got != want {
		t.Errorf("profiles.ollama input budget = %d, want %d", got, want)
	}
	if got, want := c.Profiles["gpt"].InputBudget(), int64(128000-2048); got != want {
		t.Errorf("profiles.gpt input budget = %d, want %d", got, want)
	}

	// The same file on a host without the keys is refused, naming each
	// variable and never a value.
	unsetEnv(t, "CREWLET_TEST_OPENAI_KEY")
	t.Setenv("CREWLET_TEST_ANTHROPIC_KEY", " ")
	_, err = Parse([]byte(models))
	if err == nil {
		t.Fatal("Parse without the keys: no error")
	}
	want := "profiles.claude.api_key_env: environment variable CREWLET_TEST_ANTHROPIC_KEY is empty; export the key in it before starting crewlet\n" +
		"profiles.gpt.api_key_env: environment variable CREWLET_TEST_OPENAI_KEY is not set; export it before starting crewlet"
	if err.Error() != want {
		t.Errorf("error =\n%v\nwant\n%s", err, want)
	}
}

func TestLocationFallback(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"", "Local", "Mars/Olympus"} {
		c := &Config{Company: Company{Timezone: tz}}
		if got := c.Location(); got != time.UTC {
			t.Errorf("Location() with timezone %q = %v, want UTC", tz, got)
		}
	}
}

func TestSeatKindDefault(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
company: { name: acme }
profiles: { p: { provider: scripted, delay: 250ms } }
roles: { r: { charter: works as r, profile: p } }
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
	t.Setenv("CREWLET_API_LISTEN", "127.0.0.1:9999")
	t.Setenv("CREWLET_TEMPORAL_ADDRESS", "temporal:7233")
	t.Setenv("CREWLET_MAILBOX_READ_BATCH", "64")
	t.Setenv("CREWLET_NODES_HEARTBEAT_TIMEOUT", "2s")
	t.Setenv("CREWLET_NODES_DRAIN_TIMEOUT", "90s")
	t.Setenv("CREWLET_NODES_RELEASE_WAIT", "0")
	t.Setenv("CREWLET_NODES_REBALANCE_INTERVAL", "1m")
	t.Setenv("CREWLET_NODES_REBALANCE_MAX_MOVES", "8")
	t.Setenv("CREWLET_MAILBOX_RETIRE_AFTER", "1s")
	t.Setenv("CREWLET_MAILBOX_KEEP_ACKED", "0")
	t.Setenv("CREWLET_MAILBOX_KEEP_ACKED_FOR", "0")
	t.Setenv("CREWLET_MAILBOX_RETRY_BACKOFF", "250ms")
	t.Setenv("CREWLET_MAINTENANCE_INTERVAL", "1m")
	t.Setenv("CREWLET_MAINTENANCE_LEDGER_RETENTION", "720h")
	t.Setenv("CREWLET_MAINTENANCE_NODE_RETENTION", "24h")
	t.Setenv("CREWLET_COMPANY_BUDGET_TOKENS_PER_MONTH", "50000000")
	t.Setenv("CREWLET_COMPANY_BUDGET_TOKENS_PER_DAY", "0")
	t.Setenv("CREWLET_QUARANTINE_BASE", "2h")
	t.Setenv("CREWLET_LOG_FORMAT", "json")

	c, err := Parse([]byte(`company: { name: acme, budget: { tokens_per_day: 100 } }
seats: [ { handle: alice, kind: human } ]
api: { listen: 127.0.0.1:1 }
nodes: { heartbeat_timeout: 10s }
mailbox: { retire_after: 48h, keep_acked: 5 }
maintenance: { interval: 5m }
quarantine: { base: 5m }`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		env       string
		got, want any
	}{
		{"CREWLET_API_LISTEN over the file", c.API.Listen, "127.0.0.1:9999"},
		{"CREWLET_TEMPORAL_ADDRESS over the default", c.Temporal.Address, "temporal:7233"},
		{"CREWLET_MAILBOX_READ_BATCH", c.Mailbox.ReadBatch, 64},
		{"CREWLET_NODES_HEARTBEAT_TIMEOUT over the file", c.Nodes.HeartbeatTimeout, 2 * time.Second},
		{"CREWLET_NODES_DRAIN_TIMEOUT", c.Nodes.DrainTimeout, 90 * time.Second},
		{"CREWLET_NODES_RELEASE_WAIT bare 0", c.Nodes.ReleaseWait, time.Duration(0)},
		{"CREWLET_NODES_REBALANCE_INTERVAL", c.Nodes.RebalanceInterval, time.Minute},
		{"CREWLET_NODES_REBALANCE_MAX_MOVES", c.Nodes.RebalanceMaxMoves, 8},
		{"CREWLET_MAILBOX_RETIRE_AFTER over the file", c.Mailbox.RetireAfter, time.Second},
		{"CREWLET_MAILBOX_KEEP_ACKED 0 over the file", c.Mailbox.KeepAcked, 0},
		{"CREWLET_MAILBOX_KEEP_ACKED_FOR bare 0", c.Mailbox.KeepAckedFor, time.Duration(0)},
		{"CREWLET_MAILBOX_RETRY_BACKOFF", c.Mailbox.RetryBackoff, 250 * time.Millisecond},
		{"CREWLET_MAINTENANCE_INTERVAL over the file", c.Maintenance.Interval, time.Minute},
		{"CREWLET_MAINTENANCE_LEDGER_RETENTION", c.Maintenance.LedgerRetention, 720 * time.Hour},
		{"CREWLET_MAINTENANCE_NODE_RETENTION", c.Maintenance.NodeRetention, 24 * time.Hour},
		{"CREWLET_COMPANY_BUDGET_TOKENS_PER_MONTH", c.Company.Budget.TokensPerMonth, int64(50_000_000)},
		{"CREWLET_COMPANY_BUDGET_TOKENS_PER_DAY 0 over the file", c.Company.Budget.TokensPerDay, int64(0)},
		{"CREWLET_QUARANTINE_BASE over the file", c.Quarantine.Base, 2 * time.Hour},
		{"CREWLET_LOG_FORMAT", c.Log.Format, "json"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}

	t.Setenv("CREWLET_MAILBOX_READ_BATCH", "0")
	t.Setenv("CREWLET_NODES_HEARTBEAT_TIMEOUT", "2m")
	t.Setenv("CREWLET_NODES_DRAIN_TIMEOUT", "60")
	t.Setenv("CREWLET_MAILBOX_RETIRE_AFTER", "721h")
	t.Setenv("CREWLET_MAILBOX_KEEP_ACKED", "-1")
	t.Setenv("CREWLET_MAILBOX_RETRY_BACKOFF", "10")
	t.Setenv("CREWLET_MAINTENANCE_INTERVAL", "25h")
	t.Setenv("CREWLET_MAINTENANCE_LEDGER_RETENTION", "1m")
	t.Setenv("CREWLET_MAINTENANCE_NODE_RETENTION", "0")
	t.Setenv("CREWLET_COMPANY_BUDGET_TOKENS_PER_WEEK", "-5")
	t.Setenv("CREWLET_QUARANTINE_BASE", "25h")
	_, err = Parse([]byte(minimal))
	for _, w := range []string{
		"mailbox.read_batch: 0 is out of range",
		"nodes.heartbeat_timeout: 2m is out of range; must be between 1s and 1m",
		`nodes.drain_timeout: invalid duration "60"; write it with a unit`,
		"mailbox.retire_after: 721h is out of range; must be between 1s and 720h",
		"mailbox.keep_acked: -1 is out of range; must be between 0 and 10000000",
		`mailbox.retry_backoff: invalid duration "10"; write it with a unit`,
		"maintenance.interval: 25h is out of range; must be between 1s and 24h",
		"maintenance.ledger_retention: 1m is out of range; must be between 1h and 8760h",
		"maintenance.node_retention: 0s is out of range; must be between 1h and 87600h",
		"company.budget.tokens_per_week: -5 is negative",
		"quarantine.base: 25h is out of range; must be between 1s and 24h",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("an env override is not validated: want %q, err = %v", w, err)
		}
	}
}

func TestNodesBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want Nodes
	}{
		{"lowest", `nodes: { heartbeat_timeout: 1s, drain_timeout: 1s, release_wait: 0, rebalance_interval: 1s, rebalance_max_moves: 1, reconcile_interval: 1s, max_tool_calls: 1 }`,
			Nodes{HeartbeatTimeout: time.Second, DrainTimeout: time.Second, ReleaseWait: 0, RebalanceInterval: time.Second, RebalanceMaxMoves: 1, ReconcileInterval: time.Second, MaxToolCalls: 1}},
		{"highest", `nodes: { heartbeat_timeout: 60s, drain_timeout: 1h, release_wait: 60m, rebalance_interval: 3600s, rebalance_max_moves: 100, reconcile_interval: 1h, max_tool_calls: 10000 }`,
			Nodes{HeartbeatTimeout: time.Minute, DrainTimeout: time.Hour, ReleaseWait: time.Hour, RebalanceInterval: time.Hour, RebalanceMaxMoves: 100, ReconcileInterval: time.Hour, MaxToolCalls: 10000}},
		{"empty section keeps the defaults", "nodes:\n",
			Nodes{HeartbeatTimeout: 3 * time.Second, DrainTimeout: time.Minute, ReleaseWait: 30 * time.Second, RebalanceInterval: 30 * time.Second, RebalanceMaxMoves: 4, ReconcileInterval: time.Minute, MaxToolCalls: 64}},
		{"one key keeps the other defaults", `nodes: { release_wait: 5s }`,
			Nodes{HeartbeatTimeout: 3 * time.Second, DrainTimeout: time.Minute, ReleaseWait: 5 * time.Second, RebalanceInterval: 30 * time.Second, RebalanceMaxMoves: 4, ReconcileInterval: time.Minute, MaxToolCalls: 64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(c.Nodes, tt.want) {
				t.Errorf("nodes = %+v, want %+v", c.Nodes, tt.want)
			}
		})
	}
}

func TestMailboxBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want Mailbox
	}{
		{"lowest", `mailbox: { retire_after: 1s, keep_acked: 0, keep_acked_for: 0, retry_backoff: 10ms, human_keep: 0, dead_letter_keep: 1, backstop: 1m }`,
			Mailbox{"crewlet", 16, time.Second, 0, 0, 10 * time.Millisecond, 0, 1, time.Minute, 10000, 600, 95}},
		{"highest", `mailbox: { retire_after: 720h, keep_acked: 10000000, keep_acked_for: 8760h, retry_backoff: 600s, human_keep: 10000000, dead_letter_keep: 10000000, backstop: 24h }`,
			Mailbox{"crewlet", 16, 720 * time.Hour, 10_000_000, 8760 * time.Hour, 10 * time.Minute, 10_000_000, 10_000_000, 24 * time.Hour, 10000, 600, 95}},
		{"empty section keeps the defaults", "mailbox:\n",
			Mailbox{"crewlet", 16, 24 * time.Hour, 10000, 24 * time.Hour, 10 * time.Second, 1000, 10000, time.Hour, 10000, 600, 95}},
		{"one key keeps the other defaults", `mailbox: { keep_acked_for: 1h }`,
			Mailbox{"crewlet", 16, 24 * time.Hour, 10000, time.Hour, 10 * time.Second, 1000, 10000, time.Hour, 10000, 600, 95}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Mailbox != tt.want {
				t.Errorf("mailbox = %+v, want %+v", c.Mailbox, tt.want)
			}
		})
	}
}

// defaultMaintenance is the maintenance section when the file says nothing.
var defaultMaintenance = Maintenance{
	Interval: 15 * time.Minute, LedgerRetention: 168 * time.Hour, TurnRetention: 720 * time.Hour,
	MessageRetention: 2160 * time.Hour, EventRetention: 720 * time.Hour, DiaryRetention: 8760 * time.Hour,
	EpisodeRetention: 2160 * time.Hour, CounterpartyRetention: 8760 * time.Hour, NodeRetention: 168 * time.Hour,
	AuditRetention: 8760 * time.Hour, TicketRetention: 2160 * time.Hour, ApprovalRetention: 2160 * time.Hour,
	DiaryMaxPerSeat: 10_000,
}

func TestMaintenanceBounds(t *testing.T) {
	t.Parallel()
	every := func(interval, ledger, rest time.Duration, diaryCap int) Maintenance {
		return Maintenance{interval, ledger, rest, rest, rest, rest, rest, rest, rest, rest, rest, rest, diaryCap}
	}
	tests := []struct {
		name string
		yaml string
		want Maintenance
	}{
		{"lowest", `maintenance: { interval: 1s, ledger_retention: 60m, turn_retention: 1h, message_retention: 1h,
  event_retention: 1h, diary_retention: 60m, episode_retention: 1h, counterparty_retention: 3600s, node_retention: 1h, audit_retention: 1h,
  ticket_retention: 1h, approval_retention: 60m, diary_max_per_seat: 1 }`,
			every(time.Second, time.Hour, time.Hour, 1)},
		{"highest", `maintenance: { interval: 1440m, ledger_retention: 8760h, turn_retention: 87600h, message_retention: 87600h,
  event_retention: 87600h, diary_retention: 87600h, episode_retention: 87600h, counterparty_retention: 87600h, node_retention: 87600h,
  audit_retention: 87600h, ticket_retention: 87600h, approval_retention: 87600h, diary_max_per_seat: 10000000 }`,
			every(24*time.Hour, 8760*time.Hour, 87600*time.Hour, 10_000_000)},
		{"empty section keeps the defaults", "maintenance:\n", defaultMaintenance},
		{"one key keeps the other defaults", `maintenance: { ledger_retention: 336h, node_retention: 24h }`,
			func() Maintenance {
				m := defaultMaintenance
				m.LedgerRetention, m.NodeRetention = 336*time.Hour, 24*time.Hour
				return m
			}()},
		{"message retention equal to turn retention", `maintenance: { turn_retention: 2160h }`,
			func() Maintenance { m := defaultMaintenance; m.TurnRetention = 2160 * time.Hour; return m }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Maintenance != tt.want {
				t.Errorf("maintenance = %+v, want %+v", c.Maintenance, tt.want)
			}
		})
	}
}

// placed has roles with and without placement labels, and a human seat whose
// role has labels.
const placed = `
company: { name: acme }
profiles: { p: { provider: scripted } }
roles:
  builder:  { charter: works as builder, profile: p, placement: { labels: { tools: git, zone: EU } } }
  reviewer: { charter: works as reviewer, profile: p, placement: { labels: { zone: EU, tools: git } } }
  trainer:  { charter: works as trainer, profile: p, placement: { labels: { GPU: "True", flag: true } } }
  writer:   { charter: works as writer, profile: p }
  empty:    { charter: works as empty, profile: p, placement: { labels: {} } }
seats:
  - { handle: w1, role: writer }
  - { handle: b1, role: builder }
  - { handle: boss, kind: human, role: builder }
  - { handle: t1, role: trainer }
  - { handle: r1, role: reviewer }
  - { handle: e1, role: empty }
  - { handle: b2, role: builder }
`

func TestPlacementGroups(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(placed))
	if err != nil {
		t.Fatalf("Parse(placed): %v", err)
	}
	// Keys arrive lowercased; values are kept as written, and a YAML true
	// given as a label is "true", not weak typing's "1".
	if got, want := c.Roles["trainer"].Placement.Labels, map[string]string{"gpu": "True", "flag": "true"}; !reflect.DeepEqual(got, want) {
		t.Errorf("roles.trainer.placement.labels = %v, want %v", got, want)
	}
	want := []PlacementGroup{
		{Key: "", Labels: nil, Seats: []string{"w1", "e1"}},
		{Key: "flag=true,gpu=True", Labels: map[string]string{"flag": "true", "gpu": "True"}, Seats: []string{"t1"}},
		{Key: "tools=git,zone=EU", Labels: map[string]string{"tools": "git", "zone": "EU"}, Seats: []string{"b1", "r1", "b2"}},
	}
	got := c.PlacementGroups()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PlacementGroups() =\n%+v\nwant\n%+v", got, want)
	}
	got[2].Labels["tools"] = "changed"
	if c.Roles["builder"].Placement.Labels["tools"] != "git" {
		t.Errorf("changing a group's Labels changed the config")
	}

	tests := []struct {
		handle string
		key    string
		ok     bool
	}{
		{"w1", "", true},
		{"e1", "", true},
		{"t1", "flag=true,gpu=True", true},
		{"r1", "tools=git,zone=EU", true},
		{"b2", "tools=git,zone=EU", true},
		{"boss", "", false},
		{"nobody", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.handle, func(t *testing.T) {
			g, ok := c.SeatPlacement(tt.handle)
			if ok != tt.ok || g.Key != tt.key {
				t.Errorf("SeatPlacement(%q) = %+v, %v; want key %q, %v", tt.handle, g, ok, tt.key, tt.ok)
			}
			if ok && !contains(g.Seats, tt.handle) {
				t.Errorf("SeatPlacement(%q).Seats = %v, lacks the seat", tt.handle, g.Seats)
			}
		})
	}
}

func TestLabelsKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		labels map[string]string
		want   string
	}{
		{nil, ""},
		{map[string]string{}, ""},
		{map[string]string{"tools": "git"}, "tools=git"},
		{map[string]string{"zone": "eu", "tools": "git", "arch": "arm64"}, "arch=arm64,tools=git,zone=eu"},
	}
	for _, tt := range tests {
		if got := LabelsKey(tt.labels); got != tt.want {
			t.Errorf("LabelsKey(%v) = %q, want %q", tt.labels, got, tt.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// A stdio MCP server gets its env entries as written and each env_from
// variable with its value from crewlet's own environment; a url server gets
// each headers_from header with its variable's value.
func TestMCPCommandEnv(t *testing.T) {
	t.Setenv("CREWLET_TEST_TRACKER_TOKEN", "tok-123")
	m := MCPServer{Name: "tracker", Command: []string{"x"}, Env: []string{"LOG=warn"}, EnvFrom: []string{"CREWLET_TEST_TRACKER_TOKEN"}}
	if got, want := m.CommandEnv(), []string{"LOG=warn", "CREWLET_TEST_TRACKER_TOKEN=tok-123"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("CommandEnv() = %q, want %q", got, want)
	}
	h := MCPServer{Name: "tracker", URL: "http://h/mcp", HeadersFrom: map[string]string{"authorization": "CREWLET_TEST_TRACKER_TOKEN"}}
	if got, want := h.Headers(), map[string]string{"authorization": "tok-123"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Headers() = %q, want %q", got, want)
	}
}

// Turn records must outlive the completion ledger: a trigger redelivered
// within the ledger's window must find its conversation.
func TestTurnRetentionOutlivesTheLedger(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal + `maintenance: { ledger_retention: 336h, turn_retention: 168h }`))
	want := "maintenance.turn_retention: 168h is shorter than maintenance.ledger_retention (336h)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse: %v; want %q", err, want)
	}
}

// Settled tickets and decided approvals must outlive the completion ledger:
// a delegation or gated call re-run within the ledger's window must find its
// ticket or decision by its key, not open another or ask again.
func TestTicketAndApprovalRetentionOutliveTheLedger(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal + `maintenance: { ledger_retention: 336h, ticket_retention: 335h, approval_retention: 168h }`))
	for _, want := range []string{
		"maintenance.ticket_retention: 335h is shorter than maintenance.ledger_retention (336h); a delegation re-run within the ledger's window must find its ticket",
		"maintenance.approval_retention: 168h is shorter than maintenance.ledger_retention (336h); a gated call re-run within the ledger's window must find its decision",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse: %v; want %q", err, want)
		}
	}
	// Equal is enough.
	if _, err := Parse([]byte(minimal + `maintenance: { ledger_retention: 336h, ticket_retention: 336h, approval_retention: 336h }`)); err != nil {
		t.Errorf("Parse with ticket and approval retention equal to the ledger's: %v", err)
	}
}

// Conversation messages must outlive turn records: a turn's conversation
// must not vanish while its turn record is still shown.
func TestMessageRetentionOutlivesTurns(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal + `maintenance: { turn_retention: 720h, message_retention: 719h }`))
	want := "maintenance.message_retention: 719h is shorter than maintenance.turn_retention (720h); a turn's conversation must outlive its turn record"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse: %v; want %q", err, want)
	}
	// The default message retention is checked too: a turn retention
	// raised past it alone is refused.
	_, err = Parse([]byte(minimal + `maintenance: { turn_retention: 4320h }`))
	want = "maintenance.message_retention: 2160h is shorter than maintenance.turn_retention (4320h)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse: %v; want %q", err, want)
	}
}

// clearOverrides unsets every CREWLET_ variable for the test's duration, so
// that what the test sets is all the environment says (.dev/env exports
// CREWLET_TEMPORAL_ADDRESS, for one).
func clearOverrides(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, EnvPrefix+"_") {
			unsetEnv(t, name)
		}
	}
}

// A variable that names a whole section overrides nothing: CREWLET_API is
// the CLI's API URL, and with it exported every command must load the org
// as without it (issue 11).
func TestSectionVariablesAreNoOverrides(t *testing.T) {
	clearOverrides(t)
	want, err := Load(examplePath)
	if err != nil {
		t.Fatalf("Load(%s) with no overrides: %v", examplePath, err)
	}
	sections := map[string]string{
		"CREWLET_API":                      "http://127.0.0.1:8080",
		"CREWLET_COMPANY":                  "x",
		"CREWLET_COMPANY_BUDGET":           "1",
		"CREWLET_TEMPORAL":                 "temporal:7233",
		"CREWLET_POSTGRES":                 "postgres://u@h/db",
		"CREWLET_MAILBOX":                  "x",
		"CREWLET_NODES":                    "y",
		"CREWLET_MAINTENANCE":              "1h",
		"CREWLET_TICKETS":                  "1h",
		"CREWLET_PROFILES":                 "z",
		"CREWLET_PROFILES_LOCAL":           "z",
		"CREWLET_PROFILES_LOCAL_RULES":     "z",
		"CREWLET_ROLES":                    "r",
		"CREWLET_ROLES_ENGINEER":           "r",
		"CREWLET_ROLES_ENGINEER_BUDGET":    "5",
		"CREWLET_ROLES_ENGINEER_PLACEMENT": "gpu",
		"CREWLET_ROLES_ENGINEER_MCP":       "fs",
		"CREWLET_SEATS":                    "s",
		"CREWLET_QUARANTINE":               "1h",
		"CREWLET_MODELS":                   "gpt-4o",
		"CREWLET_MODELS_ALLOW":             "gpt-4o",
		"CREWLET_ROLES_ENGINEER_PROFILES":  "local",
	}
	for name, value := range sections {
		t.Setenv(name, value)
	}
	got, err := Load(examplePath)
	if err != nil {
		t.Fatalf("Load(%s) with section variables set: %v", examplePath, err)
	}
	if got.API.Listen != "127.0.0.1:8080" {
		t.Errorf("api.listen = %q, want the file's %q", got.API.Listen, "127.0.0.1:8080")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("section variables changed the config\ngot:  %+v\nwant: %+v", got, want)
	}

	// Each alone too, over the smallest org, where every section but the
	// company and the seats comes from the defaults.
	base, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal): %v", err)
	}
	clearOverrides(t)
	for name, value := range sections {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			c, err := Parse([]byte(minimal))
			if err != nil {
				t.Fatalf("Parse(minimal) with %s=%s: %v", name, value, err)
			}
			if !reflect.DeepEqual(c, base) {
				t.Errorf("%s changed the config\ngot:  %+v\nwant: %+v", name, c, base)
			}
		})
	}
}

// Every scalar key outside profiles and roles has a default, and nothing
// else does: a section given a default would be a scalar to viper.
func TestDefaultsHoldEveryScalarKey(t *testing.T) {
	t.Parallel()
	got := scalarKeys("", reflect.TypeFor[Config](), nil)
	sort.Strings(got)
	var want []string
	for k := range defaults {
		want = append(want, k)
	}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scalar keys of Config:\n%v\nkeys of defaults:\n%v", got, want)
	}
}

// LoadWithOverrides says which keys the environment set, by key and
// variable and never by value; a section variable, or an empty one, is none.
func TestOverridesListed(t *testing.T) {
	clearOverrides(t)
	c, applied, err := LoadWithOverrides(examplePath)
	if err != nil {
		t.Fatalf("LoadWithOverrides(%s): %v", examplePath, err)
	}
	if applied != nil {
		t.Errorf("overrides with none set = %q, want none", applied)
	}

	t.Setenv("CREWLET_API", "http://127.0.0.1:8080")
	t.Setenv("CREWLET_API_LISTEN", "127.0.0.1:9999")
	t.Setenv("CREWLET_COMPANY_BUDGET_TOKENS_PER_DAY", "5000")
	t.Setenv("CREWLET_NODES_DRAIN_TIMEOUT", "")
	t.Setenv("CREWLET_PROFILES_LOCAL_DELAY", "1s")
	t.Setenv("CREWLET_ROLES_ENGINEER_MAX_ROUNDS", "12")
	t.Setenv("CREWLET_ROLES_SUPPORT_REFLECT", "true") // not in the file
	c, applied, err = LoadWithOverrides(examplePath)
	if err != nil {
		t.Fatalf("LoadWithOverrides(%s): %v", examplePath, err)
	}
	want := []string{
		"company.budget.tokens_per_day (CREWLET_COMPANY_BUDGET_TOKENS_PER_DAY)",
		"api.listen (CREWLET_API_LISTEN)",
		"profiles.local.delay (CREWLET_PROFILES_LOCAL_DELAY)",
		"roles.engineer.max_rounds (CREWLET_ROLES_ENGINEER_MAX_ROUNDS)",
		"roles.support.reflect (CREWLET_ROLES_SUPPORT_REFLECT)",
	}
	if !reflect.DeepEqual(applied, want) {
		t.Errorf("overrides =\n%q\nwant\n%q", applied, want)
	}
	tests := []struct {
		key       string
		got, want any
	}{
		{"company.budget.tokens_per_day", c.Company.Budget.TokensPerDay, int64(5000)},
		{"api.listen", c.API.Listen, "127.0.0.1:9999"},
		{"nodes.drain_timeout", c.Nodes.DrainTimeout, time.Minute},
		{"profiles.local.delay", c.Profiles["local"].Delay, time.Second},
		{"roles.engineer.max_rounds", c.Roles["engineer"].MaxRounds, 12},
		{"roles.support.reflect", c.Roles["support"].Reflect, true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.key, tt.got, tt.want)
		}
	}
}

// A listen beyond this machine needs tokens: refused without, named; a
// loopback listen may name none (the API then mints its local token). Tokens are checked: role, an env
// var that is set and long enough, distinct secrets, a bound human seat, one
// for every member.
func TestAuthAndTheBindRule(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		if !LoopbackListen(addr) {
			t.Errorf("LoopbackListen(%s) = false; want true", addr)
		}
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.0.0.5:8080", "example.com:80"} {
		if LoopbackListen(addr) {
			t.Errorf("LoopbackListen(%s) = true; want false", addr)
		}
	}
	open := minimal + "api: { listen: \"0.0.0.0:8080\" }\n"
	if _, err := Parse([]byte(open)); err == nil || !strings.Contains(err.Error(), "api.listen: 0.0.0.0:8080 is reachable beyond this machine but auth.tokens is empty") {
		t.Fatalf("non-loopback listen without tokens: %v; want it refused naming api.listen", err)
	}
	t.Setenv("CREWLET_TEST_TOK_A", "a-long-enough-token-1")
	t.Setenv("CREWLET_TEST_TOK_SHORT", "short")
	t.Setenv("CREWLET_TEST_TOK_DUP", "a-long-enough-token-1")
	_, err := Parse([]byte(open + `auth:
  tokens:
    - { name: ops, role: admin, token_env: CREWLET_TEST_TOK_A }
    - { name: ops, role: root, token_env: CREWLET_TEST_TOK_SHORT }
    - { name: dup, role: viewer, token_env: CREWLET_TEST_TOK_DUP, seat: nobody }
    - { name: unset, role: viewer, token_env: CREWLET_TEST_TOK_UNSET }
    - { name: pat, role: member, token_env: CREWLET_TEST_TOK_UNSET }
`))
	for _, want := range []string{
		`auth.tokens[1].name: duplicate name "ops" (also auth.tokens[0])`,
		`auth.tokens[1].role: unknown role "root"; roles: admin, operator, member, viewer`,
		`auth.tokens[1].token_env: the token in CREWLET_TEST_TOK_SHORT is 5 bytes; use at least 16`,
		`auth.tokens[2].token_env: the token in CREWLET_TEST_TOK_DUP is also auth.tokens[0]'s`,
		`auth.tokens[2].seat: "nobody" is not a human seat of the org`,
		`auth.tokens[3].token_env: environment variable CREWLET_TEST_TOK_UNSET is not set or empty`,
		`auth.tokens[4].seat: required for role member: name the person's human seat the member acts for`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q; got:\n%v", want, err)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "a-long-enough-token") || strings.Contains(err.Error(), "short\"")) {
		t.Fatalf("an error shows a token: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "api.listen:") {
		t.Fatalf("with tokens the listen is allowed: %v", err)
	}
}

// The human-seat and dead-letter trims are bounded like keep_acked: each
// out-of-range value is named with its range, and a typo is named too.
func TestMailboxTrimKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"below range", `mailbox: { human_keep: -1, dead_letter_keep: 0 }`, []string{
			"mailbox.human_keep: -1 is out of range; must be between 0 and 10000000",
			"mailbox.dead_letter_keep: 0 is out of range; must be between 1 and 10000000",
		}},
		{"above range", `mailbox: { human_keep: 10000001, dead_letter_keep: 10000001 }`, []string{
			"mailbox.human_keep: 10000001 is out of range; must be between 0 and 10000000",
			"mailbox.dead_letter_keep: 10000001 is out of range; must be between 1 and 10000000",
		}},
		{"not numbers", `mailbox: { human_keep: all, dead_letter_keep: lots }`, []string{
			`mailbox.human_keep: invalid value "all"; want an integer`,
			`mailbox.dead_letter_keep: invalid value "lots"; want an integer`,
		}},
		{"typo", `mailbox: { human_kep: 5 }`, []string{`mailbox.human_kep: unknown key; did you mean "human_keep"?`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(minimal + tt.yaml))
			if err == nil {
				t.Fatalf("Parse: no error; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q\ngot:\n%v", w, err)
				}
			}
		})
	}
}

// An MCP server URL with credentials in it is refused at its key, and the
// credentials are never shown, not even when the URL does not parse.
func TestMCPURLCredentialsRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal + `profiles: { p: { provider: scripted } }
roles:
  r:
    charter: works as r
    profile: p
    mcp:
      - { name: ok, url: "https://h.example/mcp" }
      - { name: userpw, url: "https://bob:pw-secret@h.example/mcp" }
      - { name: token, url: "http://tok-secret@127.0.0.1:9000/mcp" }
      - { name: broken, url: "https://bob:pw-secret@h.example/%zz" }
`))
	if err == nil {
		t.Fatal("Parse: no error; want the credentials refused")
	}
	for _, w := range []string{
		"roles.r.mcp[1].url: must not hold credentials; send them as a header with headers_from",
		"roles.r.mcp[2].url: must not hold credentials",
		"roles.r.mcp[3].url: invalid URL; want an http or https URL, without credentials",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q\ngot:\n%v", w, err)
		}
	}
	for _, n := range []string{"secret", "bob", "roles.r.mcp[0]"} {
		if strings.Contains(err.Error(), n) {
			t.Errorf("error contains %q\ngot:\n%v", n, err)
		}
	}
}

// pools has a role of each pool form and selection, and profiles with and
// without the pool keys.
const pools = `
company: { name: acme }
profiles:
  box: { provider: openai, model: llama3, base_url: "http://127.0.0.1:11434/v1", max_load: 0, weight: 0 }
  paid: { provider: openai, model: gpt-4o-mini, base_url: "http://127.0.0.1:8000/v1", max_load: 4, weight: 3, credential: openai-main,
          exhausted_pattern: "(?i)usage limit|quota exceeded" }
  paid2: { provider: openai, model: gpt-4o, base_url: "http://127.0.0.1:8000/v1", credential: openai-main }
  local: { provider: scripted }
roles:
  one: { charter: works as one, profile: paid }
  listed: { charter: works as listed, profiles: [paid] }
  spread: { charter: works as spread, profiles: [paid2, paid, box] }
  cheap: { charter: works as cheap, profiles: [box, paid], selection: ordered }
seats: [ { handle: alice, kind: human } ]
`

func TestProfilePools(t *testing.T) {
	c, err := Parse([]byte(pools))
	if err != nil {
		t.Fatalf("Parse(pools): %v", err)
	}
	profiles := []struct {
		name       string
		weight     int
		maxLoad    int
		credential string
	}{
		// max_load 0 is none, not unlimited; weight 0 is kept.
		{"box", 0, 0, "box"},
		{"paid", 3, 4, "openai-main"},
		// unset: weight 1, unlimited, the profile's own name.
		{"paid2", DefaultWeight, Unlimited, "openai-main"},
		{"local", 1, -1, "local"},
	}
	for _, tt := range profiles {
		t.Run("profiles."+tt.name, func(t *testing.T) {
			p := c.Profiles[tt.name]
			if p.Weight != tt.weight || p.MaxLoad != tt.maxLoad || p.Credential != tt.credential {
				t.Errorf("weight, max_load, credential = %d, %d, %q; want %d, %d, %q",
					p.Weight, p.MaxLoad, p.Credential, tt.weight, tt.maxLoad, tt.credential)
			}
		})
	}

	roles := []struct {
		name, profile, selection string
		pool                     []string
	}{
		{"one", "paid", crewlet.SelectionWeighted, []string{"paid"}},
		{"listed", "paid", crewlet.SelectionWeighted, []string{"paid"}},
		// Profile is the pool's first, for readers not yet on Pool.
		{"spread", "paid2", crewlet.SelectionWeighted, []string{"paid2", "paid", "box"}},
		{"cheap", "box", crewlet.SelectionOrdered, []string{"box", "paid"}},
	}
	for _, tt := range roles {
		t.Run("roles."+tt.name, func(t *testing.T) {
			r := c.Roles[tt.name]
			if r.Profile != tt.profile || r.Selection != tt.selection || !reflect.DeepEqual(r.Profiles, tt.pool) || !reflect.DeepEqual(r.Pool(), tt.pool) {
				t.Errorf("profile %q, selection %q, profiles %v, Pool() %v; want %q, %q, %v, %v",
					r.Profile, r.Selection, r.Profiles, r.Pool(), tt.profile, tt.selection, tt.pool, tt.pool)
			}
		})
	}
	// The one-item form is the pool of one: the same role, written either way.
	one, listed := c.Roles["one"], c.Roles["listed"]
	if !reflect.DeepEqual(one.Pool(), listed.Pool()) || one.Profile != listed.Profile || one.Selection != listed.Selection {
		t.Errorf("profile: paid = %+v; profiles: [paid] = %+v; want the same pool", one, listed)
	}
	// Pool is a copy: changing it leaves the config as it was.
	c.Roles["spread"].Pool()[0] = "changed"
	if got := c.Roles["spread"].Profiles[0]; got != "paid2" {
		t.Errorf("changing Pool() changed roles.spread.profiles[0] to %q", got)
	}
	// A loaded config validates again as it is: the pool written in one
	// form and kept in both is not taken for both forms written.
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() of a loaded config: %v", err)
	}

	// The scalar pool keys take environment overrides like every scalar key.
	clearOverrides(t)
	t.Setenv("CREWLET_PROFILES_PAID2_MAX_LOAD", "0")
	t.Setenv("CREWLET_PROFILES_PAID2_WEIGHT", "5")
	t.Setenv("CREWLET_PROFILES_LOCAL_CREDENTIAL", "shared")
	t.Setenv("CREWLET_ROLES_SPREAD_SELECTION", "ordered")
	if c, err = Parse([]byte(pools)); err != nil {
		t.Fatalf("Parse(pools) with overrides: %v", err)
	}
	if p := c.Profiles["paid2"]; p.MaxLoad != 0 || p.Weight != 5 {
		t.Errorf("profiles.paid2 max_load, weight = %d, %d; want the overrides 0, 5", p.MaxLoad, p.Weight)
	}
	if got := c.Profiles["local"].Credential; got != "shared" {
		t.Errorf("profiles.local.credential = %q, want the override %q", got, "shared")
	}
	if got := c.Roles["spread"].Selection; got != crewlet.SelectionOrdered {
		t.Errorf("roles.spread.selection = %q, want the override %q", got, crewlet.SelectionOrdered)
	}
	t.Setenv("CREWLET_PROFILES_PAID2_MAX_LOAD", "-1")
	if _, err := Parse([]byte(pools)); err == nil || !strings.Contains(err.Error(), "profiles.paid2.max_load: -1 is negative") {
		t.Errorf("CREWLET_PROFILES_PAID2_MAX_LOAD=-1: %v; want it refused", err)
	}
}

// A role built in code rather than loaded has its pool in Profile or
// Profiles; Pool reads either, and Validate holds it to one pool.
func TestPoolOfABuiltRole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		role Role
		want []string
	}{
		{"profile only", Role{Profile: "a"}, []string{"a"}},
		{"profiles only", Role{Profiles: []string{"a", "b"}}, []string{"a", "b"}},
		{"both, agreeing", Role{Profile: "a", Profiles: []string{"a", "b"}}, []string{"a", "b"}},
		{"none", Role{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.role.Pool(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Pool() = %v, want %v", got, tt.want)
			}
		})
	}

	c, err := Parse([]byte(minimal + `profiles: { a: { provider: scripted }, b: { provider: scripted } }`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	c.Roles = map[string]Role{
		"built":    {Profile: "a", MaxRounds: 1},                          // no selection: weighted
		"disagree": {Profile: "b", Profiles: []string{"a"}, MaxRounds: 1}, // which one runs it?
	}
	err = c.Validate()
	want := "roles.disagree: has both profile and profiles; use one: profile is the one-item form of profiles"
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v; want only %q", err, want)
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(pools))
	if err != nil {
		t.Fatalf("Parse(pools): %v", err)
	}
	tests := []struct {
		profile, msg string
		want         bool
	}{
		{"paid", "429: You have reached your Usage Limit for this month", true},
		{"paid", "error: quota exceeded", true},
		{"paid", "429: rate limited, retry in 2s", false},
		{"paid", "", false},
		// no pattern: never
		{"paid2", "usage limit", false},
		{"local", "quota exceeded", false},
	}
	for _, tt := range tests {
		t.Run(tt.profile+"/"+tt.msg, func(t *testing.T) {
			if got := c.Profiles[tt.profile].Exhausted(tt.msg); got != tt.want {
				t.Errorf("profiles.%s.Exhausted(%q) = %v, want %v", tt.profile, tt.msg, got, tt.want)
			}
		})
	}
	if c.Profiles["paid"].exhausted == nil {
		t.Errorf("profiles.paid: exhausted_pattern not compiled at load")
	}
	// A profile built in code has no compiled pattern and still matches.
	built := Profile{ExhaustedPattern: "(?i)usage limit"}
	if !built.Exhausted("Usage limit reached") || built.Exhausted("timeout") {
		t.Errorf("a built profile's Exhausted does not follow its pattern")
	}
	if (Profile{ExhaustedPattern: "("}).Exhausted("(") {
		t.Errorf("a pattern that does not compile matched")
	}
}

func TestModelID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    Profile
		want string
	}{
		{Profile{Provider: ProviderOpenAI, Model: "gpt-4o-mini"}, "gpt-4o-mini"},
		{Profile{Provider: ProviderAnthropic, Model: "claude-sonnet-4-5"}, "claude-sonnet-4-5"},
		{Profile{Provider: ProviderScripted}, "scripted"},
		{Profile{Provider: ProviderOpenAI}, ""},
	}
	for _, tt := range tests {
		if got := tt.p.ModelID(); got != tt.want {
			t.Errorf("%+v.ModelID() = %q, want %q", tt.p, got, tt.want)
		}
	}
	// Every profile's model on the list: accepted.
	c, err := Parse([]byte(pools + `models: { allow: [llama3, gpt-4o-mini, gpt-4o, scripted] }`))
	if err != nil {
		t.Fatalf("Parse(pools) with every model allowed: %v", err)
	}
	if want := []string{"llama3", "gpt-4o-mini", "gpt-4o", "scripted"}; !reflect.DeepEqual(c.Models.Allow, want) {
		t.Errorf("models.allow = %v, want %v", c.Models.Allow, want)
	}
}

// quarantine.base is a scalar key: it has a default, takes its bounds, and
// the environment overrides it; models.allow and a role's profiles are
// lists, which it does not.
func TestQuarantineBase(t *testing.T) {
	clearOverrides(t)
	tests := []struct {
		name, yaml, env string
		want            time.Duration
	}{
		{"default", minimal, "", 30 * time.Minute},
		{"lowest", minimal + `quarantine: { base: 1s }`, "", time.Second},
		{"highest", minimal + `quarantine: { base: 1440m }`, "", 24 * time.Hour},
		{"env over the default", minimal, "45m", 45 * time.Minute},
		{"env over the file", minimal + `quarantine: { base: 10m }`, "2h", 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CREWLET_QUARANTINE_BASE", tt.env)
			c, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Quarantine.Base != tt.want {
				t.Errorf("quarantine.base = %v, want %v", c.Quarantine.Base, tt.want)
			}
		})
	}
	t.Setenv("CREWLET_QUARANTINE_BASE", "0s")
	if _, err := Parse([]byte(minimal)); err == nil || !strings.Contains(err.Error(), "quarantine.base: 0s is out of range; must be between 1s and 24h") {
		t.Errorf("CREWLET_QUARANTINE_BASE=0s: %v; want it refused naming quarantine.base", err)
	}
}

// The seats digest changes with the seats that exist and their kinds, and
// with nothing else: a reordered file or another role is the same set.
func TestSeatsDigestNamesTheSeatsAndTheirKinds(t *testing.T) {
	t.Parallel()
	digest := func(seats ...Seat) string { return (&Config{Seats: seats}).SeatsDigest() }
	base := digest(Seat{Handle: "cto", Role: "cto"}, Seat{Handle: "alice", Kind: "human"})
	for name, seats := range map[string][]Seat{
		"reordered":               {{Handle: "alice", Kind: "human"}, {Handle: "cto", Role: "cto", Kind: "agent"}},
		"another role, same seat": {{Handle: "cto", Role: "engineer"}, {Handle: "alice", Kind: "human"}},
	} {
		if got := digest(seats...); got != base {
			t.Errorf("%s: digest %s; want %s", name, got, base)
		}
	}
	for name, seats := range map[string][]Seat{
		"a seat removed":   {{Handle: "cto", Role: "cto"}},
		"a seat added":     {{Handle: "cto", Role: "cto"}, {Handle: "alice", Kind: "human"}, {Handle: "eng", Role: "cto"}},
		"a kind changed":   {{Handle: "cto", Role: "cto"}, {Handle: "alice", Role: "cto"}},
		"a handle renamed": {{Handle: "ceo", Role: "cto"}, {Handle: "alice", Kind: "human"}},
	} {
		if got := digest(seats...); got == base {
			t.Errorf("%s: digest unchanged (%s)", name, got)
		}
	}
}

// The deployment is named after the task queue unless named: two companies
// on one namespace are two deployments, and "." and ":", which Temporal
// reserves in deployment names, become "-".
func TestDeploymentName(t *testing.T) {
	for _, tt := range []struct {
		queue, name, want string
	}{
		{"crewlet", "", "crewlet"},
		{"acme.prod:eu", "", "acme-prod-eu"},
		{"acme.prod", "acme", "acme"},
	} {
		got := Temporal{TaskQueue: tt.queue, Deployment: TemporalDeployment{Name: tt.name}}.DeploymentName()
		if got != tt.want {
			t.Errorf("task queue %q, name %q: deployment %q; want %q", tt.queue, tt.name, got, tt.want)
		}
	}
}

// Attack: a health webhook in plain http beyond this machine hands its
// secret headers, and every seat's state, to whoever is on the path. Only
// loopback may be plain.
func TestAPlainHTTPWebhookBeyondLoopbackIsRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal + "health:\n  notify:\n    - { url: 'http://hooks.example/plain' }\n    - { url: 'http://127.0.0.1:9000/local' }\n"))
	if err == nil || !strings.Contains(err.Error(), `health.notify[0].url: "http://hooks.example/plain" is plain http to another machine`) {
		t.Fatalf("plain http to another machine: %v; want refused naming the key", err)
	}
	if strings.Contains(err.Error(), "health.notify[1]") {
		t.Errorf("plain http to loopback refused: %v", err)
	}
}

// evals.retention keeps eval runs 90 days unless set, and is held to the
// bounds of every retention.
func TestEvalsRetention(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(minimal))
	if err != nil || c.Evals.Retention != 2160*time.Hour {
		t.Fatalf("default evals.retention = %v, %v; want 2160h", c.Evals.Retention, err)
	}
	if c, err := Parse([]byte(minimal + "evals: { retention: 24h }\n")); err != nil || c.Evals.Retention != 24*time.Hour {
		t.Fatalf("evals.retention: 24h = %v, %v; want 24h", c.Evals.Retention, err)
	}
	for _, v := range []string{"30m", "87601h"} {
		if _, err := Parse([]byte(minimal + "evals: { retention: " + v + " }\n")); err == nil || !strings.Contains(err.Error(), "evals.retention") {
			t.Errorf("evals.retention: %s: %v; want it refused naming evals.retention", v, err)
		}
	}
}
