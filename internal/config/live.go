package config

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

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

	catchUpMu   sync.Mutex
	catchUp     func(context.Context) error
	lastCatchUp time.Time
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
	// Spawned is the version of the spawned seats Org holds
	// (store.SpawnedVersion).
	Spawned int64
}

// NewLive returns a Live running rev. catchUp takes the active revision
// now (the process's follower, revisions.NewFollower); nil never catches up.
func NewLive(rev Revision, catchUp func(context.Context) error) *Live {
	l := &Live{catchUp: catchUp}
	l.cur.Store(&rev)
	return l
}

// Now returns the config the process runs now.
func (l *Live) Now() *Config { return l.cur.Load().Org }

// Current returns the revision the process runs now.
func (l *Live) Current() Revision { return *l.cur.Load() }

// Set makes rev the revision the process runs.
func (l *Live) Set(rev Revision) { l.cur.Store(&rev) }

// catchUpEvery bounds how often lookups that miss make a Live catch up: a
// stream of requests naming no seat costs at most one store read per
// interval.
const catchUpEvery = 200 * time.Millisecond

// CatchUp takes the active revision now, if it is newer than the one the
// process runs; it does nothing when it did so within catchUpEvery.
func (l *Live) CatchUp(ctx context.Context) error {
	l.catchUpMu.Lock()
	defer l.catchUpMu.Unlock()
	if l.catchUp == nil || time.Since(l.lastCatchUp) < catchUpEvery {
		return nil
	}
	l.lastCatchUp = time.Now()
	return l.catchUp(ctx)
}

// CatchUpNow takes the active revision and spawned seats now, whenever it
// last did: for the process that just changed them.
func (l *Live) CatchUpNow(ctx context.Context) error {
	l.catchUpMu.Lock()
	defer l.catchUpMu.Unlock()
	if l.catchUp == nil {
		return nil
	}
	l.lastCatchUp = time.Now()
	return l.catchUp(ctx)
}

// Known returns what find finds in src's org, and the org it looked in.
// When it finds nothing and src is a Live, it catches up with the active
// revision once and looks again: a seat or role added by a revision this
// process has not taken yet is not absent, only not known yet.
func Known[T any](ctx context.Context, src Source, find func(*Config) (T, bool)) (T, *Config, bool) {
	org := src.Now()
	if v, ok := find(org); ok {
		return v, org, true
	}
	live, ok := src.(*Live)
	if !ok || live.CatchUp(ctx) != nil {
		var zero T
		return zero, org, false
	}
	org = live.Now()
	v, ok := find(org)
	return v, org, ok
}
