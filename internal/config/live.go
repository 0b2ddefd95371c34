package config

import "sync/atomic"

// Source gives the org as it stands now. A service asks it once per
// operation and uses that one *Config throughout, so an operation never
// mixes two revisions. A *Config is a Source that never changes (a test, a
// one-shot command); a *Live follows the company's active config revision.
type Source interface {
	Now() *Config
}

// Now returns c: a config read once is its own unchanging source.
func (c *Config) Now() *Config { return c }

// Live is the org a running process follows: the active config revision as
// this process took it (docs/architecture.md, "Config revisions"). It is
// safe for concurrent use; Set swaps the whole config at once.
type Live struct {
	cur atomic.Pointer[Revision]
}

// Revision is one config revision as a process runs it.
type Revision struct {
	// Number is the revision's number in the store; 0 for a config that
	// never was one.
	Number int64
	// Org is the config the process runs: the revision's document parsed
	// with this process's environment, with the settings a process reads
	// only at start (ColdKeys) kept from its start.
	Org *Config
	// NeedsRestart lists the cold keys whose change this process runs
	// without: it needs a restart to take them.
	NeedsRestart []string
}

// NewLive returns a Live running rev.
func NewLive(rev Revision) *Live {
	l := &Live{}
	l.cur.Store(&rev)
	return l
}

// Now returns the config the process runs now.
func (l *Live) Now() *Config { return l.cur.Load().Org }

// Current returns the revision the process runs now.
func (l *Live) Current() Revision { return *l.cur.Load() }

// Set makes rev the revision the process runs.
func (l *Live) Set(rev Revision) { l.cur.Store(&rev) }
