package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/crewlet/crewlet"
)

// EnvPrefix prefixes the environment variables that override config keys:
// api.listen is overridden by CREWLET_API_LISTEN.
const EnvPrefix = "CREWLET"

// defaults holds every scalar key outside profiles and roles, whose keys
// are named by the file.
var defaults = map[string]any{
	"company.name":             "",
	"company.timezone":         "UTC",
	"temporal.address":         "127.0.0.1:7233",
	"temporal.namespace":       "default",
	"temporal.task_queue":      crewlet.TaskQueue,
	"temporal.api_key_env":     "",
	"temporal.tls.enabled":     false,
	"temporal.tls.ca_file":     "",
	"temporal.tls.cert_file":   "",
	"temporal.tls.key_file":    "",
	"temporal.tls.server_name": "",

	"temporal.deployment.name":     "",
	"temporal.deployment.build_id": "",
	"temporal.deployment.promote":  PromoteFirst,

	"postgres.url_env":         "CREWLET_PG_URL",
	"redis.url_env":            "CREWLET_REDIS_URL",
	"api.listen":               "127.0.0.1:8080",
	"api.mutations_per_minute": 600,
	"mailbox.key_prefix":       "crewlet",
	"mailbox.read_batch":       16,

	"api.tls.cert_file":            "",
	"api.tls.key_file":             "",
	"api.insecure_http":            false,
	"api.auth_failures_per_minute": DefaultAuthFailuresPerMinute,
	"api.denied_audits_per_minute": DefaultDeniedAuditsPerMinute,
	"auth.local_token":             false,
	"auth.local_token_file":        "",
	"auth.anonymous":               false,

	"mailbox.retire_after":     24 * time.Hour,
	"mailbox.keep_acked":       10000,
	"mailbox.keep_acked_for":   24 * time.Hour,
	"mailbox.retry_backoff":    10 * time.Second,
	"mailbox.backstop":         time.Hour,
	"mailbox.human_keep":       1000,
	"mailbox.dead_letter_keep": 10000,

	"mailbox.max_unread":         10000,
	"mailbox.sender_per_minute":  600,
	"mailbox.max_memory_percent": 95,

	"log.format": LogText,
	"log.level":  "info",

	"metrics.enabled":     true,
	"metrics.listen":      "",
	"metrics.token_env":   "",
	"metrics.seat_labels": true,
	"metrics.pprof":       false,

	"nodes.heartbeat_timeout":   3 * time.Second,
	"nodes.drain_timeout":       60 * time.Second,
	"nodes.release_wait":        30 * time.Second,
	"nodes.rebalance_interval":  30 * time.Second,
	"nodes.rebalance_max_moves": 4,
	"nodes.reconcile_interval":  time.Minute,
	"nodes.max_tool_calls":      64,
	"nodes.workspaces":          "",

	"maintenance.interval":               15 * time.Minute,
	"maintenance.ledger_retention":       168 * time.Hour,
	"maintenance.turn_retention":         720 * time.Hour,
	"maintenance.message_retention":      2160 * time.Hour,
	"maintenance.event_retention":        720 * time.Hour,
	"maintenance.diary_retention":        8760 * time.Hour,
	"maintenance.episode_retention":      2160 * time.Hour,
	"maintenance.counterparty_retention": 8760 * time.Hour,
	"maintenance.node_retention":         168 * time.Hour,
	"maintenance.audit_retention":        8760 * time.Hour,
	"maintenance.ticket_retention":       2160 * time.Hour,
	"maintenance.approval_retention":     2160 * time.Hour,
	"maintenance.diary_max_per_seat":     10_000,

	"health.interval":           30 * time.Second,
	"health.establishing_after": 2 * time.Minute,
	"health.gone_after":         time.Minute,
	"health.turn_overrun":       15 * time.Minute,
	"health.backlog":            100,
	"health.oldest_unread":      15 * time.Minute,
	"health.failing_turns":      3,
	"health.dead_letters":       3,
	"health.dead_letter_window": time.Hour,

	"stream.keep":              DefaultStream.Keep,
	"stream.keep_for":          DefaultStream.KeepFor,
	"stream.heartbeat":         DefaultStream.Heartbeat,
	"stream.max_per_principal": DefaultStream.MaxPerPrincipal,
	"stream.write_timeout":     DefaultStream.WriteTimeout,

	"tickets.expire_after": 24 * time.Hour,
	"tickets.max_wait":     time.Hour,
	"tickets.ask_timeout":  30 * time.Minute,
	"tickets.max_hops":     DefaultMaxHops,

	"quarantine.base": 30 * time.Minute,

	"company.budget.tokens_per_day":   0,
	"company.budget.tokens_per_week":  0,
	"company.budget.tokens_per_month": 0,
	"company.budget.usd_per_day":      0.0,
	"company.budget.usd_per_week":     0.0,
	"company.budget.usd_per_month":    0.0,
	"company.budget.on_limit":         "",
	"company.budget.ask.to":           "",
	"company.budget.ask.at":           DefaultAskAt,

	"evals.budget.tokens_per_day":   DefaultEvalTokensPerDay,
	"evals.budget.tokens_per_week":  0,
	"evals.budget.tokens_per_month": 0,
	"evals.retention":               2160 * time.Hour,
}

// Load reads the YAML org file at path, applies defaults and CREWLET_*
// environment overrides, and returns the config only if it is valid. A
// validation error lists every problem, one per line.
func Load(path string) (*Config, error) {
	c, _, err := LoadWithOverrides(path)
	return c, err
}

// LoadWithOverrides is Load that also returns the keys the environment
// overrode, each as "key (VARIABLE)", section by section as Config lists
// them. It never names a value: one may be a secret.
func LoadWithOverrides(path string) (*Config, []string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config %s: %w", path, err)
	}
	v := newViper()
	if err := v.ReadConfig(bytes.NewReader(doc)); err != nil {
		var pe viper.ConfigParseError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("config %s: not valid YAML: %w", path, pe.Unwrap())
		}
		return nil, nil, fmt.Errorf("read config %s: %w", path, err)
	}
	c, applied, err := build(v, doc, path)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s is invalid:\n%w", path, err)
	}
	return c, applied, nil
}

// Parse is Load for a YAML document already in memory.
func Parse(yamlBytes []byte) (*Config, error) {
	v := newViper()
	if err := v.ReadConfig(bytes.NewReader(yamlBytes)); err != nil {
		var pe viper.ConfigParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("config: not valid YAML: %w", pe.Unwrap())
		}
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, _, err := build(v, yamlBytes, "")
	return c, err
}

func newViper() *viper.Viper {
	v := viper.New()
	// The file is YAML whatever its name ends with.
	v.SetConfigType("yaml")
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	return v
}

// bindEnv binds each scalar key of the org, those of its defaults and those
// under the profiles and roles the file names, to its CREWLET_ variable,
// and returns the keys whose variable is set, as "key (VARIABLE)".
//
// Only scalar keys are bound. viper's AutomaticEnv would also take a
// variable named after a section (CREWLET_API, which the CLI reads as the
// API URL) as that section's value, hiding every key under it.
func bindEnv(v *viper.Viper) []string {
	var applied []string
	for _, k := range scalarKeys("", reflect.TypeFor[Config](), v.AllSettings()) {
		name := envVar(k)
		_ = v.BindEnv(k, name) // fails only without a key
		// viper, too, takes an empty variable for an unset one.
		if val, ok := os.LookupEnv(name); ok && val != "" {
			applied = append(applied, fmt.Sprintf("%s (%s)", k, name))
		}
	}
	return applied
}

// envVar is the variable that overrides key: api.listen is overridden by
// CREWLET_API_LISTEN.
func envVar(key string) string {
	return strings.ToUpper(EnvPrefix + "_" + strings.ReplaceAll(key, ".", "_"))
}

// scalarKeys lists the scalar keys at path of type t: every field of a
// struct, whether raw (the settings at path) has it or not; every entry of
// a map that raw has; nothing inside a list.
func scalarKeys(path string, t reflect.Type, raw any) []string {
	m, _ := raw.(map[string]any)
	switch t.Kind() {
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			out = append(out, scalarKeys(joinPath(path, name), f.Type, m[name])...)
		}
		return out
	case reflect.Map:
		var out []string
		for _, k := range sortedKeys(m) {
			out = append(out, scalarKeys(joinPath(path, k), t.Elem(), m[k])...)
		}
		return out
	case reflect.Slice, reflect.Array, reflect.Interface:
		return nil
	}
	return []string{path}
}

// build binds the environment overrides, decodes the merged settings and
// reports, in this order, unknown keys, values of the wrong type, and what
// Validate finds. doc is the file as written, for what viper cannot keep. It
// returns the overrides bindEnv applied. file is the org file's path, ""
// for a document that came from elsewhere.
func build(v *viper.Viper, doc []byte, file string) (*Config, []string, error) {
	// Before the environment is bound, which makes every scalar key of a
	// named profile one of AllKeys, written or not.
	written := writtenCounts(v)
	applied := bindEnv(v)
	raw := v.AllSettings()

	var problems []*Problem
	unknownKeys("", reflect.TypeFor[Config](), raw, &problems)

	var c Config
	bad := decodeProblems(decode(raw, &c))
	labelHints(bad)
	bad = append(bad, nullLabels(v)...)
	bad = append(bad, nullCounts(v, written)...)
	problems = append(problems, bad...)
	keepPartialEntries(raw, &c)
	for i := range c.Seats {
		if c.Seats[i].Kind == "" {
			c.Seats[i].Kind = string(crewlet.SeatAgent)
		}
	}
	applyEntryDefaults(raw, &c)
	scheduleDefaults(raw, &c)
	poolDefaults(raw, &c)
	ruleToolArgs(doc, &c)
	c.file = file

	// A value that did not decode is already reported; what Validate would
	// say about its zero value is noise.
	for _, p := range c.problems() {
		if !under(p.Path, bad) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return nil, nil, joinProblems(problems)
	}
	return &c, applied, nil
}

func decode(in, out any) error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		WeaklyTypedInput: true,
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, boolStringHook),
		Result:           out,
	})
	if err != nil {
		return err
	}
	return d.Decode(in)
}

// durationHook accepts "2s"-style strings and a bare 0 for durations. Any
// other bare number is refused: YAML "delay: 2" would otherwise mean 2ns.
// A time.Duration, as a default is, passes through.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() || from == to {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		d, err := time.ParseDuration(data.(string))
		if err != nil {
			return nil, fmt.Errorf("invalid duration %q; write it with a unit, e.g. \"2s\" or \"500ms\"", data)
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("invalid duration %v; write it with a unit, e.g. \"%vs\"", data, data)
	}
	return data, nil
}

// boolStringHook writes a YAML true or false given for a string as "true" or
// "false", not as the "1" or "0" of weak typing: a placement label "gpu: true"
// must match a node started with --labels gpu=true.
func boolStringHook(from, to reflect.Type, data any) (any, error) {
	if to.Kind() == reflect.String && from.Kind() == reflect.Bool {
		return strconv.FormatBool(reflect.ValueOf(data).Bool()), nil
	}
	return data, nil
}

// labelPath matches the key path of one placement label.
var labelPath = regexp.MustCompile(`^roles\.[^.]+\.placement\.labels\.`)

// labelHints explains a label that came out as a mapping: viper splits keys
// at dots, so "topology.zone: eu" arrives as {topology: {zone: eu}}.
func labelHints(bad []*Problem) {
	for _, p := range bad {
		if labelPath.MatchString(p.Path) && strings.HasPrefix(p.Msg, "want a string, got a mapping") {
			p.Msg += `; a label key must not contain "." (the config reader splits keys at dots)`
		}
	}
}

// nullLabels reports placement labels written with no value ("tools:"), which
// viper drops without a word: the role would be pinned to less than it says.
func nullLabels(v *viper.Viper) []*Problem {
	var out []*Problem
	for _, k := range v.AllKeys() {
		if labelPath.MatchString(k) && v.Get(k) == nil {
			out = append(out, &Problem{Path: k, Msg: "empty label value; label values must match " + LabelPattern})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// writtenCounts lists the profiles' weight and max_load keys the file
// wrote, with a value or without.
func writtenCounts(v *viper.Viper) []string {
	var out []string
	for _, k := range v.AllKeys() {
		if countPath.MatchString(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// nullCounts reports the written weight or max_load keys that have no
// value, which viper drops without a word: the profile would get the
// default (weight 1, no cap on its load) where its author may have meant 0.
// An environment override gives one a value.
func nullCounts(v *viper.Viper, written []string) []*Problem {
	var out []*Problem
	for _, k := range written {
		if v.Get(k) != nil {
			continue
		}
		hint := "write the most concurrent turns (0 allows none), or leave out max_load for no limit"
		if strings.HasSuffix(k, ".weight") {
			hint = "write a weight from 0 (never picked by weighted selection) to 1000000, or leave out weight for the default 1"
		}
		out = append(out, &Problem{Path: k, Msg: "empty value; " + hint})
	}
	return out
}

// countPath matches the key path of a profile's weight or max_load.
var countPath = regexp.MustCompile(`^profiles\.[^.]+\.(weight|max_load)$`)

// keepPartialEntries puts back profiles and roles that mapstructure dropped
// because one of their fields failed to decode, so that seats and roles
// naming them are not also reported as naming something unknown.
func keepPartialEntries(raw map[string]any, c *Config) {
	if m, ok := raw["profiles"].(map[string]any); ok {
		for name, in := range m {
			if _, ok := c.Profiles[name]; !ok {
				var p Profile
				_ = decode(in, &p) // already reported
				if c.Profiles == nil {
					c.Profiles = map[string]Profile{}
				}
				c.Profiles[name] = p
			}
		}
	}
	if m, ok := raw["roles"].(map[string]any); ok {
		for name, in := range m {
			if _, ok := c.Roles[name]; !ok {
				var r Role
				_ = decode(in, &r) // already reported
				if c.Roles == nil {
					c.Roles = map[string]Role{}
				}
				c.Roles[name] = r
			}
		}
	}
}

// applyEntryDefaults fills in the defaults of keys inside profiles and roles,
// which SetDefault cannot reach: their names are the file's. A key written
// with a zero value keeps it, so that "max_rounds: 0" is reported and
// "max_load: 0" means none. It also puts a role's pool in both its forms
// and compiles each profile's exhausted_pattern.
func applyEntryDefaults(raw map[string]any, c *Config) {
	c.Nodes.mcpAllowSet = hasKey(raw, "nodes", "mcp_allow")
	for name, r := range c.Roles {
		if !hasKey(raw, "roles", name, "max_rounds") {
			r.MaxRounds = DefaultMaxRounds
		}
		if !hasKey(raw, "roles", name, "selection") {
			r.Selection = crewlet.SelectionWeighted
		}
		if !hasKey(raw, "roles", name, "on_busy") {
			r.OnBusy = crewlet.OnBusyEnqueue
		}
		mayDefaults(raw, name, &r)
		if r.Sandbox.Mode == "" {
			r.Sandbox.Mode = SandboxLandlock
		}
		if r.Sandbox.Network == "" {
			r.Sandbox.Network = NetworkOpen
		}
		switch {
		case r.Profile != "" && r.Profiles != nil:
			r.bothForms = true // reported; neither form wins
		case r.Profile != "":
			r.Profiles, r.oneItem = []string{r.Profile}, true
		case len(r.Profiles) > 0:
			r.Profile = r.Profiles[0]
		}
		c.Roles[name] = r
	}
	for name, p := range c.Profiles {
		if p.BaseURL == "" && (p.Provider == ProviderOpenAI || p.Provider == ProviderAnthropic) {
			p.BaseURL = defaultBaseURL(p.Provider)
		}
		if !hasKey(raw, "profiles", name, "context_tokens") {
			p.ContextTokens = DefaultContextTokens[p.Provider]
		}
		if !hasKey(raw, "profiles", name, "weight") {
			p.Weight = DefaultWeight
		}
		if p.maxLoadSet = hasKey(raw, "profiles", name, "max_load"); !p.maxLoadSet {
			p.MaxLoad = Unlimited
		}
		if !hasKey(raw, "profiles", name, "credential") {
			p.Credential = name
		}
		if p.ExhaustedPattern != "" {
			p.exhausted, _ = regexp.Compile(p.ExhaustedPattern) // one that does not compile is reported
		}
		c.Profiles[name] = p
	}
}

// hasKey reports whether the nested mapping m holds the key path.
func hasKey(m map[string]any, path ...string) bool {
	for i, k := range path {
		v, ok := m[k]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}

// ruleToolArgs puts back the case of scripted tool-call arguments. viper
// lowercases every mapping key, even inside lists, and a tool's parameters
// ("filePath") are case-sensitive; so the arguments are read again from the
// document itself. Environment overrides never reach into lists, so the
// document is all there is to them.
func ruleToolArgs(doc []byte, c *Config) {
	var file struct {
		Profiles map[string]struct {
			Rules []struct {
				Tools []struct {
					Args any `yaml:"args"`
				} `yaml:"tools"`
			} `yaml:"rules"`
		} `yaml:"profiles"`
	}
	// A value of the wrong shape is the decoder's to report; the rest of
	// the document still comes through.
	if err := yaml.Unmarshal(doc, &file); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return
		}
	}
	for name, fp := range file.Profiles {
		p, ok := c.Profiles[strings.ToLower(name)]
		if !ok {
			continue
		}
		for i := range min(len(fp.Rules), len(p.Rules)) {
			tools := p.Rules[i].Tools
			for j := range min(len(fp.Rules[i].Tools), len(tools)) {
				if args, ok := fp.Rules[i].Tools[j].Args.(map[string]any); ok {
					tools[j].Args = args
				}
			}
		}
	}
}

// mapKeyInPath matches mapstructure's "roles[engineer]" spelling of a map key.
var mapKeyInPath = regexp.MustCompile(`\[([^\]]*[^\]0-9][^\]]*)\]`)

// decodeProblems turns mapstructure's errors into problems named by key path
// in the same spelling as the others ("roles.engineer.profile").
func decodeProblems(err error) []*Problem {
	var out []*Problem
	var walk func(error)
	walk = func(err error) {
		var de *mapstructure.DecodeError
		switch e := err.(type) {
		case nil:
			return
		case *mapstructure.DecodeError:
			inner := e.Unwrap()
			switch inner.(type) {
			case interface{ Unwrap() []error }, *mapstructure.DecodeError:
				walk(inner)
				return
			}
			path := mapKeyInPath.ReplaceAllString(e.Name(), ".$1")
			out = append(out, &Problem{Path: path, Msg: decodeMessage(inner)})
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			// Decode wraps the joined errors of all fields in one message;
			// looking through it with errors.As would find only the first.
			if errors.As(err, &de) {
				walk(e.Unwrap())
				return
			}
			out = append(out, &Problem{Path: "(root)", Msg: err.Error()})
		default:
			out = append(out, &Problem{Path: "(root)", Msg: err.Error()})
		}
	}
	walk(err)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func decodeMessage(err error) string {
	var pe *mapstructure.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("invalid value %s; want %s", show(pe.Value), describe(pe.Expected.Type()))
	}
	var ue *mapstructure.UnconvertibleTypeError
	if errors.As(err, &ue) {
		return fmt.Sprintf("want %s, got %s", describe(ue.Expected.Type()), describe(reflect.TypeOf(ue.Value)))
	}
	return err.Error()
}

func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// describe names a type the way a YAML author thinks of it.
func describe(t reflect.Type) string {
	if t == nil {
		return "nothing"
	}
	if t == reflect.TypeFor[time.Duration]() {
		return `a duration such as "2s"`
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return t.String()
}

// under reports whether path is one of the bad paths or lies below one.
func under(path string, bad []*Problem) bool {
	for _, b := range bad {
		if path == b.Path || strings.HasPrefix(path, b.Path+".") || strings.HasPrefix(path, b.Path+"[") {
			return true
		}
	}
	return false
}
