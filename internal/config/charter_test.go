package config

import (
	"strings"
	"testing"
)

// charterOrg is an org whose role clerk has the given charter, may.tools
// and a tracker MCP server; seat c1 is a clerk, alice a person.
func charterOrg(charter, mayTools string) string {
	return `company: { name: acme }
profiles: { p: { provider: scripted } }
roles:
  clerk:
    charter: ` + charter + `
    profile: p
    mcp: [ { name: tracker, url: "http://127.0.0.1:9000/mcp" } ]
    may: { tools: ` + mayTools + ` }
  person: { profile: p }
seats:
  - { handle: c1, role: clerk }
  - { handle: alice, kind: human, role: person }
`
}

// A role whose seats are agents and whose charter is blank is refused at
// roles.NAME.charter, saying what to write; a role only people hold needs
// none.
func TestBlankCharterIsRefusedNamingTheKey(t *testing.T) {
	for _, charter := range []string{`""`, `"   "`, `"\n\t"`} {
		_, err := Parse([]byte(charterOrg(charter, `[ '*' ]`)))
		if err == nil || !strings.Contains(err.Error(), "roles.clerk.charter: required") || !strings.Contains(err.Error(), "write what the role is for") {
			t.Errorf("charter %s: %v; want roles.clerk.charter refused, saying what to write", charter, err)
		}
		if err != nil && strings.Contains(err.Error(), "roles.person") {
			t.Errorf("charter %s: %v; roles.person, held only by a person, needs no charter", charter, err)
		}
	}
	// A spawn pool's role is an agent's too.
	_, err := Parse([]byte(charterOrg("files issues", `[ '*' ]`) + "pools: [ { role: person, max_seats: 2 } ]\n"))
	if err == nil || !strings.Contains(err.Error(), "roles.person.charter: required") {
		t.Errorf("a pool of a role with no charter: %v; want roles.person.charter refused", err)
	}
}

// A charter that tells the model to call a tool its seats are never offered
// is refused at roles.NAME.charter, naming the tool: a server the role has
// no MCP entry for, or a tool its may.tools does not allow.
func TestCharterNamingAToolTheRoleLacksIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, charter, mayTools, want string
	}{
		{"another role's server", "Files issues with github__create_issue.", `[ '*' ]`,
			`roles.clerk.charter: names the tool "github__create_issue", which the role does not have: no MCP server "github" in roles.clerk.mcp (its servers are tracker)`},
		{"a server's every tool", "Use the gh__* tools.", `[ '*' ]`,
			`roles.clerk.charter: names the tool "gh__*", which the role does not have: no MCP server "gh"`},
		{"a tool may.tools leaves out", "Close stale items with tracker__close_issue.", `[ 'tracker__list_*', send_message ]`,
			`roles.clerk.charter: names the tool "tracker__close_issue", which roles.clerk.may.tools (tracker__list_*, send_message) does not let the role's seats call`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(charterOrg(c.charter, c.mayTools)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("charter %q: %v; want %q", c.charter, err, c.want)
			}
		})
	}
}

// A charter naming its own server's tools, first-party tools, or prose that
// only looks like code is accepted.
func TestCharterNamingItsOwnServersToolPasses(t *testing.T) {
	for _, charter := range []string{
		"File each bug with tracker__create_issue and list them with `tracker__list_issues`.",
		"Read the tracker__* tools' results carefully.",
		"Tell the team with send_message; hand work on with delegate.",
		"Mind Python's __init__ and __bold__ words, MAX__LEN and a_b_c.",
	} {
		if _, err := Parse([]byte(charterOrg(`"`+charter+`"`, `[ 'tracker__*', send_message, delegate ]`))); err != nil {
			t.Errorf("charter %q: %v; want it accepted", charter, err)
		}
	}
}
