package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron"

	"github.com/crewlet/crewlet"
)

// Schedule is one org schedule (docs/architecture.md, "Schedules"): a
// message sent to a seat on a clock, run by its own Temporal Schedule.
type Schedule struct {
	// Name is the schedule's key: its Temporal Schedule's id and the
	// identity its fires are deduplicated under.
	Name string `mapstructure:"name"`
	// Cron is a five-field cron expression ("0 9 * * 1-5") or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly); Every is a fixed
	// interval instead. Exactly one of them.
	Cron  string        `mapstructure:"cron"`
	Every time.Duration `mapstructure:"every"`
	// Timezone is the IANA zone the cron runs on; empty: the company's.
	Timezone string `mapstructure:"timezone"`
	// To is a seat handle or "role:NAME" (one agent seat of the role, the
	// one serving the fewest open tickets at the fire).
	To string `mapstructure:"to"`
	// Text is the message each fire sends.
	Text string `mapstructure:"text"`
	// Jitter delays each fire by a random amount up to it, so schedules on
	// one minute do not all fire at its first second.
	Jitter time.Duration `mapstructure:"jitter"`
	// Overlap is what a fire does while the previous fire's message is
	// still being handled: skip (the default), buffer_one or allow.
	Overlap string `mapstructure:"overlap"`
	// CatchupWindow is how late a missed fire (a Temporal outage) may still
	// run; at most maintenance.ledger_retention, which dedupes fires.
	CatchupWindow time.Duration `mapstructure:"catchup_window"`
	// Paused keeps the schedule from firing.
	Paused bool `mapstructure:"paused"`
}

// The overlap policies of a schedule.
const (
	OverlapSkip      = "skip"
	OverlapBufferOne = "buffer_one"
	OverlapAllow     = "allow"
)

// SpawnPrefix marks a target naming a role to spawn a seat of, from the
// role's pool (pools:).
const SpawnPrefix = "spawn:"

// DefaultCatchupWindow is a schedule's catchup_window when the file does
// not say.
const DefaultCatchupWindow = time.Hour

// Bounds of a schedule's keys.
const (
	minScheduleEvery = time.Second
	maxScheduleEvery = 8760 * time.Hour
	maxScheduleJit   = time.Hour
	// Temporal refuses a catch-up window under 10s.
	minCatchupWindow = 10 * time.Second
)

// ShortDuration writes d as the org file would: "1h", "90s", "1h30m".
func ShortDuration(d time.Duration) string { return shortDuration(d) }

// ScheduleNamed returns the org's schedule with the given name.
func (c *Config) ScheduleNamed(name string) (Schedule, bool) {
	for _, s := range c.Schedules {
		if s.Name == name {
			return s, true
		}
	}
	return Schedule{}, false
}

// ScheduleZone is the time zone the schedule runs on: its own or the company's.
func (c *Config) ScheduleZone(s Schedule) string {
	if s.Timezone != "" {
		return s.Timezone
	}
	return c.Company.Timezone
}

// scheduleDefaults fills in the defaults of a schedule entry's keys, which
// SetDefault cannot reach inside a list. raw is the entry as read.
func scheduleDefaults(raw map[string]any, c *Config) {
	entries, _ := raw["schedules"].([]any)
	for i := range c.Schedules {
		s := &c.Schedules[i]
		var entry map[string]any
		if i < len(entries) {
			entry, _ = entries[i].(map[string]any)
		}
		if _, ok := entry["overlap"]; !ok {
			s.Overlap = OverlapSkip
		}
		if _, ok := entry["catchup_window"]; !ok {
			s.CatchupWindow = DefaultCatchupWindow
		}
	}
}

// checkSchedules checks the org's schedules: a unique name, exactly one of
// a valid cron and an interval, a zone, a target the org has, a text, and
// bounds that Temporal and the completion ledger can keep.
func checkSchedules(add addFunc, c *Config, roles []string) {
	first := map[string]int{}
	for i, s := range c.Schedules {
		base := fmt.Sprintf("schedules[%d]", i)
		switch {
		case s.Name == "":
			add(base+".name", "required; names must be %s", crewlet.NamePattern)
		case !crewlet.ValidName(s.Name):
			add(base+".name", "invalid name %q; names must be %s", s.Name, crewlet.NamePattern)
		default:
			if j, dup := first[s.Name]; dup {
				add(base+".name", "duplicate name %q (also schedules[%d])", s.Name, j)
			} else {
				first[s.Name] = i
			}
		}
		switch {
		case s.Cron == "" && s.Every == 0:
			add(base, `needs cron ("0 9 * * 1-5") or every ("1h"); set exactly one`)
		case s.Cron != "" && s.Every != 0:
			add(base, "has both cron and every; set exactly one")
		case s.Cron != "":
			checkCron(add, base+".cron", s.Cron)
		case s.Every < minScheduleEvery || s.Every > maxScheduleEvery:
			add(base+".every", "%s is out of range; must be between %s and %s", shortDuration(s.Every), shortDuration(minScheduleEvery), shortDuration(maxScheduleEvery))
		}
		switch tz := s.Timezone; tz {
		case "":
		case "Local":
			add(base+".timezone", `"Local" differs from host to host; name the zone, e.g. "Europe/Berlin", or leave it out for the company's`)
		default:
			if _, err := time.LoadLocation(tz); err != nil {
				add(base+".timezone", "unknown time zone %q", tz)
			}
		}
		checkScheduleTarget(add, base+".to", s.To, c, roles)
		switch {
		case strings.TrimSpace(s.Text) == "":
			add(base+".text", "required; the message each fire sends")
		default:
			if err := crewlet.CheckText("text", s.Text, crewlet.MaxMessageBytes); err != nil {
				add(base+".text", "%s", crewlet.ErrorMessage(err))
			}
		}
		switch {
		case s.Jitter < 0 || s.Jitter > maxScheduleJit:
			add(base+".jitter", "%s is out of range; must be between 0 and %s", shortDuration(s.Jitter), shortDuration(maxScheduleJit))
		case s.Every > 0 && s.Jitter >= s.Every:
			add(base+".jitter", "%s is not shorter than every (%s); fires would run into each other", shortDuration(s.Jitter), shortDuration(s.Every))
		}
		if o := s.Overlap; o != OverlapSkip && o != OverlapBufferOne && o != OverlapAllow {
			add(base+".overlap", "unknown policy %q; must be one of: %s, %s, %s", o, OverlapSkip, OverlapBufferOne, OverlapAllow)
		}
		retention := c.Maintenance.LedgerRetention
		switch w := s.CatchupWindow; {
		case w < minCatchupWindow:
			add(base+".catchup_window", "%s is out of range; must be at least %s", shortDuration(w), shortDuration(minCatchupWindow))
		case retention > 0 && w > retention:
			add(base+".catchup_window", "%s is longer than maintenance.ledger_retention (%s); a fire caught up after its ledger row is gone could be answered twice",
				shortDuration(w), shortDuration(retention))
		}
	}
}

// checkCron parses a cron expression as Temporal would take it from the
// schedule's spec; a zone goes in timezone, not in the expression.
func checkCron(add addFunc, at, expr string) {
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		add(at, "%q names a zone; put it in timezone and leave the expression plain", expr)
		return
	}
	if _, err := cron.ParseStandard(expr); err != nil {
		add(at, "invalid cron %q: %v; want five fields (minute hour day-of-month month day-of-week), e.g. \"0 9 * * 1-5\", or @hourly, @daily, @weekly, @monthly", expr, err)
	}
}

// checkScheduleTarget checks to: a seat of the org (an agent seat answers
// it; a human seat finds it in their inbox, a reminder), role:NAME with
// an agent seat to route to, or spawn:ROLE of a role with a pool.
func checkScheduleTarget(add addFunc, at, to string, c *Config, roles []string) {
	if to == "" {
		add(at, "required; a seat handle or role:NAME")
		return
	}
	if role, ok := strings.CutPrefix(to, SpawnPrefix); ok {
		if _, pooled := c.PoolOf(role); !pooled {
			add(at, "%q: role %q has no pool to spawn seats from; add pools: [{role: %s, max_seats: N}], or name a seat or role:%s", to, role, role, role)
		}
		return
	}
	if role, ok := strings.CutPrefix(to, crewlet.RolePrefix); ok {
		switch {
		case !contains(roles, role):
			add(at, "unknown role %q; known roles: %s%s", role, list(roles), didYouMean(role, roles))
		default:
			for _, s := range c.Seats {
				if s.Role == role && s.kind() == string(crewlet.SeatAgent) {
					return
				}
			}
			add(at, "role %q has no agent seat to route a fire to; add one or name a seat", role)
		}
		return
	}
	if _, ok := c.Seat(to); !ok {
		handles := c.Handles()
		add(at, "unknown seat %q; name a seat of the org or role:NAME%s", to, didYouMean(to, handles))
	}
}
