package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// When a changed key takes effect (docs/architecture.md, "Config revisions").
const (
	// Hot: the next time it is read, within a beat of the apply; for a
	// turn's settings, the next turn.
	ClassHot = "hot"
	// Deferred: at a named later moment (a seat's next tenure, the next
	// seat start); Change.When says which.
	ClassDeferred = "deferred"
	// Cold: read once, when a process starts. An apply that changes one is
	// refused unless the operator says they will restart the processes,
	// which then report that they need it.
	ClassCold = "cold"
)

// Change is one changed key of a config revision.
type Change struct {
	// Key is the key's path: "roles.engineer.charter", "seats.bob" for a
	// seat added or removed.
	Key string `json:"key"`
	// Kind is added, removed or changed.
	Kind string `json:"kind"`
	// Class is ClassHot, ClassDeferred or ClassCold.
	Class string `json:"class"`
	// When says when a deferred or cold change takes effect.
	When string `json:"when,omitempty"`
}

// Kinds of change.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// keyClass is the class of every key whose path matches Pattern, a path
// whose "*" segments match any one segment and whose last segment matches
// the key and everything under it.
type keyClass struct {
	Pattern string
	Class   string
	When    string
}

// keyClasses classifies keys, first match wins; a key no pattern matches is
// hot: every service asks its config.Source for the org when it runs.
var keyClasses = []keyClass{
	{"company.name", ClassCold, "restart: the database is claimed by company, Temporal namespace and task queue"},
	{"temporal", ClassCold, "restart: the Temporal connection and queues are opened at start"},
	{"postgres", ClassCold, "restart: the database connection is opened at start"},
	{"redis", ClassCold, "restart: the Redis connection is opened at start"},
	{"api.listen", ClassCold, "restart: the API listener is opened at start"},
	{"api.tls", ClassCold, "restart: the API listener is opened at start"},
	{"api.insecure_http", ClassCold, "restart: the API listener is opened at start"},
	{"auth.local_token", ClassCold, "restart: the local token is minted when the API starts"},
	{"auth.local_token_file", ClassCold, "restart: the local token is minted when the API starts"},
	{"auth.anonymous", ClassCold, "restart: the local token is minted, or not, when the API starts"},
	{"metrics", ClassCold, "restart: the metrics listener and series are set up at start"},
	{"log", ClassCold, "restart: the logger is built at start"},
	{"mailbox.key_prefix", ClassCold, "restart: it names every Redis key crewlet writes"},
	{"nodes", ClassCold, "restart: a node's timing, queues, tool slots and duty cadences are set at its start"},
	{"maintenance.interval", ClassCold, "restart: the maintenance duty's Schedule is set by a starting node"},
	{"health.interval", ClassCold, "restart: the health duty's Schedule is set by a starting node"},
	{"health.notify", ClassCold, "restart: a worker sets up its health webhooks when it starts"},
	{"roles.*.approvals", ClassHot, "next tool call: the gate reads the role's policies when a call is made; a waiting call whose policy changed asks again"},
	{"roles.*.may", ClassHot, "next tool call: a call is checked against the role's may when it is made; a turn offers the tools may.tools allows when it starts"},
	{"roles.*.max_tool_calls_per_turn", ClassHot, "next tool call: the cap is read when a call is made"},
	{"roles.*.max_messages_per_turn", ClassHot, "next tool call: the cap is read when a call is made"},
	{"roles.*.sandbox", ClassCold, "restart: each process confines MCP children as its own file says; an apply never loosens it"},
	{"roles.*.mcp", ClassDeferred, "next tenure: a seat's MCP servers start when it attaches to a node"},
	{"roles.*.placement", ClassDeferred, "next placement: a seat moves only when it is placed again (a move, a failover, a rebalance)"},
	{"mailbox.read_batch", ClassDeferred, "next seat start: carried in a seat workflow's input"},
	{"mailbox.retry_backoff", ClassDeferred, "next seat start: carried in a seat workflow's input"},
	{"mailbox.backstop", ClassDeferred, "next seat start: carried in a seat workflow's input"},
}

// ColdKeys are the top-level sections and keys a running process keeps from
// its start whatever the active revision says.
func ColdKeys() []string {
	var out []string
	for _, k := range keyClasses {
		if k.Class == ClassCold {
			out = append(out, k.Pattern)
		}
	}
	return out
}

// Diff lists what changed from old to next, key by key, in path order, each
// with its class.
func Diff(old, next *Config) []Change {
	var out []Change
	diffValue("", reflect.ValueOf(*old), reflect.ValueOf(*next), &out)
	for i := range out {
		out[i].Class, out[i].When = classify(out[i].Key)
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Cold returns the keys of changes that are cold.
func Cold(changes []Change) []string {
	var out []string
	for _, c := range changes {
		if c.Class == ClassCold {
			out = append(out, c.Key)
		}
	}
	return out
}

func classify(key string) (class, when string) {
	for _, k := range keyClasses {
		if matchKey(k.Pattern, key) {
			return k.Class, k.When
		}
	}
	return ClassHot, ""
}

// matchKey reports whether key is pattern or under it.
func matchKey(pattern, key string) bool {
	ps, ks := strings.Split(pattern, "."), strings.Split(key, ".")
	if len(ks) < len(ps) {
		return false
	}
	for i, p := range ps {
		if p != "*" && p != ks[i] {
			return false
		}
	}
	return true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// diffValue appends the changes between two values of one type at path:
// structs field by field (by their config key), maps and keyed lists entry
// by entry, anything else as one value.
func diffValue(path string, a, b reflect.Value, out *[]Change) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			diffValue(join(path, name), a.Field(i), b.Field(i), out)
		}
		return
	case reflect.Map:
		if a.Type().Key().Kind() == reflect.String {
			diffEntries(path, mapEntries(a), mapEntries(b), out)
			return
		}
	case reflect.Slice:
		if ea, ok := sliceEntries(a); ok {
			if eb, ok := sliceEntries(b); ok {
				diffEntries(path, ea, eb, out)
				return
			}
		}
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		*out = append(*out, Change{Key: path, Kind: ChangeChanged})
	}
}

func diffEntries(path string, a, b map[string]reflect.Value, out *[]Change) {
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			*out = append(*out, Change{Key: join(path, k), Kind: ChangeRemoved})
			continue
		}
		diffValue(join(path, k), va, vb, out)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			*out = append(*out, Change{Key: join(path, k), Kind: ChangeAdded})
		}
	}
}

func mapEntries(v reflect.Value) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for _, k := range v.MapKeys() {
		out[k.String()] = v.MapIndex(k)
	}
	return out
}

// sliceEntries keys a list of structs by their handle or name (seats,
// tokens, MCP servers, schedules); a list of anything else, or one whose
// keys repeat, is compared whole.
func sliceEntries(v reflect.Value) (map[string]reflect.Value, bool) {
	if v.Type().Elem().Kind() != reflect.Struct {
		return nil, false
	}
	out := map[string]reflect.Value{}
	for i := range v.Len() {
		e := v.Index(i)
		key := ""
		for _, field := range []string{"Handle", "Name"} {
			if f := e.FieldByName(field); f.IsValid() && f.Kind() == reflect.String {
				key = f.String()
				break
			}
		}
		if key == "" {
			return nil, false
		}
		if _, dup := out[key]; dup {
			return nil, false
		}
		out[key] = e
	}
	return out, true
}

// KeepCold returns next with every cold key taken from boot, the config the
// process started with, and the cold keys whose value it kept: a running
// process cannot take them. The result is validated again, because a mix of
// two revisions is a config neither was checked as (a listen address kept
// from one with the tokens of the other).
func KeepCold(boot, next *Config) (*Config, []string, error) {
	kept := *next
	kept.Company.Name = boot.Company.Name
	kept.Temporal = boot.Temporal
	kept.Postgres = boot.Postgres
	kept.Redis = boot.Redis
	kept.API.Listen = boot.API.Listen
	kept.Metrics = boot.Metrics
	kept.Log = boot.Log
	kept.Mailbox.KeyPrefix = boot.Mailbox.KeyPrefix
	kept.Nodes = boot.Nodes
	kept.file = boot.file
	kept.Roles = make(map[string]Role, len(next.Roles))
	for name, r := range next.Roles {
		// A role the process did not start with is confined by default.
		r.Sandbox = Sandbox{Mode: SandboxLandlock, Network: NetworkOpen}
		if b, ok := boot.Roles[name]; ok {
			r.Sandbox = b.Sandbox
		}
		kept.Roles[name] = r
	}
	kept.Maintenance.Interval = boot.Maintenance.Interval
	kept.Health.Interval = boot.Health.Interval
	kept.Health.Notify = boot.Health.Notify
	needs := Cold(Diff(&kept, next))
	if problems := kept.problems(); len(problems) > 0 {
		return nil, needs, fmt.Errorf("with the settings this process started with, the revision is invalid:\n%w", joinProblems(problems))
	}
	return &kept, needs, nil
}
