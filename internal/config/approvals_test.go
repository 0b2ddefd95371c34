package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const approvalsBase = `company: { name: acme }
seats:
  - { handle: s01, role: clerk }
  - { handle: olga, kind: human, role: finance }
  - { handle: admin, kind: human }
profiles: { p: { provider: scripted } }
roles:
  finance: { charter: works as finance, profile: p }
  clerk:
    charter: works as clerk
    profile: p
    approvals:
`

// Every problem of an approval policy is named: a bad glob, no tools, no
// approvers, an unknown seat or role, an agent seat, a seat that is also a
// token role, a timeout out of range and an unknown on_timeout.
func TestApprovalPolicyProblems(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(approvalsBase + `      - { tools: [ 'tracker__[' ], when: { repo: 'prod-[' }, approvers: [ olga ] }
      - { approvers: [ nobody, 'role:ghost', s01, admin ], timeout: -1s, on_timeout: shrug }
      - { tools: [ x ], approvers: [], timeout: 721h }
      - { tools: [ 'ledger__*' ], approvers: [ olga, 'role:finance', operator ], timeout: 1h, on_timeout: approve }
`))
	if err == nil {
		t.Fatal("Parse accepted bad approval policies")
	}
	for _, want := range []string{
		`roles.clerk.approvals[0].tools[0]: bad glob "tracker__["`,
		`roles.clerk.approvals[0].when.repo: bad glob "prod-["`,
		`roles.clerk.approvals[1].tools: required`,
		`roles.clerk.approvals[1].approvers[0]: unknown approver "nobody"`,
		`roles.clerk.approvals[1].approvers[1]: unknown role "ghost"`,
		`roles.clerk.approvals[1].approvers[2]: "s01" is an agent seat`,
		`roles.clerk.approvals[1].approvers[3]: "admin" is both a seat and a token role`,
		`roles.clerk.approvals[1].timeout: -1s is out of range; must be between 1s and 720h, or left out for 24h`,
		`roles.clerk.approvals[1].on_timeout: "shrug" is not a timeout decision; use deny or approve`,
		`roles.clerk.approvals[2].approvers: required`,
		`roles.clerk.approvals[2].timeout: 721h is out of range`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "approvals[3]") {
		t.Errorf("a good policy was refused:\n%v", err)
	}
}

// A policy matches a call by tool glob, then by each when glob on the
// named argument (a string as it is, anything else as its JSON, names
// whatever their case); the first matching policy of the seat's role
// applies, with its defaults. Arguments that are not a JSON object are
// gated by the first policy naming the tool.
func TestApprovalPolicyMatches(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(approvalsBase + `      - { tools: [ 'ledger__*' ], when: { text: 'invoice *', Urgent: 'true' }, approvers: [ olga ] }
      - { tools: [ 'ledger__write', 'tracker__*' ], approvers: [ 'role:finance' ], timeout: 2s, on_timeout: approve }
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tool, args string
		policy     int // -1: none
	}{
		{"ledger__write", `{"text": "invoice 7", "urgent": true}`, 0},
		{"ledger__write", `{"TEXT": "invoice 7", "URGENT": true}`, 0},
		{"ledger__write", `{"text": "invoice 7"}`, 1},
		{"ledger__read", `{"text": "invoice 7", "urgent": false}`, -1},
		{"tracker__open", `{}`, 1},
		{"diary_write", `{"text": "invoice 7", "urgent": true}`, -1},
		{"ledger__write", `not json`, 0}, // fails closed: gated by the first
	} {
		p, role, ok := c.ApprovalFor("s01", tt.tool, json.RawMessage(tt.args))
		got := -1
		for i, q := range c.Roles["clerk"].Approvals {
			if ok && q.Digest(role) == p.Digest(role) {
				got = i
			}
		}
		if got != tt.policy {
			t.Errorf("%s %s: policy %d; want %d", tt.tool, tt.args, got, tt.policy)
		}
	}
	first, second := c.Roles["clerk"].Approvals[0], c.Roles["clerk"].Approvals[1]
	if first.Wait() != DefaultApprovalTimeout || first.TimeoutDecision() != OnTimeoutDeny || second.Wait() != 2*time.Second || second.TimeoutDecision() != OnTimeoutApprove {
		t.Errorf("defaults: %v %s, %v %s", first.Wait(), first.TimeoutDecision(), second.Wait(), second.TimeoutDecision())
	}
	if first.Digest("clerk") == first.Digest("other") || first.Digest("clerk") == second.Digest("clerk") {
		t.Error("digests of different policies or roles are equal")
	}
	if _, _, ok := c.ApprovalFor("olga", "ledger__write", json.RawMessage(`{}`)); ok {
		t.Error("a person's seat has approval policies")
	}
	if got := c.ApproverSeats([]string{"olga", "role:finance", "admin", "operator"}); len(got) != 2 || got[0] != "olga" || got[1] != "admin" {
		t.Errorf("ApproverSeats = %v; want olga (named and by role) and the human seat admin", got)
	}
}

// A changed policy is a hot change of the role's approvals.
func TestApprovalPoliciesAreHot(t *testing.T) {
	t.Parallel()
	base := approvalsBase + "      - { tools: [ x ], approvers: [ olga ] }\n"
	got := Diff(mustParse(t, base), mustParse(t, strings.Replace(base, "[ x ]", "[ y ]", 1)))
	if len(got) != 1 || got[0].Key != "roles.clerk.approvals" || got[0].Class != ClassHot {
		t.Fatalf("Diff = %+v; want roles.clerk.approvals, hot", got)
	}
}

// An injected model cannot phrase a gated call so that its policy's when
// misses it: a key sent in another case, or twice in two cases, a value in
// another case, a path below the glob's folder, arguments that are no JSON
// object; each is gated. A call whose values the globs do not match is not.
func TestApprovalWhenCannotBeSideStepped(t *testing.T) {
	t.Parallel()
	p := ApprovalPolicy{Tools: []string{"fs__write"}, When: map[string]string{"path": "/etc/*", "env": "prod-*"}, Approvers: []string{"olga"}}
	for _, tt := range []struct {
		args  string
		gated bool
	}{
		{`{"path": "/etc/hosts", "env": "prod-eu"}`, true},
		{`{"PATH": "/etc/hosts", "Env": "prod-eu"}`, true},
		{`{"path": "/etc/ssh/sshd_config", "env": "prod-eu"}`, true},
		{`{"path": "/ETC/hosts", "env": "PROD-api"}`, true},
		{`{"path": "/etc/hosts", "env": "dev", "ENV": "prod-eu"}`, true},
		{`["/etc/hosts", "prod-eu"]`, true},
		{`"/etc/hosts"`, true},
		{`null`, true},
		{`{"path": "/home/ann/notes", "env": "prod-eu"}`, false},
		{`{"path": "/etc/hosts", "env": "dev"}`, false},
	} {
		if got := p.Matches("fs__write", json.RawMessage(tt.args)); got != tt.gated {
			t.Errorf("fs__write %s: gated %v; want %v", tt.args, got, tt.gated)
		}
	}
	for glob, value := range map[string]string{`a\*b`: "a*b", "v[0-9]": "V7", "x?z": "xyz"} {
		if !(ApprovalPolicy{Tools: []string{"t"}, When: map[string]string{"k": glob}}).Matches("t", json.RawMessage(`{"k": "`+value+`"}`)) {
			t.Errorf("glob %q does not match %q", glob, value)
		}
	}
}
