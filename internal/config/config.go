// Package config loads and validates the crewlet org file. It is the only
// package besides cmd/ that uses viper.
package config

import "time"

// Config is the whole org file: the company, where its services are, and its
// roles, seats and model profiles.
type Config struct {
	Company     Company            `mapstructure:"company"`
	Temporal    Temporal           `mapstructure:"temporal"`
	Postgres    Store              `mapstructure:"postgres"`
	Redis       Store              `mapstructure:"redis"`
	API         API                `mapstructure:"api"`
	Mailbox     Mailbox            `mapstructure:"mailbox"`
	Nodes       Nodes              `mapstructure:"nodes"`
	Maintenance Maintenance        `mapstructure:"maintenance"`
	Profiles    map[string]Profile `mapstructure:"profiles"`
	Roles       map[string]Role    `mapstructure:"roles"`
	Seats       []Seat             `mapstructure:"seats"`
}

// Company names the company.
type Company struct {
	Name     string `mapstructure:"name"`
	Timezone string `mapstructure:"timezone"`
}

// Temporal says where the Temporal frontend is.
type Temporal struct {
	Address   string `mapstructure:"address"`
	Namespace string `mapstructure:"namespace"`
	TaskQueue string `mapstructure:"task_queue"`
}

// Store names the environment variable holding a connection URL. URLs carry
// passwords, so the file never holds them.
type Store struct {
	URLEnv string `mapstructure:"url_env"`
}

// API is the REST listener.
type API struct {
	Listen string `mapstructure:"listen"`
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
}

// Nodes times the fleet of worker nodes that host seats (DESIGN §4).
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
}

// Maintenance times the maintenance duty: mailbox retirement and trimming,
// and completion-ledger cleanup.
type Maintenance struct {
	// Interval is the cadence of the maintenance duty (a Temporal Schedule).
	// 1s to 24h.
	Interval time.Duration `mapstructure:"interval"`
	// LedgerRetention is how long completion-ledger rows are kept; older rows
	// are deleted. It must outlive any redelivery window: a message redelivered
	// after its ledger row is gone would be handled twice. 1h to 8760h.
	LedgerRetention time.Duration `mapstructure:"ledger_retention"`
}

// Profile is a model backend.
type Profile struct {
	Provider string `mapstructure:"provider"`
	// Rules and Delay configure the scripted provider.
	Rules []Rule `mapstructure:"rules"`
	// Delay is written with a unit ("2s"); a bare number other than 0 is refused.
	Delay time.Duration `mapstructure:"delay"`
}

// Rule is one scripted-provider rule: the first rule whose Match regexp
// matches the incoming text produces Reply, a text/template executed with
// .Text, .From, .Handle, .Role, .Conversation and .Groups (the submatches).
type Rule struct {
	Match string `mapstructure:"match"`
	Reply string `mapstructure:"reply"`
	// Fail, when set, makes a matching message fail the model call with this
	// text instead of replying: a way to exercise retries and dead letters.
	Fail string `mapstructure:"fail"`
}

// Role is a charter plus the profile that runs it.
type Role struct {
	Charter string `mapstructure:"charter"`
	Profile string `mapstructure:"profile"`
	// Placement restricts the nodes the role's seats may run on.
	Placement Placement `mapstructure:"placement"`
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
}
