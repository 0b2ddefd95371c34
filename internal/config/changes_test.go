package config

import (
	"reflect"
	"strings"
	"testing"
)

const changesBase = `
company: { name: acme }
temporal: { task_queue: crewlet }
api: { listen: 127.0.0.1:8080 }
profiles: { p: { provider: scripted }, q: { provider: scripted } }
roles:
  eng: { charter: builds, profile: p, mcp: [ { name: fs, command: [ mcp-fs ] } ] }
seats:
  - { handle: cto, role: eng }
  - { handle: alice, kind: human }
`

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A mixed change is reported key by key, each with its class: a charter
// and a new seat are hot, an MCP server deferred to the next tenure, the
// task queue cold.
func TestDiffClassifiesEachChangedKey(t *testing.T) {
	t.Parallel()
	next := strings.NewReplacer(
		"charter: builds", "charter: builds well",
		"name: fs, command: [ mcp-fs ]", "name: fs, command: [ mcp-fs, --ro ]",
		"task_queue: crewlet", "task_queue: other",
		"- { handle: alice, kind: human }", "- { handle: alice, kind: human }\n  - { handle: eng-2, role: eng }",
		"q: { provider: scripted }", "r: { provider: scripted }",
	).Replace(changesBase)
	got := Diff(mustParse(t, changesBase), mustParse(t, next))
	want := []Change{
		{Key: "profiles.q", Kind: ChangeRemoved, Class: ClassHot},
		{Key: "profiles.r", Kind: ChangeAdded, Class: ClassHot},
		{Key: "roles.eng.charter", Kind: ChangeChanged, Class: ClassHot},
		{Key: "roles.eng.mcp.fs.command", Kind: ChangeChanged, Class: ClassDeferred},
		{Key: "seats.eng-2", Kind: ChangeAdded, Class: ClassHot},
		{Key: "temporal.task_queue", Kind: ChangeChanged, Class: ClassCold},
	}
	for i := range got {
		got[i].When = ""
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff =\n%+v\nwant\n%+v", got, want)
	}
	if cold := Cold(Diff(mustParse(t, changesBase), mustParse(t, next))); !reflect.DeepEqual(cold, []string{"temporal.task_queue"}) {
		t.Fatalf("Cold = %v", cold)
	}
	if d := Diff(mustParse(t, changesBase), mustParse(t, changesBase)); len(d) != 0 {
		t.Fatalf("Diff of a config with itself = %+v", d)
	}
}

// A process keeps every cold key from its start: what is left of a
// revision after KeepCold differs from the boot config in no cold key, and
// the keys it kept are reported.
func TestKeepColdKeepsEveryColdKeyFromTheStart(t *testing.T) {
	t.Parallel()
	boot := mustParse(t, changesBase)
	next := mustParse(t, strings.NewReplacer(
		"company: { name: acme }", "company: { name: acme2 }\nlog: { level: debug }\nnodes: { heartbeat_timeout: 9s }\nmailbox: { key_prefix: other }\nmaintenance: { interval: 1h }",
		"task_queue: crewlet", "task_queue: other",
		"listen: 127.0.0.1:8080", "listen: 127.0.0.1:9090",
		"charter: builds", "charter: builds well",
	).Replace(changesBase))
	kept, needs, err := KeepCold(boot, next)
	if err != nil {
		t.Fatal(err)
	}
	if cold := Cold(Diff(boot, kept)); len(cold) != 0 {
		t.Fatalf("kept config still differs from the boot one in cold keys %v", cold)
	}
	if kept.Roles["eng"].Charter != "builds well" {
		t.Fatalf("hot key not taken: charter %q", kept.Roles["eng"].Charter)
	}
	want := []string{"api.listen", "company.name", "log.level", "mailbox.key_prefix", "maintenance.interval", "nodes.heartbeat_timeout", "temporal.task_queue"}
	if !reflect.DeepEqual(needs, want) {
		t.Fatalf("needs restart for %v; want %v", needs, want)
	}
}
