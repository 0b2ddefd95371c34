package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// Defaults and bounds of an approval policy (docs/operations.md, "Approvals").
const (
	// DefaultApprovalTimeout is how long a call waits for a decision when
	// its policy names no timeout.
	DefaultApprovalTimeout = 24 * time.Hour
	minApprovalTimeout     = time.Second
	maxApprovalTimeout     = 720 * time.Hour
	// ApprovalRolePrefix marks an approver that is an org role: any person
	// whose seat has that role may decide.
	ApprovalRolePrefix = "role:"
)

// What a policy does when its time runs out with no decision.
const (
	OnTimeoutDeny    = "deny"
	OnTimeoutApprove = "approve"
)

// ApprovalPolicy gates a role's tool calls on a person's decision: a call
// to a tool matching Tools whose arguments match When waits until one of
// Approvers decides it, or Timeout passes and OnTimeout applies.
type ApprovalPolicy struct {
	// Tools are path.Match globs over the tool's name as the model calls
	// it ("tracker__*", "github__create_pull_request").
	Tools []string `mapstructure:"tools"`
	// When narrows the policy by the call's arguments: each key is a
	// top-level argument name (matched whatever its case), each value a
	// glob its value must match.
	// A string argument is matched as it is, any other as its JSON
	// ("true", "3"); a missing argument never matches. Empty matches
	// every call.
	When map[string]string `mapstructure:"when"`
	// Approvers say who may decide: a human seat's handle, role:R (a
	// person whose seat has org role R) or a token role (viewer, operator,
	// admin: any token of that role).
	Approvers []string `mapstructure:"approvers"`
	// Timeout is how long the call waits; DefaultApprovalTimeout when 0.
	Timeout time.Duration `mapstructure:"timeout"`
	// OnTimeout is deny (the default) or approve.
	OnTimeout string `mapstructure:"on_timeout"`
}

// Wait is how long a call waits for a decision.
func (p ApprovalPolicy) Wait() time.Duration {
	if p.Timeout == 0 {
		return DefaultApprovalTimeout
	}
	return p.Timeout
}

// TimeoutDecision is what applies when no decision came in time.
func (p ApprovalPolicy) TimeoutDecision() string {
	if p.OnTimeout == "" {
		return OnTimeoutDeny
	}
	return p.OnTimeout
}

// Matches reports whether the policy gates a call of tool with args, the
// call's arguments as the model sent them (a JSON object). The model is
// not to be trusted to phrase a call the policy recognises, so matching
// fails closed: arguments that are not one JSON object, or that name a
// when key twice in different cases, are gated; a when glob's * matches
// across "/" and case is ignored in names and values. A call that does not
// name a when key at all is not gated by that policy.
func (p ApprovalPolicy) Matches(tool string, args json.RawMessage) bool {
	named := false
	for _, g := range p.Tools {
		if ok, _ := path.Match(g, tool); ok {
			named = true
			break
		}
	}
	if !named {
		return false
	}
	if len(p.When) == 0 {
		return true
	}
	var sent map[string]json.RawMessage
	if err := json.Unmarshal(args, &sent); err != nil || sent == nil {
		return true
	}
	// The org file's keys arrive lowercased, so names match whatever
	// their case; a name sent twice in two cases could show the policy one
	// value and the tool the other.
	fields := make(map[string]json.RawMessage, len(sent))
	for name, v := range sent {
		lower := strings.ToLower(name)
		if _, twice := fields[lower]; twice {
			return true
		}
		fields[lower] = v
	}
	for name, glob := range p.When {
		raw, ok := fields[strings.ToLower(name)]
		if !ok {
			return false
		}
		value := string(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil {
			value = s
		}
		re, err := whenGlob(glob)
		if err != nil {
			return true
		}
		if !re.MatchString(value) {
			return false
		}
	}
	return true
}

// whenGlob is a when glob as a regular expression: * any text, "/"
// included, ? one character, [...] a class as in path.Match, \ quoting
// the next character; case ignored.
func whenGlob(glob string) (*regexp.Regexp, error) {
	if _, err := path.Match(glob, ""); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(`(?is)^`)
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
			}
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				return nil, path.ErrBadPattern
			}
			class := glob[i+1 : i+1+end]
			if strings.HasPrefix(class, "^") {
				class = "^" + strings.ReplaceAll(class[1:], "^", `\^`)
			}
			b.WriteString("[" + class + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}

// Digest names the policy as it stands: an approval or a remembered grant
// made under one digest does not cover a call the policy, changed since,
// gates. The role is part of it, so two roles' equal policies differ.
func (p ApprovalPolicy) Digest(role string) string {
	when := make([]string, 0, len(p.When))
	for k, v := range p.When {
		when = append(when, k+"="+v)
	}
	sort.Strings(when)
	doc, _ := json.Marshal([]any{role, p.Tools, when, p.Approvers, p.Wait().String(), p.TimeoutDecision()})
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:8])
}

// ApprovalFor returns the first of the seat's role's policies that gates a
// call of tool with args.
func (c *Config) ApprovalFor(handle, tool string, args json.RawMessage) (ApprovalPolicy, string, bool) {
	seat, ok := c.AgentSeat(handle)
	if !ok {
		return ApprovalPolicy{}, "", false
	}
	for _, p := range c.Roles[seat.Role].Approvals {
		if p.Matches(tool, args) {
			return p, seat.Role, true
		}
	}
	return ApprovalPolicy{}, "", false
}

// ApproverSeats lists the human seats an approvers list names, directly or
// by role, in file order: the people whose inbox hears of a new approval.
func (c *Config) ApproverSeats(approvers []string) []string {
	var out []string
	for _, s := range c.Seats {
		if s.kind() != string(crewlet.SeatHuman) {
			continue
		}
		for _, a := range approvers {
			if a == s.Handle || (s.Role != "" && a == ApprovalRolePrefix+s.Role) {
				out = append(out, s.Handle)
				break
			}
		}
	}
	return out
}

// checkApprovals adds the problems of a role's approval policies.
func checkApprovals(add func(key, format string, args ...any), base string, c *Config, policies []ApprovalPolicy) {
	tokenRoles := []string{RoleViewer, RoleOperator, RoleAdmin}
	for i, p := range policies {
		pb := fmt.Sprintf("%s[%d]", base, i)
		if len(p.Tools) == 0 {
			add(pb+".tools", "required: name the tools the policy gates, as globs (\"tracker__*\")")
		}
		for j, g := range p.Tools {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				add(fmt.Sprintf("%s.tools[%d]", pb, j), "bad glob %q; use * ? and [...] as in Go's path.Match", g)
			}
		}
		for _, k := range sortedKeys(p.When) {
			if _, err := whenGlob(p.When[k]); err != nil {
				add(pb+".when."+k, "bad glob %q; use * (any text, / included) ? and [...]; case is ignored", p.When[k])
			}
		}
		if len(p.Approvers) == 0 {
			add(pb+".approvers", "required: name who may decide (a human seat, role:R, or a token role: %s)", strings.Join(tokenRoles, ", "))
		}
		for j, a := range p.Approvers {
			key := fmt.Sprintf("%s.approvers[%d]", pb, j)
			if role, ok := strings.CutPrefix(a, ApprovalRolePrefix); ok {
				if _, known := c.Roles[role]; !known {
					add(key, "unknown role %q; known roles: %s%s", role, list(sortedKeys(c.Roles)), didYouMean(role, sortedKeys(c.Roles)))
				}
				continue
			}
			seat, isSeat := c.Seat(a)
			isTokenRole := contains(tokenRoles, a)
			switch {
			case isSeat && isTokenRole:
				add(key, "%q is both a seat and a token role; rename the seat", a)
			case isTokenRole:
			case !isSeat:
				add(key, "unknown approver %q; name a human seat, role:R or a token role (%s)", a, strings.Join(tokenRoles, ", "))
			case seat.kind() != string(crewlet.SeatHuman):
				add(key, "%q is an agent seat; an approver is a person: name a human seat", a)
			}
		}
		if t := p.Timeout; t != 0 && (t < minApprovalTimeout || t > maxApprovalTimeout) {
			add(pb+".timeout", "%s is out of range; must be between %s and %s, or left out for %s",
				shortDuration(t), shortDuration(minApprovalTimeout), shortDuration(maxApprovalTimeout), shortDuration(DefaultApprovalTimeout))
		}
		switch p.OnTimeout {
		case "", OnTimeoutDeny, OnTimeoutApprove:
		default:
			add(pb+".on_timeout", "%q is not a timeout decision; use %s or %s", p.OnTimeout, OnTimeoutDeny, OnTimeoutApprove)
		}
	}
}
