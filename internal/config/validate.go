package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"
	"unicode"

	"github.com/crewlet/crewlet"
)

// providers are the model providers a profile may name, sorted.
var providers = []string{ProviderAnthropic, ProviderOpenAI, ProviderScripted}

// Public endpoints of the hosted providers; an empty base_url means these.
const (
	OpenAIBaseURL    = "https://api.openai.com/v1"
	AnthropicBaseURL = "https://api.anthropic.com"
)

// Bounds of tickets.expire_after.
const (
	minTicketExpiry = time.Minute
	maxTicketExpiry = 8760 * time.Hour
	// maxTicketWait bounds tickets.max_wait and tickets.ask_timeout.
	maxTicketWait = 24 * time.Hour
)

// Bounds of a profile's context_tokens.
const (
	minContextTokens = 256
	maxContextTokens = 10_000_000
)

// Bounds of a profile's weight.
const (
	minWeight = 0
	maxWeight = 1_000_000
)

// Bounds of quarantine.base.
const (
	minQuarantineBase = time.Second
	maxQuarantineBase = 24 * time.Hour
)

// Bounds of a role's max_rounds.
const (
	DefaultMaxRounds = 16
	minMaxRounds     = 1
	maxMaxRounds     = 256
)

// EnvNamePattern is what profiles.*.api_key_env must match.
const EnvNamePattern = `^[A-Z_][A-Z0-9_]*$`

var (
	envNameRE = regexp.MustCompile(EnvNamePattern)
	// mcpNameRE: a server name prefixes its tools' names ("{server}__{tool}"),
	// so it may not hold "__" nor end in "_" (checked apart).
	mcpNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	// toolNameRE is what model providers accept as a function name.
	toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// headerNameRE is an HTTP header name headers_from may set.
	headerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	// envKeyRE is a variable name an MCP command's env may set.
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Bounds of mailbox.read_batch.
const (
	minReadBatch = 1
	maxReadBatch = 1000
)

// Bounds of the rest of the mailbox section.
const (
	minRetireAfter  = time.Second
	maxRetireAfter  = 720 * time.Hour
	minKeepAcked    = 0
	maxKeepAcked    = 10_000_000
	minKeepAckedFor = 0
	maxKeepAckedFor = 8760 * time.Hour
	minRetryBackoff = 10 * time.Millisecond
	maxRetryBackoff = 10 * time.Minute
	minBackstop     = time.Minute
	maxBackstop     = 24 * time.Hour
	minHumanKeep    = 0
	maxHumanKeep    = 10_000_000
	// A dead-letter stream trimmed to nothing would lose mail no one has
	// looked at; at least the newest is kept.
	minDeadLetterKeep = 1
	maxDeadLetterKeep = 10_000_000
)

// Bounds of the maintenance section.
const (
	minMaintenanceInterval = time.Second
	maxMaintenanceInterval = 24 * time.Hour
	minLedgerRetention     = time.Hour
	maxLedgerRetention     = 8760 * time.Hour
	maxTurnRetention       = 87600 * time.Hour
	// every other maintenance.*_retention key
	minRetention = time.Hour
	maxRetention = 87600 * time.Hour
	// A seat's diary cut to nothing would be no diary; at least its newest.
	minDiaryPerSeat = 1
	maxDiaryPerSeat = 10_000_000
)

// Bounds of the nodes section.
const (
	minHeartbeatTimeout  = time.Second
	maxHeartbeatTimeout  = 60 * time.Second
	minDrainTimeout      = time.Second
	maxDrainTimeout      = time.Hour
	minReleaseWait       = 0
	maxReleaseWait       = time.Hour
	minRebalanceInterval = time.Second
	maxRebalanceInterval = time.Hour
	minRebalanceMoves    = 1
	minReconcileInterval = time.Second
	maxReconcileInterval = time.Hour
	minIdleNudgeAfter    = time.Second
	maxIdleNudgeAfter    = 720 * time.Hour
	maxRebalanceMoves    = 100
	minToolCalls         = 1
	maxToolCalls         = 10000
)

// LabelPattern is what a placement label key and value must match, both in a
// role's placement and in a node's --labels. In the org file a key cannot
// hold "." (viper splits keys at dots) and arrives lowercased.
const LabelPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`

var labelRE = regexp.MustCompile(LabelPattern)

// ValidLabel reports whether s may be a label key or value.
func ValidLabel(s string) bool { return labelRE.MatchString(s) }

// Problem is one thing wrong with a config, at a key path such as
// "seats[2].role" or "roles.engineer.profile".
type Problem struct {
	Path string
	Msg  string
}

func (p *Problem) Error() string { return p.Path + ": " + p.Msg }

// Validate reports every problem with c at once, joined with errors.Join, one
// *Problem per line, in a fixed order; nil when there is none. Unknown keys
// are found by Load and Parse, which see the file itself.
func (c *Config) Validate() error { return joinProblems(c.problems()) }

func joinProblems(ps []*Problem) error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

func (c *Config) problems() []*Problem {
	var ps []*Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, &Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}

	if c.Company.Name == "" {
		add("company.name", "required")
	}
	switch tz := c.Company.Timezone; tz {
	case "":
		add("company.timezone", `required, e.g. "UTC" or "Europe/Berlin"`)
	case "Local":
		add("company.timezone", `"Local" differs from host to host; name the zone, e.g. "Europe/Berlin"`)
	default:
		if _, err := time.LoadLocation(tz); err != nil {
			add("company.timezone", "unknown time zone %q", tz)
		}
	}
	checkBudget(add, "company.budget", c.Company.Budget, c, "")
	checkTokenBudget(add, "evals.budget", c.Evals.Budget)
	for _, r := range []struct{ path, val string }{
		{"temporal.address", c.Temporal.Address},
		{"temporal.namespace", c.Temporal.Namespace},
		{"temporal.task_queue", c.Temporal.TaskQueue},
		{"postgres.url_env", c.Postgres.URLEnv},
		{"redis.url_env", c.Redis.URLEnv},
		{"api.listen", c.API.Listen},
		{"mailbox.key_prefix", c.Mailbox.KeyPrefix},
	} {
		if r.val == "" {
			add(r.path, "required")
		}
	}
	if l := c.Metrics.Listen; l != "" && !c.Metrics.Enabled {
		add("metrics.listen", "%q is set but metrics.enabled is false, so it would serve nothing; remove one of them", l)
	} else if l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
			add("metrics.listen", "%q is not a host:port address, e.g. 127.0.0.1:9464; leave it empty to serve no metrics listener", l)
		} else if c.Metrics.TokenEnv == "" && !LoopbackListen(l) {
			add("metrics.token_env", "required: metrics.listen %s is reachable beyond this machine, and its metrics (and profiles) would be anyone's; name the variable holding the bearer token scrapers send, or listen on 127.0.0.1", l)
		}
	}
	if name := c.Metrics.TokenEnv; name != "" {
		if c.Metrics.Listen == "" {
			add("metrics.token_env", "set, but metrics.listen is empty, so no listener takes it; remove it or set metrics.listen")
		} else if problem := tokenProblem(name); problem != "" {
			add("metrics.token_env", "%s", problem)
		}
	}
	if c.Metrics.Pprof && c.Metrics.Listen == "" {
		add("metrics.pprof", "true, but metrics.listen is empty, so no listener serves the profiles; set metrics.listen or turn pprof off")
	}
	if f := c.Log.Format; f != LogText && f != LogJSON {
		add("log.format", "unknown format %q; must be one of: %s, %s", f, LogText, LogJSON)
	}
	if _, err := c.Log.SlogLevel(); err != nil {
		add("log.level", "%v", err)
	}
	if n := c.Mailbox.ReadBatch; n < minReadBatch || n > maxReadBatch {
		add("mailbox.read_batch", "%d is out of range; must be between %d and %d", n, minReadBatch, maxReadBatch)
	}
	checkDuration := func(path string, val, lo, hi time.Duration) {
		if val < lo || val > hi {
			add(path, "%s is out of range; must be between %s and %s", shortDuration(val), shortDuration(lo), shortDuration(hi))
		}
	}
	checkDuration("mailbox.retire_after", c.Mailbox.RetireAfter, minRetireAfter, maxRetireAfter)
	if n := c.Mailbox.KeepAcked; n < minKeepAcked || n > maxKeepAcked {
		add("mailbox.keep_acked", "%d is out of range; must be between %d and %d", n, minKeepAcked, maxKeepAcked)
	}
	checkDuration("mailbox.keep_acked_for", c.Mailbox.KeepAckedFor, minKeepAckedFor, maxKeepAckedFor)
	checkDuration("mailbox.retry_backoff", c.Mailbox.RetryBackoff, minRetryBackoff, maxRetryBackoff)
	checkDuration("mailbox.backstop", c.Mailbox.Backstop, minBackstop, maxBackstop)
	if n := c.Mailbox.HumanKeep; n < minHumanKeep || n > maxHumanKeep {
		add("mailbox.human_keep", "%d is out of range; must be between %d and %d", n, minHumanKeep, maxHumanKeep)
	}
	if n := c.Mailbox.DeadLetterKeep; n < minDeadLetterKeep || n > maxDeadLetterKeep {
		add("mailbox.dead_letter_keep", "%d is out of range; must be between %d and %d", n, minDeadLetterKeep, maxDeadLetterKeep)
	}

	for _, r := range []struct {
		path          string
		val, min, max time.Duration
	}{
		{"nodes.heartbeat_timeout", c.Nodes.HeartbeatTimeout, minHeartbeatTimeout, maxHeartbeatTimeout},
		{"nodes.drain_timeout", c.Nodes.DrainTimeout, minDrainTimeout, maxDrainTimeout},
		{"nodes.release_wait", c.Nodes.ReleaseWait, minReleaseWait, maxReleaseWait},
		{"nodes.rebalance_interval", c.Nodes.RebalanceInterval, minRebalanceInterval, maxRebalanceInterval},
		{"nodes.reconcile_interval", c.Nodes.ReconcileInterval, minReconcileInterval, maxReconcileInterval},
	} {
		checkDuration(r.path, r.val, r.min, r.max)
	}
	if n := c.Nodes.MaxToolCalls; n < minToolCalls || n > maxToolCalls {
		add("nodes.max_tool_calls", "%d is out of range; must be between %d and %d", n, minToolCalls, maxToolCalls)
	}
	if n := c.Nodes.RebalanceMaxMoves; n < minRebalanceMoves || n > maxRebalanceMoves {
		add("nodes.rebalance_max_moves", "%d is out of range; must be between %d and %d", n, minRebalanceMoves, maxRebalanceMoves)
	}
	checkDuration("maintenance.interval", c.Maintenance.Interval, minMaintenanceInterval, maxMaintenanceInterval)
	c.Health.check(add, checkDuration)
	c.A2A.check(add)
	c.Mailbox.checkQuotas(add)
	checkDuration("maintenance.ledger_retention", c.Maintenance.LedgerRetention, minLedgerRetention, maxLedgerRetention)
	checkDuration("maintenance.turn_retention", c.Maintenance.TurnRetention, minLedgerRetention, maxTurnRetention)
	if c.Maintenance.TurnRetention > 0 && c.Maintenance.TurnRetention < c.Maintenance.LedgerRetention {
		add("maintenance.turn_retention", "%s is shorter than maintenance.ledger_retention (%s); a trigger redelivered within the ledger's window must find its turn",
			shortDuration(c.Maintenance.TurnRetention), shortDuration(c.Maintenance.LedgerRetention))
	}
	for _, r := range []struct {
		path string
		val  time.Duration
	}{
		{"maintenance.message_retention", c.Maintenance.MessageRetention},
		{"maintenance.event_retention", c.Maintenance.EventRetention},
		{"maintenance.diary_retention", c.Maintenance.DiaryRetention},
		{"maintenance.episode_retention", c.Maintenance.EpisodeRetention},
		{"maintenance.counterparty_retention", c.Maintenance.CounterpartyRetention},
		{"maintenance.node_retention", c.Maintenance.NodeRetention},
		{"maintenance.audit_retention", c.Maintenance.AuditRetention},
		{"maintenance.ticket_retention", c.Maintenance.TicketRetention},
		{"maintenance.approval_retention", c.Maintenance.ApprovalRetention},
		{"evals.retention", c.Evals.Retention},
	} {
		checkDuration(r.path, r.val, minRetention, maxRetention)
	}
	if n := c.Maintenance.DiaryMaxPerSeat; n < minDiaryPerSeat || n > maxDiaryPerSeat {
		add("maintenance.diary_max_per_seat", "%d is out of range; must be between %d and %d", n, minDiaryPerSeat, maxDiaryPerSeat)
	}
	checkDuration("tickets.expire_after", c.Tickets.ExpireAfter, minTicketExpiry, maxTicketExpiry)
	checkDuration("tickets.max_wait", c.Tickets.MaxWait, time.Second, maxTicketWait)
	checkDuration("tickets.ask_timeout", c.Tickets.AskTimeout, time.Second, maxTicketWait)
	checkDuration("quarantine.base", c.Quarantine.Base, minQuarantineBase, maxQuarantineBase)
	checkAllow(add, c.Models.Allow)
	// Compared only when both are in range: one that is not is reported
	// already, and setting it right may settle this too.
	inRange := func(v, lo, hi time.Duration) bool { return v >= lo && v <= hi }
	if m := c.Maintenance; inRange(m.MessageRetention, minRetention, maxRetention) &&
		inRange(m.TurnRetention, minLedgerRetention, maxTurnRetention) && m.MessageRetention < m.TurnRetention {
		add("maintenance.message_retention", "%s is shorter than maintenance.turn_retention (%s); a turn's conversation must outlive its turn record",
			shortDuration(m.MessageRetention), shortDuration(m.TurnRetention))
	}
	for _, r := range []struct {
		path, what string
		val        time.Duration
	}{
		{"maintenance.ticket_retention", "a delegation re-run within the ledger's window must find its ticket, not open another", c.Maintenance.TicketRetention},
		{"maintenance.approval_retention", "a gated call re-run within the ledger's window must find its decision, not ask again", c.Maintenance.ApprovalRetention},
	} {
		if m := c.Maintenance; inRange(r.val, minRetention, maxRetention) &&
			inRange(m.LedgerRetention, minLedgerRetention, maxLedgerRetention) && r.val < m.LedgerRetention {
			add(r.path, "%s is shorter than maintenance.ledger_retention (%s); %s", shortDuration(r.val), shortDuration(m.LedgerRetention), r.what)
		}
	}

	profiles := sortedKeys(c.Profiles)
	for _, name := range profiles {
		p, base := c.Profiles[name], "profiles."+name
		if !crewlet.ValidName(name) {
			add(base, "invalid profile name %q; names must be %s", name, crewlet.NamePattern)
		}
		switch {
		case p.Provider == "":
			add(base+".provider", "required; supported providers: %s", strings.Join(providers, ", "))
		case !contains(providers, p.Provider):
			add(base+".provider", "unsupported provider %q; supported providers: %s", p.Provider, strings.Join(providers, ", "))
		case p.Provider == ProviderScripted:
			// A scripted profile may name a model: the name its calls are
			// priced as (prices:), since it calls no provider.
			for _, k := range []struct {
				key string
				set bool
			}{
				{"base_url", p.BaseURL != ""},
				{"api_key_env", p.APIKeyEnv != ""},
				{"max_tokens", p.MaxTokens != 0},
			} {
				if k.set {
					add(base+"."+k.key, "provider %s takes no %s; it applies to providers %s and %s", ProviderScripted, k.key, ProviderAnthropic, ProviderOpenAI)
				}
			}
		default:
			if len(p.Rules) > 0 {
				add(base+".rules", "provider %s takes no rules; they apply to provider %s", p.Provider, ProviderScripted)
			}
			if p.Delay != 0 {
				add(base+".delay", "provider %s takes no delay; it applies to provider %s", p.Provider, ProviderScripted)
			}
			remoteProfile(add, base, p)
		}
		for i, r := range p.Rules {
			checkRule(add, fmt.Sprintf("%s.rules[%d]", base, i), r)
		}
		if p.Delay < 0 {
			add(base+".delay", "%s is negative; must be 0 or more", p.Delay)
		}
		if n := p.ContextTokens; n < minContextTokens || n > maxContextTokens {
			add(base+".context_tokens", "%d is out of range; must be between %d and %d", n, minContextTokens, maxContextTokens)
		} else if p.MaxTokens > 0 && int64(p.MaxTokens) >= n {
			add(base+".max_tokens", "%d leaves no room for the conversation in context_tokens (%d); make it smaller than context_tokens", p.MaxTokens, n)
		}
		if w := p.CompactWith; w != "" && !contains(profiles, w) {
			add(base+".compact_with", "unknown profile %q; known profiles: %s%s", w, list(profiles), didYouMean(w, profiles))
		}
		if w := p.Weight; w < minWeight || w > maxWeight {
			add(base+".weight", "%d is out of range; must be between %d (never picked by weighted selection) and %d", w, minWeight, maxWeight)
		}
		if n := p.MaxLoad; n < 0 && (n != Unlimited || p.maxLoadSet) {
			add(base+".max_load", "%d is negative; 0 means no turns at all, and leaving out max_load means unlimited", n)
		}
		switch cr := p.Credential; {
		case cr == "":
			add(base+".credential", "empty; leave it out to use the profile's name, or name the account the profile spends")
		case cr != name && !crewlet.ValidName(cr):
			// One defaulted to an invalid profile name is reported as that.
			add(base+".credential", "invalid credential name %q; names must be %s", cr, crewlet.NamePattern)
		}
		if p.ExhaustedPattern != "" && p.exhausted == nil {
			if _, err := regexp.Compile(p.ExhaustedPattern); err != nil {
				add(base+".exhausted_pattern", "%v; want a Go (RE2) regexp", err)
			}
		}
		if allow := c.Models.Allow; len(allow) > 0 {
			if id := p.ModelID(); id != "" && !contains(allow, id) {
				add(base+".model", "model %q is not in models.allow (%s); add it to models.allow or change the model", id, strings.Join(allow, ", "))
			}
		}
	}

	roles := sortedKeys(c.Roles)
	protected := c.ProtectedPaths()
	checkMCPAllow(add, c)
	if w := c.Nodes.Workspaces; w != "" && !filepath.IsAbs(w) {
		add("nodes.workspaces", "%q is not an absolute path", w)
	} else if w != "" {
		for _, q := range protected {
			if within(resolved(q), resolved(w)) {
				add("nodes.workspaces", "%s holds %s, which crewlet keeps from MCP children; choose a directory of its own", w, q)
			}
		}
	}
	for _, name := range roles {
		r, base := c.Roles[name], "roles."+name
		if !crewlet.ValidName(name) {
			add(base, "invalid role name %q; names must be %s", name, crewlet.NamePattern)
		}
		checkCharter(add, c, name, r)
		checkPool(add, base, r, c.Profiles, profiles)
		if n := r.MaxRounds; n < minMaxRounds || n > maxMaxRounds {
			add(base+".max_rounds", "%d is out of range; must be between %d and %d", n, minMaxRounds, maxMaxRounds)
		}
		// "" is a role built without a file: the default, enqueue.
		if r.OnBusy != "" && !slices.Contains(crewlet.OnBusyPolicies, r.OnBusy) {
			add(base+".on_busy", "%q is not a busy policy; use one of %s", r.OnBusy, strings.Join(crewlet.OnBusyPolicies, ", "))
		}
		checkBudget(add, base+".budget", r.Budget, c, name)
		if after := r.IdleNudge.After; after != 0 {
			checkDuration(base+".idle_nudge.after", after, minIdleNudgeAfter, maxIdleNudgeAfter)
		}
		checkMCP(add, base+".mcp", r.MCP)
		checkSandbox(add, base+".sandbox", r.Sandbox, protected)
		checkApprovals(add, base+".approvals", c, r.Approvals)
		lbase := base + ".placement.labels"
		for _, k := range sortedKeys(r.Placement.Labels) {
			v, path := r.Placement.Labels[k], lbase+"."+k
			switch {
			case k == "":
				path = lbase
				add(path, "empty label key; label keys must match %s", LabelPattern)
			case !ValidLabel(k):
				add(path, "invalid label key %q; label keys must match %s", k, LabelPattern)
			}
			switch {
			case v == "":
				add(path, "empty label value; label values must match %s", LabelPattern)
			case !ValidLabel(v):
				add(path, "invalid label value %q; label values must match %s", v, LabelPattern)
			}
		}
	}

	checkAgents(add, c)
	checkPrices(add, c)
	checkAuthority(add, c)

	if n := c.Stream.Keep; n < 100 || n > 1000000 {
		add("stream.keep", "%d is out of range; must be between 100 and 1000000", n)
	}
	checkDuration("stream.keep_for", c.Stream.KeepFor, time.Minute, 720*time.Hour)
	checkDuration("stream.heartbeat", c.Stream.Heartbeat, time.Second, 5*time.Minute)
	if n := c.Stream.MaxPerPrincipal; n < 1 || n > 1000 {
		add("stream.max_per_principal", "%d is out of range; must be between 1 and 1000", n)
	}
	checkDuration("stream.write_timeout", c.Stream.WriteTimeout, time.Second, 5*time.Minute)

	checkAuth(add, c)
	checkDoor(add, c)
	if n := c.API.MutationsPerMinute; n < 0 || n > 100000 {
		add("api.mutations_per_minute", "%d is out of range; must be between 0 (no limit) and 100000", n)
	}
	checkTemporal(add, c.Temporal)

	if len(c.Seats) == 0 {
		add("seats", "at least one seat is required")
	}
	first := map[string]int{}
	for i, s := range c.Seats {
		base := fmt.Sprintf("seats[%d]", i)
		switch {
		case s.Handle == "":
			add(base+".handle", "required")
		case !crewlet.ValidName(s.Handle):
			add(base+".handle", "invalid handle %q; names must be %s", s.Handle, crewlet.NamePattern)
		case s.Handle == crewlet.ExternalSender || s.Handle == crewlet.TicketSender || s.Handle == crewlet.ScheduleSender:
			add(base+".handle", "%q is reserved: crewlet sends mail under that name; choose another handle", s.Handle)
		}
		if s.Handle != "" {
			if j, dup := first[s.Handle]; dup {
				add(base+".handle", "duplicate handle %q (also seats[%d])", s.Handle, j)
			} else {
				first[s.Handle] = i
			}
		}
		kind := s.kind()
		if kind != string(crewlet.SeatAgent) && kind != string(crewlet.SeatHuman) {
			add(base+".kind", "unknown kind %q; must be one of: %s, %s", kind, crewlet.SeatAgent, crewlet.SeatHuman)
		}
		switch {
		case s.Role == "" && kind == string(crewlet.SeatAgent):
			add(base+".role", "required for an agent seat; known roles: %s", list(roles))
		case s.Role != "" && !contains(roles, s.Role):
			add(base+".role", "unknown role %q; known roles: %s%s", s.Role, list(roles), didYouMean(s.Role, roles))
		}
	}
	checkSchedules(add, c, roles)
	checkPools(add, c, roles)
	return ps
}

type addFunc func(path, format string, args ...any)

// checkPool checks a role's pool: one of its two forms, each profile known
// and named once, a known selection, and a weighted pool that can pick.
// defined holds the profiles, names their sorted names.
func checkPool(add addFunc, base string, r Role, defined map[string]Profile, names []string) {
	// at names the pool's i-th profile by the key the file wrote it under.
	oneItem := r.oneItem || r.Profiles == nil
	at := func(i int) string {
		if oneItem {
			return base + ".profile"
		}
		return fmt.Sprintf("%s.profiles[%d]", base, i)
	}
	poolKey := base + ".profiles"
	if oneItem {
		poolKey = base + ".profile"
	}
	pool := r.Pool()
	switch {
	case r.bothForms || (r.Profile != "" && len(r.Profiles) > 0 && r.Profile != r.Profiles[0]):
		add(base, "has both profile and profiles; use one: profile is the one-item form of profiles")
		return
	case r.Profiles != nil && len(r.Profiles) == 0:
		add(poolKey, "empty; list at least one profile; known profiles: %s", list(names))
		return
	case len(pool) == 0:
		add(poolKey, "required: name the role's profile (profile: x) or its pool (profiles: [x, y]); known profiles: %s", list(names))
		return
	}
	known := true
	first := map[string]int{}
	for i, name := range pool {
		switch {
		case name == "":
			add(at(i), "empty profile name; known profiles: %s", list(names))
		case !contains(names, name):
			add(at(i), "unknown profile %q; known profiles: %s%s", name, list(names), didYouMean(name, names))
		}
		known = known && contains(names, name)
		if j, dup := first[name]; dup {
			add(at(i), "duplicate profile %q (also %s); a pool names each profile once", name, at(j))
		} else {
			first[name] = i
		}
	}
	switch sel := r.selection(); sel {
	case crewlet.SelectionWeighted:
		// Checked only when every profile is known: setting an unknown one
		// right may settle this too.
		if !known {
			break
		}
		zero := true
		for _, name := range pool {
			zero = zero && defined[name].Weight == 0
		}
		if zero {
			add(poolKey, "every profile of the pool has weight 0, and weighted selection never picks a profile of weight 0; give one a weight above 0, or set selection: %s to take the pool in order", crewlet.SelectionOrdered)
		}
	case crewlet.SelectionOrdered:
		// Weights are not consulted.
	default:
		add(base+".selection", "unknown selection %q; must be one of: %s, %s", sel, crewlet.SelectionWeighted, crewlet.SelectionOrdered)
	}
}

// checkAllow checks models.allow: model ids, each once.
func checkAllow(add addFunc, allow []string) {
	first := map[string]int{}
	for i, m := range allow {
		at := fmt.Sprintf("models.allow[%d]", i)
		switch {
		case strings.TrimSpace(m) == "":
			add(at, "empty; list model ids as profiles name them, e.g. %q", "gpt-4o-mini")
			continue
		case strings.IndexFunc(m, unicode.IsControl) >= 0:
			add(at, "%q holds a control character; list model ids as profiles name them", m)
		}
		if j, dup := first[m]; dup {
			add(at, "duplicate model %q (also models.allow[%d])", m, j)
		} else {
			first[m] = i
		}
	}
}

// remoteProfile checks an openai or anthropic profile, including that its
// key is in the environment: a profile that cannot authenticate would only
// fail later, turn by turn. The key is named, never shown.
func remoteProfile(add addFunc, base string, p Profile) {
	if p.Model == "" {
		add(base+".model", "required for provider %s", p.Provider)
	}
	official := p.BaseURL == ""
	if p.BaseURL != "" {
		u, err := url.Parse(p.BaseURL)
		switch {
		case err == nil && u.User != nil:
			// Not shown: it holds a password.
			add(base+".base_url", "must not hold credentials; name the key's environment variable in api_key_env")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add(base+".base_url", "invalid URL %q; want an http or https URL such as %s", p.BaseURL, defaultBaseURL(p.Provider))
		default:
			official = strings.EqualFold(u.Hostname(), "api.openai.com")
		}
	}
	if p.MaxTokens < 0 {
		add(base+".max_tokens", "%d is negative; must be 0 (the provider's default) or more", p.MaxTokens)
	}
	switch k := p.APIKeyEnv; {
	case k == "":
		// An OpenAI-compatible server of one's own (Ollama, vLLM,
		// llama.cpp) often takes no key; the hosted APIs always do.
		switch {
		case p.Provider == ProviderAnthropic:
			add(base+".api_key_env", "required for provider %s; name the environment variable holding the key", p.Provider)
		case official:
			add(base+".api_key_env", "required for %s; name the environment variable holding the key", OpenAIBaseURL)
		}
	case !envNameRE.MatchString(k):
		add(base+".api_key_env", "invalid environment variable name %q; must match %s", k, EnvNamePattern)
	default:
		v, ok := os.LookupEnv(k)
		switch {
		case !ok:
			add(base+".api_key_env", "environment variable %s is not set; export it before starting crewlet", k)
		case strings.TrimSpace(v) == "":
			add(base+".api_key_env", "environment variable %s is empty; export the key in it before starting crewlet", k)
		}
	}
}

func defaultBaseURL(provider string) string {
	if provider == ProviderAnthropic {
		return AnthropicBaseURL
	}
	return OpenAIBaseURL
}

func checkRule(add addFunc, rp string, r Rule) {
	switch {
	case r.OnResult != "" && r.Match != "":
		add(rp, "has both match and on_result; a rule matches the message or the latest tool result")
	case r.OnResult != "":
		if _, err := regexp.Compile(r.OnResult); err != nil {
			add(rp+".on_result", "%v", err)
		}
	default:
		if _, err := regexp.Compile(r.Match); err != nil {
			add(rp+".match", "%v", err)
		}
	}
	if _, err := template.New("reply").Parse(r.Reply); err != nil {
		add(rp+".reply", "%v", err)
	}
	switch {
	case r.Fail != "" && r.Reply != "":
		add(rp, "has both reply and fail; a rule either replies or fails")
	case r.Fail != "" && len(r.Tools) > 0:
		add(rp, "has both tools and fail; a failing rule calls no tools")
	case r.Fail != "" && r.OnResult != "":
		add(rp, "has both on_result and fail; a rule that follows a tool result calls tools or replies")
	case r.Fail == "" && r.Reply == "" && (r.OnResult == "" || len(r.Tools) == 0):
		add(rp, "has neither reply nor fail; a rule either replies or fails (an on_result rule may call tools instead)")
	}
	kinds := []string{crewlet.ProviderBadRequest, crewlet.ProviderAuth, crewlet.ProviderServerError, crewlet.ProviderRateLimited, crewlet.ProviderExhausted}
	switch {
	case r.FailKind == "":
	case r.Fail == "":
		add(rp+".fail_kind", "applies to a rule with fail; this rule has none")
	case !contains(kinds, r.FailKind):
		add(rp+".fail_kind", "unknown kind %q; kinds: %s", r.FailKind, strings.Join(kinds, ", "))
	}
	for i, t := range r.Tools {
		tp := fmt.Sprintf("%s.tools[%d]", rp, i)
		switch {
		case t.Name == "":
			add(tp+".name", `required; a tool's name as the model sees it, e.g. "tracker__create_issue"`)
		case !toolNameRE.MatchString(t.Name):
			add(tp+".name", "invalid tool name %q; must match %s", t.Name, toolNameRE)
		}
		if _, err := json.Marshal(t.Args); err != nil {
			add(tp+".args", "not a JSON object: %v", err)
			continue
		}
		checkArgTemplates(add, tp+".args", t.Args)
	}
}

// checkArgTemplates parses every string in a scripted tool call's arguments
// as the template it is.
func checkArgTemplates(add addFunc, path string, v any) {
	switch v := v.(type) {
	case string:
		if _, err := template.New("args").Parse(v); err != nil {
			add(path, "%v", err)
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			checkArgTemplates(add, path+"."+k, v[k])
		}
	case []any:
		for i, e := range v {
			checkArgTemplates(add, fmt.Sprintf("%s[%d]", path, i), e)
		}
	}
}

func checkMCP(add addFunc, base string, servers []MCPServer) {
	first := map[string]int{}
	for i, sc := range servers {
		sp := fmt.Sprintf("%s[%d]", base, i)
		switch {
		case sc.Name == "":
			add(sp+".name", "required; 1-32 of a-z, 0-9, '_' and '-'")
		case !mcpNameRE.MatchString(sc.Name):
			add(sp+".name", "invalid name %q; must be 1-32 of a-z, 0-9, '_' and '-'", sc.Name)
		case strings.Contains(sc.Name, "__") || strings.HasSuffix(sc.Name, "_"):
			add(sp+".name", `invalid name %q; must not contain "__" nor end in "_" (tools are named {server}__{tool})`, sc.Name)
		}
		if sc.Name != "" {
			if j, dup := first[sc.Name]; dup {
				add(sp+".name", "duplicate name %q (also %s[%d])", sc.Name, base, j)
			} else {
				first[sc.Name] = i
			}
		}
		switch {
		case len(sc.Command) == 0 && sc.URL == "":
			add(sp, "needs a command (a stdio server) or a url (an HTTP server)")
		case len(sc.Command) > 0 && sc.URL != "":
			add(sp, "has both command and url; set exactly one")
		case len(sc.Command) > 0 && strings.TrimSpace(sc.Command[0]) == "":
			add(sp+".command[0]", "empty program name")
		case sc.URL != "":
			u, err := url.Parse(sc.URL)
			switch {
			case err == nil && u.User != nil:
				// Not shown: it holds a password or a token.
				add(sp+".url", "must not hold credentials; send them as a header with headers_from")
			case err != nil && strings.Contains(sc.URL, "@"):
				// Not shown either: what precedes the "@" may be a secret.
				add(sp+".url", "invalid URL; want an http or https URL, without credentials")
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				add(sp+".url", "invalid URL %q; want an http or https URL", sc.URL)
			}
		}
		if sc.URL != "" && len(sc.Env) > 0 {
			add(sp+".env", "applies only to a command; an HTTP server runs elsewhere")
		}
		if sc.URL != "" && len(sc.EnvFrom) > 0 {
			add(sp+".env_from", "applies only to a command; an HTTP server runs elsewhere")
		}
		for j, name := range sc.EnvFrom {
			checkEnvFrom(add, fmt.Sprintf("%s.env_from[%d]", sp, j), name)
		}
		checkRunAs(add, sp+".run_as", sc)
		if len(sc.Command) > 0 && len(sc.HeadersFrom) > 0 {
			add(sp+".headers_from", "applies only to a url; give a command its secrets with env_from")
		}
		for _, header := range sortedKeys(sc.HeadersFrom) {
			at := sp + ".headers_from." + header
			if !headerNameRE.MatchString(header) {
				add(at, "invalid header name %q; want letters, digits and '-'", header)
				continue
			}
			checkEnvFrom(add, at, sc.HeadersFrom[header])
		}
		for j, kv := range sc.Env {
			// Show only the key: the value may be a secret, and so may an
			// entry with no "=" at all.
			k, v, ok := strings.Cut(kv, "=")
			switch {
			case !ok:
				add(fmt.Sprintf("%s.env[%d]", sp, j), `has no "="; want KEY=VALUE`)
			case !envKeyRE.MatchString(k):
				add(fmt.Sprintf("%s.env[%d]", sp, j), "invalid key %q; want KEY=VALUE with KEY matching %s", k, envKeyRE)
			case v == RedactedValue:
				add(fmt.Sprintf("%s.env[%d]", sp, j), "%s is %s, as GET /config shows an inline value; write the real value, or pass it from crewlet's environment with env_from", k, RedactedValue)
			}
		}
	}
}

// checkEnvFrom checks that name is a variable of crewlet's environment; a
// value is never shown, it may be a secret.
func checkEnvFrom(add addFunc, at, name string) {
	if !envKeyRE.MatchString(name) {
		add(at, "invalid environment variable name %q; must match %s", name, envKeyRE)
	} else if _, set := os.LookupEnv(name); !set {
		add(at, "environment variable %s is not set; export it before starting crewlet", name)
	}
}

// shortDuration writes d as time.Duration does, less the zero units it puts
// after a whole minute or hour: "1m", "1h" rather than "1m0s", "1h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// kind is the seat's kind with the default applied.
func (s Seat) kind() string {
	if s.Kind == "" {
		return string(crewlet.SeatAgent)
	}
	return s.Kind
}

// unknownKeys walks raw, the settings as read, along the schema t by
// mapstructure tags and reports every key t has no field for. Values of the
// wrong shape are left to the decoder to report.
func unknownKeys(path string, t reflect.Type, raw any, out *[]*Problem) {
	switch t.Kind() {
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		sort.Strings(names)
		for _, k := range sortedKeys(m) {
			p := joinPath(path, k)
			ft, ok := fields[strings.ToLower(k)]
			if !ok {
				msg := "unknown key"
				if s, ok := nearest(k, names); ok {
					msg += fmt.Sprintf("; did you mean %q?", s)
				} else {
					msg += "; valid keys: " + strings.Join(names, ", ")
				}
				*out = append(*out, &Problem{Path: p, Msg: msg})
				continue
			}
			unknownKeys(p, ft, m[k], out)
		}
	case reflect.Map:
		m, ok := raw.(map[string]any)
		if !ok {
			return
		}
		for _, k := range sortedKeys(m) {
			unknownKeys(joinPath(path, k), t.Elem(), m[k], out)
		}
	case reflect.Slice:
		l, ok := raw.([]any)
		if !ok {
			return
		}
		for i, e := range l {
			unknownKeys(fmt.Sprintf("%s[%d]", path, i), t.Elem(), e, out)
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func didYouMean(s string, candidates []string) string {
	if n, ok := nearest(s, candidates); ok {
		return fmt.Sprintf("; did you mean %q?", n)
	}
	return ""
}

// nearest returns the candidate closest to s by edit distance, if it is close
// enough to be a likely typo: at most one edit per three characters of s.
// Ties go to the first candidate, so callers pass them sorted.
func nearest(s string, candidates []string) (string, bool) {
	limit := max(1, len([]rune(s))/3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD <= limit && bestD < len([]rune(s))
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of adjacent characters each cost one.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// checkAuth checks the API's principals: a known role, a token in the
// environment (named, never shown), a distinct name and secret, a seat that
// is a human seat; and that a listen beyond loopback has tokens at all.
func checkAuth(add addFunc, c *Config) {
	names := map[string]int{}
	secrets := map[string]int{}
	for i, t := range c.Auth.Tokens {
		base := fmt.Sprintf("auth.tokens[%d]", i)
		switch {
		case t.Name == "":
			add(base+".name", "required; it is who the token is in the audit log")
		case !crewlet.ValidName(t.Name):
			add(base+".name", "invalid name %q; names must be %s", t.Name, crewlet.NamePattern)
		default:
			if j, dup := names[t.Name]; dup {
				add(base+".name", "duplicate name %q (also auth.tokens[%d])", t.Name, j)
			}
			names[t.Name] = i
		}
		if roles := []string{RoleAdmin, RoleOperator, RoleMember, RoleViewer}; !contains(roles, t.Role) {
			add(base+".role", "unknown role %q; roles: %s", t.Role, strings.Join(roles, ", "))
		}
		if problem := tokenProblem(t.TokenEnv); problem != "" {
			add(base+".token_env", "%s", problem)
		} else {
			secret := t.Secret()
			if j, dup := secrets[secret]; dup {
				add(base+".token_env", "the token in %s is also auth.tokens[%d]'s; give each principal its own", t.TokenEnv, j)
			}
			secrets[secret] = i
		}
		switch s, ok := c.Seat(t.Seat); {
		case t.Seat != "" && (!ok || s.Kind != string(crewlet.SeatHuman)):
			add(base+".seat", "%q is not a human seat of the org; a principal binds to a person's seat", t.Seat)
		case t.Seat == "" && t.Role == RoleMember:
			add(base+".seat", "required for role member: name the person's human seat the member acts for")
		}
	}
	if len(c.Auth.Tokens) == 0 && !LoopbackListen(c.API.Listen) {
		add("api.listen", "%s is reachable beyond this machine but auth.tokens is empty: anyone could send as any seat; add tokens or listen on 127.0.0.1", c.API.Listen)
	}
}

// tokenProblem says what is wrong with the bearer token in the
// environment variable name, never showing it; "" when it will do.
func tokenProblem(name string) string {
	secret := envSecret(name)
	switch {
	case name == "":
		return "required; name the environment variable holding the token"
	case !envNameRE.MatchString(name):
		return fmt.Sprintf("invalid environment variable name %q; must match %s", name, EnvNamePattern)
	case secret == "":
		return fmt.Sprintf("environment variable %s is not set or empty; export the token in it", name)
	case len(secret) < minTokenBytes:
		return fmt.Sprintf("the token in %s is %d bytes; use at least %d random bytes", name, len(secret), minTokenBytes)
	case placeholderToken(secret):
		return fmt.Sprintf("the token in %s is a placeholder, not a secret (it says change-me or example, or repeats a few characters); generate one, e.g. openssl rand -hex 32", name)
	}
	return ""
}

// minTokenBytes is the shortest token the API takes.
const minTokenBytes = 16

// placeholderWords are what a token copied from an example file says of
// itself (deploy/production/crewlet.env.example: CHANGE-ME-admin-token-…).
var placeholderWords = []string{"changeme", "change-me", "change_me", "replaceme", "replace-me", "placeholder", "example", "your-token", "your_token", "xxxxxxxx"}

// minTokenSymbols is the fewest distinct bytes a token may have: random
// hex of 16 bytes or more has far more, "0000…" or "abababab…" far fewer.
const minTokenSymbols = 8

// placeholderToken reports whether secret is a placeholder left in place
// of a token: it names itself one, or repeats a few characters.
func placeholderToken(secret string) bool {
	lower := strings.ToLower(secret)
	for _, w := range placeholderWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	var seen [256]bool
	symbols := 0
	for i := 0; i < len(secret); i++ {
		if !seen[secret[i]] {
			seen[secret[i]] = true
			symbols++
		}
	}
	return symbols < minTokenSymbols
}

// LoopbackListen reports whether a listen address only takes connections
// from this machine.
func LoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && LoopbackHost(host)
}

// LoopbackHost reports whether host names this machine: localhost or a
// loopback address.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
