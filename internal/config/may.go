package config

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/crewlet/crewlet"
)

// May is what a role's seats' own tools may reach: a prompt-injected seat
// can do no more than its role grants
// (docs/operations.md, "Authentication and authority"). A list the file leaves out (nil) has its default:
// message and delegate anyone in the org, spawn nothing, call every tool.
// A list written empty grants nothing.
type May struct {
	// Message and Delegate name whom send_message may send to and delegate
	// may open a ticket for: a seat's handle, role:R (any seat of role R),
	// human (any human seat) or * (any seat of the org).
	Message  []string `mapstructure:"message"`
	Delegate []string `mapstructure:"delegate"`
	// Spawn names the roles (or *) whose pool delegate's spawn:ROLE may
	// spawn a seat from.
	Spawn []string `mapstructure:"spawn"`
	// Tools are path.Match globs over the tool names a seat may call
	// (send_message, github__create_issue); a tool none matches is not
	// offered to the model, and a call of it is refused.
	Tools []string `mapstructure:"tools"`
}

// Words of a may list.
const (
	// MayAnyone is any seat of the org (message, delegate), any role
	// (spawn), or any tool (tools).
	MayAnyone = "*"
	// MayHuman is any human seat.
	MayHuman = "human"
)

// defaultMay is what a role whose file leaves a may list out gets.
var defaultMay = May{Message: []string{MayAnyone}, Delegate: []string{MayAnyone}, Spawn: []string{}, Tools: []string{MayAnyone}}

// Defaults and bounds of a role's per-turn caps and of tickets.max_hops.
const (
	DefaultMaxToolCallsPerTurn = 64
	DefaultMaxMessagesPerTurn  = 16
	maxToolCallsPerTurn        = 10000
	maxMessagesPerTurn         = 1000
	DefaultMaxHops             = 4
	maxMaxHops                 = 32
)

// may is the role's may with each list the file left out at its default.
func (r Role) may() May {
	m := r.May
	for _, l := range []struct{ got, def *[]string }{
		{&m.Message, &defaultMay.Message}, {&m.Delegate, &defaultMay.Delegate},
		{&m.Spawn, &defaultMay.Spawn}, {&m.Tools, &defaultMay.Tools},
	} {
		if *l.got == nil {
			*l.got = *l.def
		}
	}
	return m
}

// governed returns the agent seat whose tools a may applies to, and its
// role; ok is false for anyone else (a person, the operator, a schedule),
// whom the API's rights govern instead.
func (c *Config) governed(from string) (Seat, Role, bool) {
	seat, ok := c.AgentSeat(from)
	if !ok {
		return Seat{}, Role{}, false
	}
	role, ok := c.Roles[seat.Role]
	return seat, role, ok
}

// reaches reports whether a may entry names seat to.
func reaches(entry string, to Seat) bool {
	switch {
	case entry == MayAnyone:
		return true
	case entry == MayHuman:
		return to.kind() == string(crewlet.SeatHuman)
	}
	if role, ok := strings.CutPrefix(entry, crewlet.RolePrefix); ok {
		return to.Role == role
	}
	return entry == to.Handle
}

// unknownSeat refuses a tool call of a seat the org this process runs does
// not name (a process behind the active revision, a seat being removed):
// with no role to read its authority from, it may do nothing, rather than
// everything.
func unknownSeat(handle string) error {
	return forbidden("seat %s is not an agent seat of the org this process runs, so no role says what it may do: it may call no tool until this process has the org that names it (an operator can see each process's revision with crewlet config show)", handle)
}

// forbidden is a refusal of a seat's tool call; its text reaches the
// model, so it says what the role may do and who can change it.
func forbidden(format string, args ...any) error {
	return crewlet.Errorf(crewlet.EFORBIDDEN, format, args...)
}

func grantList(entries []string) string {
	if len(entries) == 0 {
		return "no one"
	}
	return "only " + strings.Join(entries, ", ")
}

// MayMessage says whether seat from's send_message may send to seat to:
// nil, or an EFORBIDDEN error saying why not. A seat the org does not name
// may not; a target it does not name is the send's own error to report.
func (c *Config) MayMessage(from, to string) error {
	seat, role, ok := c.governed(from)
	if !ok {
		return unknownSeat(from)
	}
	target, known := c.Seat(to)
	if !known {
		return nil
	}
	allowed := role.may().Message
	if slices.ContainsFunc(allowed, func(e string) bool { return reaches(e, target) }) {
		return nil
	}
	return forbidden("role %s may message %s; ask an operator to widen roles.%s.may.message", seat.Role, grantList(allowed), seat.Role)
}

// MayDelegate says whether seat from's delegate may open a ticket for seat
// to, the ticket's chain being chain (the seats that delegated it so far,
// from among them): a seat already on the chain is never delegated to
// again, whoever delegates, so a ticket cannot loop.
func (c *Config) MayDelegate(from, to string, chain []string) error {
	if slices.Contains(chain, to) {
		return forbidden("%s is already on this ticket's delegation chain (%s): delegating back to it would make a loop; do the work yourself, or answer with what you have",
			to, strings.Join(chain, " → "))
	}
	seat, role, ok := c.governed(from)
	target, known := c.Seat(to)
	if !ok || !known {
		return nil
	}
	allowed := role.may().Delegate
	if slices.ContainsFunc(allowed, func(e string) bool { return reaches(e, target) }) {
		return nil
	}
	return forbidden("role %s may delegate to %s; ask an operator to widen roles.%s.may.delegate", seat.Role, grantList(allowed), seat.Role)
}

// MayDelegateRemote says whether seat from's delegate may open a ticket
// for the remote agent a2a:NAME: only when its role's may.delegate names
// a2a:NAME itself (* is any seat of the org, not an agent outside it).
func (c *Config) MayDelegateRemote(from, to string) error {
	seat, role, ok := c.governed(from)
	if !ok {
		return unknownSeat(from)
	}
	if slices.Contains(role.may().Delegate, to) {
		return nil
	}
	return forbidden("role %s may not delegate to the remote agent %s; ask an operator to add %s to roles.%s.may.delegate", seat.Role, to, to, seat.Role)
}

// MaySpawn says whether seat from's delegate to spawn:ROLE may spawn a
// seat from role's pool.
func (c *Config) MaySpawn(from, role string) error {
	seat, r, ok := c.governed(from)
	if !ok {
		return nil
	}
	allowed := r.may().Spawn
	if slices.Contains(allowed, MayAnyone) || slices.Contains(allowed, role) {
		return nil
	}
	what := "no role's pool"
	if len(allowed) > 0 {
		what = "only into the pools of " + strings.Join(allowed, ", ")
	}
	return forbidden("role %s may spawn %s; ask an operator to add %s to roles.%s.may.spawn", seat.Role, what, role, seat.Role)
}

// MayCall says whether seat from may call the tool named tool; a seat
// the org does not name may call none.
func (c *Config) MayCall(from, tool string) error {
	seat, role, ok := c.governed(from)
	if !ok {
		return unknownSeat(from)
	}
	globs := role.may().Tools
	for _, g := range globs {
		if ok, _ := path.Match(g, tool); ok {
			return nil
		}
	}
	what := "no tool"
	if len(globs) > 0 {
		what = "only tools matching " + strings.Join(globs, ", ")
	}
	return forbidden("role %s may call %s; ask an operator to widen roles.%s.may.tools", seat.Role, what, seat.Role)
}

// CheckHops says whether a ticket may be hop hops of a delegation chain
// (the seats that delegated it, its delegator last): no more than
// tickets.max_hops.
func (c *Config) CheckHops(hops int, chain []string) error {
	limit := c.Tickets.MaxHops
	if limit <= 0 {
		limit = DefaultMaxHops // a config built without a file
	}
	if hops > limit {
		return forbidden("this would be delegation hop %d (%s), past tickets.max_hops (%d): do the work yourself, or answer with what you have",
			hops, strings.Join(chain, " → "), limit)
	}
	return nil
}

// TurnCaps says whether one more tool call may be made by a turn of seat
// from that has made calls tool calls, messages of them send_message or
// delegate calls; message says the new call is one of those. A refused
// call is not made; the turn goes on and the model can answer.
func (c *Config) TurnCaps(from string, message bool, calls, messages int) error {
	seat, role, ok := c.governed(from)
	if !ok {
		return unknownSeat(from)
	}
	if limit := role.MaxToolCallsPerTurn; calls >= limit {
		return forbidden("this turn has made its %d tool calls (roles.%s.max_tool_calls_per_turn): no more in this turn; answer with what you have",
			limit, seat.Role)
	}
	if limit := role.MaxMessagesPerTurn; message && messages >= limit {
		return forbidden("this turn has sent its %d messages and delegations (roles.%s.max_messages_per_turn): no more in this turn; answer with what you have",
			limit, seat.Role)
	}
	return nil
}

// mayDefaults marks the may lists a role's file wrote, even empty, so that
// a list written empty grants nothing instead of taking its default, and
// fills in the per-turn caps the file left out.
func mayDefaults(raw map[string]any, name string, r *Role) {
	for key, l := range map[string]*[]string{"message": &r.May.Message, "delegate": &r.May.Delegate, "spawn": &r.May.Spawn, "tools": &r.May.Tools} {
		if *l == nil && hasKey(raw, "roles", name, "may", key) {
			*l = []string{}
		}
	}
	if !hasKey(raw, "roles", name, "max_tool_calls_per_turn") {
		r.MaxToolCallsPerTurn = DefaultMaxToolCallsPerTurn
	}
	if !hasKey(raw, "roles", name, "max_messages_per_turn") {
		r.MaxMessagesPerTurn = DefaultMaxMessagesPerTurn
	}
}

// checkAuthority adds the problems of tickets.max_hops and of each role's
// may and per-turn caps.
func checkAuthority(add func(key, format string, args ...any), c *Config) {
	if n := c.Tickets.MaxHops; n < 1 || n > maxMaxHops {
		add("tickets.max_hops", "%d is out of range; must be between 1 and %d", n, maxMaxHops)
	}
	roles := sortedKeys(c.Roles)
	for _, name := range roles {
		r, base := c.Roles[name], "roles."+name
		if n := r.MaxToolCallsPerTurn; n < 0 || n > maxToolCallsPerTurn {
			add(base+".max_tool_calls_per_turn", "%d is out of range; must be between 0 (none) and %d", n, maxToolCallsPerTurn)
		}
		if n := r.MaxMessagesPerTurn; n < 0 || n > maxMessagesPerTurn {
			add(base+".max_messages_per_turn", "%d is out of range; must be between 0 (none) and %d", n, maxMessagesPerTurn)
		}
		checkReach(add, base+".may.message", c, roles, r.May.Message, false)
		checkReach(add, base+".may.delegate", c, roles, r.May.Delegate, true)
		for i, s := range r.May.Spawn {
			if s != MayAnyone && !slices.Contains(roles, s) {
				add(fmt.Sprintf("%s.may.spawn[%d]", base, i), "unknown role %q; name a role (%s) or *%s", s, list(roles), didYouMean(s, roles))
			}
		}
		for i, g := range r.May.Tools {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				add(fmt.Sprintf("%s.may.tools[%d]", base, i), "bad glob %q; use * ? and [...] as in Go's path.Match (\"github__*\", \"send_message\")", g)
			}
		}
	}
}

// checkReach adds the problems of a message or delegate list; remote
// says the list may name a remote agent (a2a:NAME), as delegate's may.
func checkReach(add func(key, format string, args ...any), key string, c *Config, roles []string, entries []string, remote bool) {
	var handles []string
	for _, s := range c.Seats {
		handles = append(handles, s.Handle)
	}
	slices.Sort(handles)
	for i, e := range entries {
		k := fmt.Sprintf("%s[%d]", key, i)
		if role, ok := strings.CutPrefix(e, crewlet.RolePrefix); ok {
			if !slices.Contains(roles, role) {
				add(k, "unknown role %q in %q; known roles: %s%s", role, e, list(roles), didYouMean(role, roles))
			}
			continue
		}
		if name, ok := strings.CutPrefix(e, A2APrefix); ok {
			switch _, _, known := c.RemoteAgent(e); {
			case !remote:
				add(k, "%q is a remote agent: only may.delegate may name one, since only delegate reaches it", e)
			case !known:
				add(k, "unknown remote agent %q in %q; name one of agents (%s)%s", name, e, list(c.AgentNames()), didYouMean(name, c.AgentNames()))
			}
			continue
		}
		switch _, isSeat := c.Seat(e); {
		case e == MayHuman && isSeat:
			add(k, "%q is both a seat and the word for any human seat; rename the seat", e)
		case e == MayAnyone || e == MayHuman || isSeat:
		default:
			add(k, "unknown seat %q; name a seat (%s), role:R, %s or %s%s", e, list(handles), MayHuman, MayAnyone, didYouMean(e, handles))
		}
	}
}
