// Package config loads and validates the crewlet org file. It is the only
// package besides cmd/ that uses viper.
package config

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// Config is the whole org file: the company, where its services are, and its
// roles, seats and model profiles.
type Config struct {
	Company     Company            `mapstructure:"company"`
	Temporal    Temporal           `mapstructure:"temporal"`
	Postgres    Store              `mapstructure:"postgres"`
	Redis       Store              `mapstructure:"redis"`
	API         API                `mapstructure:"api"`
	Auth        Auth               `mapstructure:"auth"`
	Mailbox     Mailbox            `mapstructure:"mailbox"`
	Nodes       Nodes              `mapstructure:"nodes"`
	Maintenance Maintenance        `mapstructure:"maintenance"`
	Health      Health             `mapstructure:"health"`
	Tickets     Tickets            `mapstructure:"tickets"`
	Quarantine  Quarantine         `mapstructure:"quarantine"`
	Models      Models             `mapstructure:"models"`
	Profiles    map[string]Profile `mapstructure:"profiles"`
	Roles       map[string]Role    `mapstructure:"roles"`
	Seats       []Seat             `mapstructure:"seats"`
	Schedules   []Schedule         `mapstructure:"schedules"`
	Pools       []SpawnPool        `mapstructure:"pools"`
	Agents      []Agent            `mapstructure:"agents"`
	Prices      []Price            `mapstructure:"prices"`
	Log         Log                `mapstructure:"log"`
	Metrics     Metrics            `mapstructure:"metrics"`
	Stream      Stream             `mapstructure:"stream"`
	A2A         A2A                `mapstructure:"a2a"`
	Evals       Evals              `mapstructure:"evals"`

	// Revision is the config revision this is; 0 for a file never stored
	// as one. It is no key of the file.
	// (docs/architecture.md, "Config revisions")
	Revision int64 `mapstructure:"-"`
	// file is the org file this config was loaded from ("" for a
	// document read elsewhere): kept from MCP children's view.
	file string
	// SpawnedVersion is the version of the spawned seats among Seats
	// (store.SpawnedVersion); no key of the file either.
	SpawnedVersion int64 `mapstructure:"-"`
}

// Metrics is where a worker without the API serves GET /metrics; a process
// running the API serves it there.
type Metrics struct {
	// Enabled keeps the process's metrics; false records none and serves
	// none, for a process that must spend nothing on them.
	Enabled bool `mapstructure:"enabled"`
	// Listen is the address ("127.0.0.1:9464"); empty serves none.
	Listen string `mapstructure:"listen"`
	// TokenEnv names the environment variable holding the bearer token a
	// scraper of Listen must send; required when Listen is reachable
	// beyond this machine.
	TokenEnv string `mapstructure:"token_env"`
	// SeatLabels labels the mailbox gauges by seat; false sums them over
	// the seats instead, for an org too large for a series per seat.
	SeatLabels bool `mapstructure:"seat_labels"`
	// Pprof serves Go's profiles (/debug/pprof/) on Listen too, to find
	// where a busy node's CPU goes; off by default, since a profile shows
	// the process's internals to whoever reaches the address.
	Pprof bool `mapstructure:"pprof"`
}

// Log is how a crewlet process writes its log, to stderr.
type Log struct {
	// Format is text (key=value lines) or json (one object a line).
	Format string `mapstructure:"format"`
	// Level is the least severe level written: debug, info, warn or error.
	Level string `mapstructure:"level"`
}

// The log formats.
const (
	LogText = "text"
	LogJSON = "json"
)

// SlogLevel returns the level as slog's, or an error naming the levels.
func (l Log) SlogLevel() (slog.Level, error) {
	switch l.Level {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level %q; must be one of: debug, info, warn, error", l.Level)
}

// Company names the company.
type Company struct {
	Name string `mapstructure:"name"`
	// Timezone is an IANA zone; budget windows and schedules run on it.
	Timezone string `mapstructure:"timezone"`
	// Budget caps the tokens and money of every seat together.
	Budget Budget `mapstructure:"budget"`
}

// Evals is what replays of recorded turns may spend
// (docs/architecture.md, "Replay").
type Evals struct {
	// Budget caps the tokens replays spend, on the company's clock, apart
	// from every seat's and the company's budget.
	Budget TokenBudget `mapstructure:"budget"`
	// Retention is how long a finished eval run and its results are kept;
	// datasets stay until deleted. 1h to 87600h.
	Retention time.Duration `mapstructure:"retention"`
}

// DefaultEvalTokensPerDay is evals.budget.tokens_per_day unless set: a
// replay left running by mistake stops at a day's ordinary spend.
const DefaultEvalTokensPerDay = 1_000_000

// Location returns the company's time zone; UTC when it does not load,
// which a validated config rules out.
func (c *Config) Location() *time.Location {
	if loc, err := time.LoadLocation(c.Company.Timezone); err == nil && c.Company.Timezone != "Local" {
		return loc
	}
	return time.UTC
}

// Temporal says where the Temporal frontend is.
type Temporal struct {
	Address   string `mapstructure:"address"`
	Namespace string `mapstructure:"namespace"`
	TaskQueue string `mapstructure:"task_queue"`
	// TLS secures the connection; unset, it is plaintext (the dev server).
	TLS TemporalTLS `mapstructure:"tls"`
	// APIKeyEnv names the environment variable holding an API key sent with
	// every call (Temporal Cloud, a gateway that takes keys); the file never
	// holds the key.
	APIKeyEnv string `mapstructure:"api_key_env"`
	// Deployment is this build's place in Temporal's worker deployment
	// versioning (docs/versioning.md, "Worker builds").
	Deployment TemporalDeployment `mapstructure:"deployment"`
}

// TemporalDeployment names the worker deployment and build a node's
// workflow worker polls as. Turns stay on the build that started them;
// seats and duties move to the deployment's current build at their next
// workflow task.
type TemporalDeployment struct {
	// Name is the worker deployment; empty: the task queue's name with "."
	// and ":" (which Temporal reserves) made "-".
	Name string `mapstructure:"name"`
	// BuildID names the code this process runs; empty: the binary's VCS
	// revision, or a digest of the binary when it carries none or was
	// built from a modified tree.
	BuildID string `mapstructure:"build_id"`
	// Promote says when a starting node makes its build the deployment's
	// current one: PromoteFirst, PromoteAlways or PromoteNever.
	Promote string `mapstructure:"promote"`
}

// The values of temporal.deployment.promote.
const (
	// PromoteFirst makes a build current when the deployment has no
	// current build yet (the first deploy) or no node of the current build
	// runs (every node restarted on a new build). A build started beside
	// the current one's running nodes is promoted by an operator.
	PromoteFirst = "first"
	// PromoteAlways makes every starting node's build current: one
	// developer's machine, where the newest binary should take over.
	PromoteAlways = "always"
	// PromoteNever leaves promotion to the operator.
	PromoteNever = "never"
)

// TemporalTLS are the files of a TLS connection to Temporal: the CA that
// signed the server's certificate (empty: the system's roots), a client
// certificate and key for mutual TLS (both or neither), and the name the
// server's certificate must carry (empty: the address's host).
type TemporalTLS struct {
	Enabled    bool   `mapstructure:"enabled"`
	CAFile     string `mapstructure:"ca_file"`
	CertFile   string `mapstructure:"cert_file"`
	KeyFile    string `mapstructure:"key_file"`
	ServerName string `mapstructure:"server_name"`
}

// Store names the environment variable holding a connection URL. URLs carry
// passwords, so the file never holds them.
type Store struct {
	URLEnv string `mapstructure:"url_env"`
}

// API is the REST listener.
type API struct {
	Listen string `mapstructure:"listen"`
	// AllowedOrigins are the browser origins ("https://ops.example.com")
	// whose requests the API takes; a request with any other Origin header
	// is refused. Empty: no browser page may call the API.
	AllowedOrigins []string `mapstructure:"allowed_origins"`
	// MutationsPerMinute bounds each principal's mutations (POSTs) per
	// minute on one API process, with bursts of as many; over it the API
	// answers 429. 0 turns the limit off. 0 to 100000.
	MutationsPerMinute int `mapstructure:"mutations_per_minute"`
	// Hosts are names the API answers to besides the listen address's host
	// and the loopback names; a request naming any other Host is refused
	// (DNS rebinding). See door.go.
	Hosts []string `mapstructure:"hosts"`
	// TLS serves the API over HTTPS; InsecureHTTP allows plain HTTP on a
	// listen beyond loopback.
	TLS          APITLS `mapstructure:"tls"`
	InsecureHTTP bool   `mapstructure:"insecure_http"`
	// AuthFailuresPerMinute is how many failed authentications a source
	// may make in a minute before its requests are refused unread; 0: no
	// limit. DeniedAuditsPerMinute is how many of a source's refusals
	// before authentication are written to the audit log a minute.
	AuthFailuresPerMinute int `mapstructure:"auth_failures_per_minute"`
	DeniedAuditsPerMinute int `mapstructure:"denied_audits_per_minute"`
}

// Stream tunes the live event stream of turns
// (docs/operations.md, "Live stream"). Every key is hot.
type Stream struct {
	// Keep is about the most events kept per seat and per conversation
	// stream (trimmed with MAXLEN ~). 100 to 1000000.
	Keep int `mapstructure:"keep"`
	// KeepFor is how long a stream is kept after its last event, so the
	// streams of quiet conversations go. 1m to 720h.
	KeepFor time.Duration `mapstructure:"keep_for"`
	// Heartbeat is how often an idle stream connection gets a keepalive
	// comment. 1s to 5m.
	Heartbeat time.Duration `mapstructure:"heartbeat"`
	// MaxPerPrincipal bounds the streams one principal holds open on one
	// API process; past it a new one is refused (429). 1 to 1000.
	MaxPerPrincipal int `mapstructure:"max_per_principal"`
	// WriteTimeout is how long one write of an event or keepalive to a
	// stream may block on a client that does not read before the stream
	// is ended and its place freed. 1s to 5m.
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
}

// DefaultStream is the stream block's defaults.
//
// WriteTimeout is twice the heartbeat: a client reading at all drains a
// keepalive or an event within that, one whose kernel buffers stay full that
// long has stopped.
var DefaultStream = Stream{Keep: 1000, KeepFor: time.Hour, Heartbeat: 15 * time.Second, MaxPerPrincipal: 8, WriteTimeout: 30 * time.Second}

// Auth says who may call the API
// (docs/architecture.md, "Doors: the API and the Temporal frontend").
type Auth struct {
	// Tokens are the API's principals. None: the API mints a local token
	// (MintsLocalToken) and takes only that, unless Anonymous.
	Tokens []Token `mapstructure:"tokens"`
	// LocalToken mints a per-boot admin token into LocalTokenFile (empty:
	// LocalTokenPath's), a file only this user can read, which the CLI
	// reads by itself, beside the configured Tokens too. See door.go.
	LocalToken     bool   `mapstructure:"local_token"`
	LocalTokenFile string `mapstructure:"local_token_file"`
	// Anonymous, with no Tokens, opts out of the local token: the API
	// then takes every caller on this machine, a seat's own tool
	// processes included, as admin, and warns so at every start. On a
	// loopback listen only.
	Anonymous bool `mapstructure:"anonymous"`
}

// MintsLocalToken reports whether the API mints a local token at start:
// when asked to (LocalToken), and by default when no token is configured,
// so that no caller is admin without one.
func (a Auth) MintsLocalToken() bool {
	return a.LocalToken || len(a.Tokens) == 0 && !a.Anonymous
}

// Token is one API principal: a bearer token, read from the environment
// variable TokenEnv, with a role.
type Token struct {
	// Name is who the token is: the "by" of what it does, and the sender of
	// the mail it sends unless Seat binds it to a human seat.
	Name     string `mapstructure:"name"`
	Role     string `mapstructure:"role"`
	TokenEnv string `mapstructure:"token_env"`
	// Seat binds the principal to a human seat: mail it sends is from that
	// seat. A member's is required: it is what the member may act on.
	Seat string `mapstructure:"seat"`
}

// Roles a token may have: admin, operator and viewer from most to least
// allowed company-wide; a member acts for its own seat only.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleViewer   = "viewer"
	RoleMember   = "member"
)

// Secret is the token's value from the environment; empty when unset.
func (t Token) Secret() string { return envSecret(t.TokenEnv) }

// Token is the bearer token a scraper of Listen sends; empty when
// TokenEnv is unset.
func (m Metrics) Token() string { return envSecret(m.TokenEnv) }

// envSecret is the secret in the environment variable name, trimmed.
func envSecret(name string) string {
	if name == "" {
		return ""
	}
	return strings.TrimSpace(os.Getenv(name))
}

// Mailbox tunes the Redis mailboxes.
type Mailbox struct {
	// KeyPrefix namespaces every Redis key crewlet writes.
	KeyPrefix string `mapstructure:"key_prefix"`
	// ReadBatch is the most entries one mailbox read hands to the seat.
	ReadBatch int `mapstructure:"read_batch"`
	// RetireAfter is how long a removed seat's mailbox is kept, counted from
	// the first maintenance sweep that sees the seat missing. 1s to 720h.
	RetireAfter time.Duration `mapstructure:"retire_after"`
	// KeepAcked is the most handled (acked) entries kept per mailbox;
	// maintenance trims older handled entries. 0 to 10000000; 0 trims every
	// handled entry.
	KeepAcked int `mapstructure:"keep_acked"`
	// KeepAckedFor is the age past which handled entries are trimmed.
	// 0 to 8760h.
	KeepAckedFor time.Duration `mapstructure:"keep_acked_for"`
	// RetryBackoff is the most a seat waits after a failed turn before it
	// reads again: it backs off 2s, 4s, ... up to this. 10ms to 10m.
	RetryBackoff time.Duration `mapstructure:"retry_backoff"`
	// HumanKeep is the most entries kept in Redis for a human seat's
	// mailbox, which people read and nothing acks; maintenance moves the
	// oldest beyond it to Postgres (person_mail), where the inbox still
	// reads them. 0 to 10000000; 0 moves all of it each pass.
	HumanKeep int `mapstructure:"human_keep"`
	// DeadLetterKeep is the most entries kept in the dead-letter stream;
	// maintenance moves the oldest beyond it to Postgres (dead_letters),
	// where GET /deadletters still lists them. 1 to 10000000.
	DeadLetterKeep int `mapstructure:"dead_letter_keep"`
	// Backstop is how long an idle seat waits for a wake before it reads
	// its mailbox anyway, should every wake signal have been lost: an idle
	// seat's whole steady cost is one timer per backstop. 1m to 24h.
	Backstop time.Duration `mapstructure:"backstop"`
	// MaxUnread is the most unhandled entries a mailbox holds before it
	// refuses new mail (507). 1 to 10000000.
	MaxUnread int `mapstructure:"max_unread"`
	// SenderPerMinute is the most messages one sender (a seat, or
	// "operator") may publish a minute before it is refused (429).
	// 0 (off) to 1000000.
	SenderPerMinute int `mapstructure:"sender_per_minute"`
	// MaxMemoryPercent is the share of Redis's maxmemory past which new
	// mail is refused (507). 81 to 100.
	MaxMemoryPercent int `mapstructure:"max_memory_percent"`
}

// Nodes times the fleet of worker nodes that host seats
// (docs/architecture.md, "Timeouts and why").
type Nodes struct {
	// HeartbeatTimeout is the host heartbeat timeout: how fast a dead or
	// wedged node is detected. It is also the watchdog threshold: a node
	// whose own loops stop beating for longer exits. 1s to 60s.
	HeartbeatTimeout time.Duration `mapstructure:"heartbeat_timeout"`
	// DrainTimeout bounds how long a draining node waits for its seats to
	// leave before it exits. 1s to 1h.
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	// ReleaseWait bounds how long a voluntary release waits for the
	// in-flight turn to finish. 0 to 1h; 0 releases at once.
	ReleaseWait time.Duration `mapstructure:"release_wait"`
	// RebalanceInterval is the cadence of the rebalance duty. 1s to 1h.
	RebalanceInterval time.Duration `mapstructure:"rebalance_interval"`
	// RebalanceMaxMoves is the most seats one rebalance pass moves. 1 to 100.
	RebalanceMaxMoves int `mapstructure:"rebalance_max_moves"`
	// ReconcileInterval is the cadence of the reconcile duty, which starts
	// the seats without a workflow, stops those the org lacks, creates
	// missing rows and mailboxes, repairs drift and sends idle nudges; a
	// config apply also runs a pass at once. 1s to 1h.
	ReconcileInterval time.Duration `mapstructure:"reconcile_interval"`
	// MaxToolCalls is the most tool calls a node runs at once for the seats
	// it hosts; more wait for a free one. 1 to 10000.
	MaxToolCalls int `mapstructure:"max_tool_calls"`
	// Workspaces is the directory under which each seat's sandboxed MCP
	// children get their workspace (WorkspaceRoot); empty: the default.
	Workspaces string `mapstructure:"workspaces"`
	// MCPAllow is what a config apply may have this node run: the stdio
	// commands and the environment variables (env_from, headers_from) of
	// MCP servers (sandbox.go). Absent, it is what the node's own file
	// names at start; cold, so an apply never widens it.
	MCPAllow []MCPAllow `mapstructure:"mcp_allow"`

	// mcpAllowSet says the file wrote mcp_allow, if only as [].
	mcpAllowSet bool
}

// Health configures the health duty (docs/architecture.md, "Seat health"):
// how often it classifies the seats, the thresholds of each state, and where
// transitions are posted.
type Health struct {
	// Interval is the duty's cadence (a Temporal Schedule). 1s to 1h.
	Interval time.Duration `mapstructure:"interval"`
	// EstablishingAfter is how long a seat may establish before it is
	// establishing_too_long. 1s to 24h.
	EstablishingAfter time.Duration `mapstructure:"establishing_after"`
	// GoneAfter is how long a seat's workflow must be missing from
	// Temporal's list, on lists that answered, before the seat is gone:
	// a continue-as-new can hide a run from the list for a moment. 0 to 1h.
	GoneAfter time.Duration `mapstructure:"gone_after"`
	// TurnOverrun is how long a turn may run, not counting a wait on a
	// ticket, before it is turn_overrunning. 1s to 24h.
	TurnOverrun time.Duration `mapstructure:"turn_overrun"`
	// Backlog is the most mail that may wait before the seat is backlog;
	// OldestUnread how old the oldest unanswered entry may be. Backlog 1
	// to 10000000; OldestUnread 1s to 720h.
	Backlog      int           `mapstructure:"backlog"`
	OldestUnread time.Duration `mapstructure:"oldest_unread"`
	// FailingTurns is how many of the seat's latest turns must all have
	// failed for it to be failing. 1 to 100.
	FailingTurns int `mapstructure:"failing_turns"`
	// DeadLetters within DeadLetterWindow make it dead_letters_rising.
	// DeadLetters 1 to 100000; DeadLetterWindow 1s to 720h.
	DeadLetters      int           `mapstructure:"dead_letters"`
	DeadLetterWindow time.Duration `mapstructure:"dead_letter_window"`
	// Notify posts transitions to webhooks.
	Notify []HealthNotify `mapstructure:"notify"`
}

// HealthNotify is one webhook of health transitions.
type HealthNotify struct {
	// URL is an http or https URL, without credentials.
	URL string `mapstructure:"url"`
	// States are the states whose transitions (into or out of) are posted;
	// empty posts every transition.
	States []string `mapstructure:"states"`
	// HeadersFrom maps a header to the variable of crewlet's environment
	// holding its value, so the file holds no secret.
	HeadersFrom map[string]string `mapstructure:"headers_from"`
}

// Headers is the headers the webhook gets, with their values from this
// process's environment.
func (n HealthNotify) Headers() map[string]string {
	out := make(map[string]string, len(n.HeadersFrom))
	for header, name := range n.HeadersFrom {
		out[header] = os.Getenv(name)
	}
	return out
}

// Maintenance times the maintenance duty: mailbox retirement and trimming,
// and how long each kind of record that grows is kept.
type Maintenance struct {
	// Interval is the cadence of the maintenance duty (a Temporal Schedule).
	// 1s to 24h.
	Interval time.Duration `mapstructure:"interval"`
	// LedgerRetention is how long completion-ledger rows are kept; older rows
	// are deleted. It must outlive any redelivery window: a message redelivered
	// after its ledger row is gone would be handled twice. 1h to 8760h.
	LedgerRetention time.Duration `mapstructure:"ledger_retention"`
	// TurnRetention is how long turn records (transcripts, rounds, tool
	// calls) are kept; token counters are kept for usageRetention. It must
	// outlive LedgerRetention, so a trigger that may still come back finds
	// its conversation. 1h to 87600h.
	TurnRetention time.Duration `mapstructure:"turn_retention"`
	// MessageRetention is how long conversation messages are kept, counted
	// from when they were recorded; a conversation left with no message goes
	// with its last one, and compaction summaries older than this go too.
	// At least TurnRetention, so a turn's conversation outlives its record.
	// 1h to 87600h.
	MessageRetention time.Duration `mapstructure:"message_retention"`
	// EventRetention is how long seat events (skipped triggers, dead
	// letters, requeues) are kept. 1h to 87600h.
	EventRetention time.Duration `mapstructure:"event_retention"`
	// DiaryRetention is how long a seat's diary entries are kept. 1h to 87600h.
	DiaryRetention time.Duration `mapstructure:"diary_retention"`
	// EpisodeRetention is how long a seat's episodes (its memory of each
	// turn) are kept. 1h to 87600h.
	EpisodeRetention time.Duration `mapstructure:"episode_retention"`
	// CounterpartyRetention is how long a counterparty profile is kept after
	// the seat last dealt with that counterparty. 1h to 87600h.
	CounterpartyRetention time.Duration `mapstructure:"counterparty_retention"`
	// NodeRetention is how long the presence row of a node incarnation that
	// stopped, or stopped beating, is kept. A live node's row is never
	// older than the heartbeat timeout, far below the 1h floor. 1h to 87600h.
	NodeRetention time.Duration `mapstructure:"node_retention"`
	// AuditRetention is how long the API's audit log keeps a row.
	// 1h to 87600h.
	AuditRetention time.Duration `mapstructure:"audit_retention"`
	// TicketRetention is how long a settled ticket is kept, counted from
	// its settling; an open one is never deleted. At least LedgerRetention,
	// so a delegation re-run within the ledger's window finds its ticket by
	// its key rather than opening another. 1h to 87600h.
	TicketRetention time.Duration `mapstructure:"ticket_retention"`
	// ApprovalRetention is how long a decided approval (with the gated
	// call's arguments) is kept, counted from its decision; a pending one,
	// or one whose remembered grant still holds, is never deleted. At least
	// LedgerRetention, so a call re-run within the ledger's window finds
	// its decision rather than asking again. 1h to 87600h.
	ApprovalRetention time.Duration `mapstructure:"approval_retention"`
	// DiaryMaxPerSeat is the most diary entries a seat keeps; past it the
	// oldest go. 1 to 10000000.
	DiaryMaxPerSeat int `mapstructure:"diary_max_per_seat"`
}

// Tickets times delegation tickets
// (docs/architecture.md, "Delegation: tickets").
type Tickets struct {
	// ExpireAfter ends a ticket still open this long after it was opened
	// (expired), and tells its delegator. 1m to 8760h.
	ExpireAfter time.Duration `mapstructure:"expire_after"`
	// MaxWait bounds how long a turn waits on a ticket it delegated with
	// wait: true (or answered with wait: true); then the model is told it
	// is still pending, and a notice follows when it ends. 1s to 24h.
	MaxWait time.Duration `mapstructure:"max_wait"`
	// AskTimeout bounds how long a turn serving a ticket waits for the
	// answer to its question; then it decides itself and the ticket
	// returns to pending. 1s to 24h.
	AskTimeout time.Duration `mapstructure:"ask_timeout"`
	// MaxHops bounds a delegation chain: a seat's delegate that would make
	// a ticket past this hop is refused. 1 to 32.
	MaxHops int `mapstructure:"max_hops"`
}

// Quarantine times how long a credential that reached its usage limit is
// left alone (docs/architecture.md, "Profile pools").
type Quarantine struct {
	// Base is the first quarantine's length; each consecutive one doubles
	// it, up to crewlet.QuarantineMultiplierCap times Base. 1s to 24h.
	Base time.Duration `mapstructure:"base"`
}

// Models is the model gate: which models the org's profiles may use.
type Models struct {
	// Allow lists the model ids profiles may use (Profile.ModelID); empty:
	// any model.
	Allow []string `mapstructure:"allow"`
}

// Providers a profile may name.
const (
	ProviderScripted  = "scripted"
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Profile is a model backend.
type Profile struct {
	Provider string `mapstructure:"provider"`

	// BaseURL, Model, APIKeyEnv and MaxTokens configure the openai and
	// anthropic providers. BaseURL is filled in at load with the provider's
	// public endpoint when empty. A scripted profile may name a Model too:
	// the name its calls are priced as (prices:).
	BaseURL string `mapstructure:"base_url"`
	Model   string `mapstructure:"model"`
	// APIKeyEnv names the environment variable holding the API key; the
	// file never holds the key itself.
	APIKeyEnv string `mapstructure:"api_key_env"`
	// MaxTokens caps each answer; 0 leaves it to the provider (anthropic,
	// which requires a cap, then uses 4096).
	MaxTokens int `mapstructure:"max_tokens"`

	// ContextTokens is the most tokens a model call of this profile may
	// carry: system prompt, tools, conversation and the answer
	// (max_tokens). Older exchanges are compacted into a summary, and older
	// tool results clipped, to stay within it. DefaultContextTokens of the
	// provider when the file does not say; 256 to 10000000.
	ContextTokens int64 `mapstructure:"context_tokens"`
	// CompactWith names the profile that writes this profile's compaction
	// summaries; empty means this profile itself.
	CompactWith string `mapstructure:"compact_with"`

	// Rules and Delay configure the scripted provider.
	Rules []Rule `mapstructure:"rules"`
	// Delay is written with a unit ("2s"); a bare number other than 0 is refused.
	Delay time.Duration `mapstructure:"delay"`

	// Weight is the profile's share of a weighted pool's turns, against the
	// weights of the pool's other profiles. 0 to 1000000; DefaultWeight
	// when the file does not say; 0: weighted selection never picks it.
	Weight int `mapstructure:"weight"`
	// MaxLoad is the most turns running on the profile at once, fleet-wide.
	// 0 allows none; Unlimited when the file does not say, which is the
	// only negative value a loaded config holds.
	MaxLoad int `mapstructure:"max_load"`
	// Credential names the account the profile spends: profiles naming the
	// same one are quarantined together. The profile's own name when the
	// file does not say.
	Credential string `mapstructure:"credential"`
	// ExhaustedPattern is a Go (RE2) regexp matched against a provider's
	// error message; a match means the credential reached its usage limit.
	ExhaustedPattern string `mapstructure:"exhausted_pattern"`

	// exhausted is ExhaustedPattern compiled, once, at load.
	exhausted *regexp.Regexp `mapstructure:"-"`
	// maxLoadSet says the file wrote max_load, so that a written -1 is
	// refused rather than taken for Unlimited.
	maxLoadSet bool
}

// Unlimited is Profile.MaxLoad of a profile whose file entry sets no
// max_load: no cap on its concurrent turns.
const Unlimited = -1

// DefaultWeight is Profile.Weight when the file does not say.
const DefaultWeight = 1

// Exhausted reports whether a provider's error message says the profile's
// credential reached its usage limit: whether it matches ExhaustedPattern.
// False when the profile has none.
func (p Profile) Exhausted(msg string) bool {
	if p.exhausted != nil {
		return p.exhausted.MatchString(msg)
	}
	if p.ExhaustedPattern == "" {
		return false
	}
	// A Profile that Load or Parse did not make has no compiled pattern.
	ok, err := regexp.MatchString(p.ExhaustedPattern, msg)
	return err == nil && ok
}

// ModelID is the model id models.allow is compared with: Model, or
// "scripted" for a scripted profile, which names no model.
func (p Profile) ModelID() string {
	if p.Model == "" && p.Provider == ProviderScripted {
		return ProviderScripted
	}
	return p.Model
}

// DefaultContextTokens is a provider's context budget when a profile names
// none: what the providers' current models take, and for scripted a size
// that lets compaction be tried locally.
var DefaultContextTokens = map[string]int64{
	ProviderOpenAI:    128000,
	ProviderAnthropic: 200000,
	ProviderScripted:  32000,
}

// InputBudget is how many tokens a request of this profile may carry before
// the answer: ContextTokens less what the answer may take (max_tokens, or a
// quarter of the context up to 4096 when the profile sets no cap).
func (p Profile) InputBudget() int64 {
	reserve := int64(p.MaxTokens)
	if reserve <= 0 {
		reserve = min(4096, p.ContextTokens/4)
	}
	return max(1, p.ContextTokens-reserve)
}

// Rule is one scripted-provider rule: the first rule whose Match regexp
// matches the incoming text produces Reply, a text/template executed with
// .Text, .From, .Handle, .Role, .Conversation, .Groups (the submatches) and
// .History (the conversation before the message), and, after Tools ran,
// .Results, .Tools and .Last (the latest result).
type Rule struct {
	Match string `mapstructure:"match"`
	// OnResult, instead of Match, makes a rule that follows a tool round:
	// it matches the latest tool result (.Groups are its submatches) and
	// may call tools again, so a script can go several rounds (answer a
	// question a delegated ticket brought back, say).
	OnResult string `mapstructure:"on_result"`
	Reply    string `mapstructure:"reply"`
	// Tools, when set, are called first, in one round; Reply answers once
	// their results are in.
	Tools []RuleTool `mapstructure:"tools"`
	// Fail, when set, makes a matching message fail the model call with this
	// text instead of replying: a way to exercise retries and dead letters.
	Fail string `mapstructure:"fail"`
	// FailKind is the kind of provider failure Fail is: bad_request (the
	// default; it will never succeed, so its message is dead-lettered at
	// once), auth (fails the turn; the message is retried until its
	// delivery budget ends), or server_error / rate_limited (retried by the
	// model call's own backoff).
	FailKind string `mapstructure:"fail_kind"`
}

// RuleTool is one tool call a scripted rule makes.
type RuleTool struct {
	Name string `mapstructure:"name"`
	// Args is the arguments object; every string in it, however deep, is a
	// text/template over the reply's data. Keys keep the case they are
	// written in (viper would fold them; Load reads them from the file).
	Args map[string]any `mapstructure:"args"`
}

// Role is a charter plus the pool of profiles that runs it.
type Role struct {
	Charter string `mapstructure:"charter"`
	// Profile is the one-item form of Profiles. After load it is the pool's
	// first profile, whichever form the file used.
	Profile string `mapstructure:"profile"`
	// Profiles is the role's pool, in order of preference (ordered
	// selection) and of ties (weighted). After load it holds the pool
	// whichever form the file used: "profile: x" is [x].
	Profiles []string `mapstructure:"profiles"`
	// Selection is how a turn picks a profile of the pool:
	// crewlet.SelectionWeighted (the default) or crewlet.SelectionOrdered.
	Selection string `mapstructure:"selection"`
	// MaxRounds bounds the model calls of one thread of a turn. 1 to 256;
	// DefaultMaxRounds when the file does not say.
	MaxRounds int `mapstructure:"max_rounds"`
	// Budget caps the tokens and money of each seat of the role.
	Budget Budget `mapstructure:"budget"`
	// MCP are the tool servers each seat of the role runs or reaches.
	MCP []MCPServer `mapstructure:"mcp"`
	// Placement restricts the nodes the role's seats may run on.
	Placement Placement `mapstructure:"placement"`
	// Reflect adds, after a turn that answered, one model call asking what
	// to keep; the answer goes to the seat's diary. Off by default: it
	// costs tokens on every turn.
	Reflect bool `mapstructure:"reflect"`
	// IdleNudge, when After is set, nudges a seat of the role that waits on
	// tickets it opened and has been quiet for After
	// (docs/operations.md, "Idle nudge"). Off by default: a nudge spends
	// tokens on crewlet's own initiative.
	IdleNudge IdleNudge `mapstructure:"idle_nudge"`
	// OnBusy is what a seat of the role does with a trigger that arrives
	// while a turn runs: crewlet.OnBusyEnqueue (the default), OnBusyReject
	// or OnBusyInterrupt (docs/operations.md, "Busy policy").
	OnBusy string `mapstructure:"on_busy"`
	// Approvals are the role's approval policies: a tool call one matches
	// waits for a person's decision before it runs
	// (docs/operations.md, "Approvals").
	Approvals []ApprovalPolicy `mapstructure:"approvals"`
	// May is what the role's seats' own tools may reach (may.go).
	May May `mapstructure:"may"`
	// MaxToolCallsPerTurn bounds the tool calls one turn makes, over all
	// its rounds and threads; MaxMessagesPerTurn its send_message and
	// delegate calls. Past either a call is refused and the turn goes on.
	// 0 allows none; DefaultMaxToolCallsPerTurn and DefaultMaxMessagesPerTurn
	// when the file does not say.
	MaxToolCallsPerTurn int `mapstructure:"max_tool_calls_per_turn"`
	MaxMessagesPerTurn  int `mapstructure:"max_messages_per_turn"`
	// Sandbox is how the role's stdio MCP children are confined: in a
	// Landlock sandbox by default (sandbox.go).
	Sandbox Sandbox `mapstructure:"sandbox"`

	// oneItem says the file wrote the pool as profile; bothForms that it
	// wrote both profile and profiles. Problems are named by the key the
	// file used.
	oneItem, bothForms bool
}

// IdleNudge is a role's idle nudge: one message to a seat of the role that
// has open tickets it opened and no turn for After, at most once per quiet
// period.
type IdleNudge struct {
	// After is how long a seat is quiet before it is nudged; 0 is off.
	// 1s to 720h.
	After time.Duration `mapstructure:"after"`
}

// Pool returns the role's profiles in order: Profiles, or Profile alone
// for a Role built without Profiles.
func (r Role) Pool() []string {
	if len(r.Profiles) > 0 {
		return append([]string(nil), r.Profiles...)
	}
	if r.Profile != "" {
		return []string{r.Profile}
	}
	return nil
}

// selection is the role's selection policy with the default applied.
func (r Role) selection() string {
	if r.Selection == "" {
		return crewlet.SelectionWeighted
	}
	return r.Selection
}

// MCPServer is one MCP tool server: a command the seat's host starts (stdio)
// or a URL it connects to (streamable HTTP), exactly one of them.
type MCPServer struct {
	// Name prefixes the server's tools as the model sees them
	// ("tracker__create_issue"), hence no "__" in it and no trailing "_".
	Name    string   `mapstructure:"name"`
	Command []string `mapstructure:"command"`
	// Env is "KEY=VALUE" entries added to a command's environment.
	Env []string `mapstructure:"env"`
	// EnvFrom names variables of crewlet's own environment passed to the
	// command under the same name: how a secret (a token the server needs)
	// reaches it without being written in this file.
	EnvFrom []string `mapstructure:"env_from"`
	// RunAs is the user (name or uid) a command runs as; empty runs it as
	// crewlet's user (docs/operations.md, "What an MCP child can reach").
	RunAs string `mapstructure:"run_as"`
	URL   string `mapstructure:"url"`
	// HeadersFrom maps an HTTP header sent to a url server to the variable
	// of crewlet's environment holding its value ({authorization:
	// TRACKER_TOKEN}, the variable holding "Bearer ..."). Header names
	// arrive lowercased; HTTP does not mind.
	HeadersFrom map[string]string `mapstructure:"headers_from"`
}

// Headers is the headers a url server gets, with their values from this
// process's environment.
func (m MCPServer) Headers() map[string]string {
	if len(m.HeadersFrom) == 0 {
		return nil
	}
	out := make(map[string]string, len(m.HeadersFrom))
	for header, name := range m.HeadersFrom {
		out[header] = os.Getenv(name)
	}
	return out
}

// CommandEnv is the environment entries the server's command gets from the
// config: Env, then each EnvFrom variable with its value from this process.
func (m MCPServer) CommandEnv() []string {
	env := append([]string(nil), m.Env...)
	for _, name := range m.EnvFrom {
		env = append(env, name+"="+os.Getenv(name))
	}
	return env
}

// Placement pins a role to the nodes whose labels include all of Labels (a
// node started with `crewlet worker --labels tools=git`). No labels: any node.
type Placement struct {
	// Labels keys arrive lowercased (viper folds map keys); values are kept
	// as written. Both match LabelPattern.
	Labels map[string]string `mapstructure:"labels"`
}

// Seat is one position in the org chart.
type Seat struct {
	Handle string `mapstructure:"handle"`
	// Role is required for an agent seat; a human seat may name one.
	Role string `mapstructure:"role"`
	// Kind is "agent" (the default) or "human".
	Kind string `mapstructure:"kind"`
	// Spawned marks a seat spawned at run time from its role's pool, which
	// no file names; it is no key of the file.
	Spawned bool `mapstructure:"-"`
}
