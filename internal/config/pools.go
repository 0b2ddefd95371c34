package config

import (
	"fmt"
	"time"
)

// SpawnPool lets a role's seats be spawned at run time
// (docs/architecture.md, "Spawned seats"): `delegate` or POST /seats/spawn
// naming spawn:ROLE creates an ephemeral seat ROLE-xxxxxxxxxxxx, up to MaxSeats of
// them company-wide, reaped once idle for IdleReapAfter with nothing open.
type SpawnPool struct {
	Role string `mapstructure:"role"`
	// MaxSeats is the most spawned seats of the role alive at once. 1 to
	// 1000.
	MaxSeats int `mapstructure:"max_seats"`
	// IdleReapAfter is how long a spawned seat may sit idle with nothing
	// open (no ticket it serves or opened, no mail waiting) before it is
	// reaped. 1s to 720h; 1h when the file does not say.
	IdleReapAfter time.Duration `mapstructure:"idle_reap_after"`
}

// DefaultIdleReapAfter is a pool's idle_reap_after when the file does not
// say.
const DefaultIdleReapAfter = time.Hour

// SpawnSuffixBytes is the random part of a spawned seat's name
// (ROLE-xxxxxxxxxxxx): names are never reused, so 48 bits keep a role from
// running out of them over any life a company has.
const SpawnSuffixBytes = 6

// maxPoolRoleName is the longest role name a pool may have: its spawned
// seats' names, the role's and the suffix's, must be names too.
const maxPoolRoleName = 63 - 1 - 2*SpawnSuffixBytes

// Bounds of a pool's keys.
const (
	maxPoolSeats     = 1000
	minIdleReapAfter = time.Second
	maxIdleReapAfter = 720 * time.Hour
)

// PoolOf returns the spawn pool of a role.
func (c *Config) PoolOf(role string) (SpawnPool, bool) {
	for _, p := range c.Pools {
		if p.Role == role {
			return p, true
		}
	}
	return SpawnPool{}, false
}

// poolDefaults fills in the defaults of a pool entry's keys, which
// SetDefault cannot reach inside a list. raw is the file as read.
func poolDefaults(raw map[string]any, c *Config) {
	entries, _ := raw["pools"].([]any)
	for i := range c.Pools {
		var entry map[string]any
		if i < len(entries) {
			entry, _ = entries[i].(map[string]any)
		}
		if _, ok := entry["idle_reap_after"]; !ok {
			c.Pools[i].IdleReapAfter = DefaultIdleReapAfter
		}
	}
}

// checkPools checks the org's spawn pools: one per role, of an agent role
// with a profile, within bounds.
func checkPools(add addFunc, c *Config, roles []string) {
	seen := map[string]bool{}
	for i, p := range c.Pools {
		base := fmt.Sprintf("pools[%d]", i)
		role, known := c.Roles[p.Role]
		switch {
		case p.Role == "":
			add(base+".role", "required; known roles: %s", list(roles))
		case !known:
			add(base+".role", "unknown role %q; known roles: %s%s", p.Role, list(roles), didYouMean(p.Role, roles))
		case len(role.Pool()) == 0:
			add(base+".role", "role %q has no profile; a spawned seat runs turns, so its role needs one", p.Role)
		case seen[p.Role]:
			add(base+".role", "role %q has a pool already; one pool per role", p.Role)
		case len(p.Role) > maxPoolRoleName:
			add(base+".role", "role %q is %d characters; a pool's role has at most %d, so its spawned seats' names (ROLE-xxxxxxxxxxxx) stay within 63", p.Role, len(p.Role), maxPoolRoleName)
		}
		seen[p.Role] = true
		if p.MaxSeats < 1 || p.MaxSeats > maxPoolSeats {
			add(base+".max_seats", "%d is out of range; must be between 1 and %d", p.MaxSeats, maxPoolSeats)
		}
		if p.IdleReapAfter < minIdleReapAfter || p.IdleReapAfter > maxIdleReapAfter {
			add(base+".idle_reap_after", "%s is out of range; must be between %s and %s",
				shortDuration(p.IdleReapAfter), shortDuration(minIdleReapAfter), shortDuration(maxIdleReapAfter))
		}
	}
}
