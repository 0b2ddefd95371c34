package config

import (
	"strings"
	"testing"
)

const agentOrg = `
company: { name: acme }
profiles: { p: { provider: scripted } }
roles:
  eng: { charter: engineers, profile: p, may: { delegate: ["*", "a2a:review"] } }
  ops: { charter: operates, profile: p }
seats:
  - { handle: cto, role: eng }
  - { handle: op, role: ops }
`

func TestAgentsProblemsNameTheKey(t *testing.T) {
	t.Setenv("REVIEW_TOKEN", "x")
	c, err := Parse([]byte(agentOrg + `
agents:
  - { name: review, card_url: "https://review.example.com/.well-known/agent-card.json", token_env: REVIEW_TOKEN }
  - { name: Bad, card_url: "ftp://x.example.com/card" }
  - { name: review, card_url: "https://user:secret@x.example.com/card" }
  - { name: nourl }
  - { name: tok, card_url: "https://t.example.com/card", token_env: "not-a-name" }
  - { name: unset, card_url: "https://u.example.com/card", token_env: NO_SUCH_VAR_FOR_CREWLET }
`))
	if err == nil {
		t.Fatalf("Parse = %+v, nil; want every problem", c)
	}
	want := []string{
		`agents[1].name: invalid name "Bad"`,
		`agents[1].card_url: invalid URL "ftp://x.example.com/card"; want an http or https URL`,
		`agents[2].name: duplicate name "review" (also agents[0])`,
		`agents[2].card_url: must not hold credentials`,
		`agents[3].card_url: required`,
		`agents[4].token_env: invalid environment variable name "not-a-name"`,
		`agents[5].token_env: environment variable NO_SUCH_VAR_FOR_CREWLET is not set`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("problems lack %q; got:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("a problem shows the card_url's credentials:\n%v", err)
	}
}

func TestMayDelegateNamesRemoteAgentsOneByOne(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(agentOrg, `ops: { charter: operates, profile: p }`, `ops: { charter: operates, profile: p, may: { delegate: ["a2a:revew"], message: ["a2a:review"] } }`, 1) + `
agents: [ { name: review, card_url: "https://review.example.com/card" } ]
`))
	for _, w := range []string{
		`roles.ops.may.delegate[0]: unknown remote agent "revew" in "a2a:revew"; name one of agents (review); did you mean "review"?`,
		`roles.ops.may.message[0]: "a2a:review" is a remote agent: only may.delegate may name one`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("problems lack %q; got:\n%v", w, err)
		}
	}
	c, err := Parse([]byte(agentOrg + `
agents: [ { name: review, card_url: "https://review.example.com/card" } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MayDelegateRemote("cto", "a2a:review"); err != nil {
		t.Errorf("cto's role names a2a:review: %v", err)
	}
	err = c.MayDelegateRemote("op", "a2a:review")
	if err == nil || !strings.Contains(err.Error(), "add a2a:review to roles.ops.may.delegate") {
		t.Errorf("op's role (may.delegate left at *) delegating to a2a:review: %v; want refused, saying which key to widen", err)
	}
}

// An agent's token is a url's secret like headers_from's: the node's own
// file allows it for its card_url, and a revision that points it at
// another host, or reads another variable, is refused.
func TestAnAgentsTokenIsAllowedOnlyForItsOwnCardURL(t *testing.T) {
	t.Setenv("REVIEW_TOKEN", "x")
	t.Setenv("OTHER_SECRET", "y")
	boot, err := Parse([]byte(agentOrg + `
agents: [ { name: review, card_url: "https://review.example.com/card", token_env: REVIEW_TOKEN } ]
`))
	if err != nil {
		t.Fatal(err)
	}
	allowed := boot.MCPAllowed()
	for _, tc := range []struct {
		name, agents, refused string
	}{
		{"the same agent", `[ { name: review, card_url: "https://review.example.com/card", token_env: REVIEW_TOKEN } ]`, ""},
		{"renamed, same url and token", `[ { name: rev, card_url: "https://review.example.com/card", token_env: REVIEW_TOKEN } ]`, ""},
		{"no token", `[ { name: evil, card_url: "https://evil.example.com/card" } ]`, ""},
		{"the token sent to another host", `[ { name: review, card_url: "https://evil.example.com/card", token_env: REVIEW_TOKEN } ]`,
			"agents[0].token_env REVIEW_TOKEN is not allowed for card_url https://evil.example.com/card by this node's nodes.mcp_allow"},
		{"another secret read", `[ { name: review, card_url: "https://review.example.com/card", token_env: OTHER_SECRET } ]`,
			"agents[0].token_env OTHER_SECRET is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := Parse([]byte(strings.Replace(agentOrg, `"a2a:review"`, `"*"`, 1) + "agents: " + tc.agents + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(MCPNotAllowed(allowed, next), "\n")
			if (tc.refused == "") != (got == "") || !strings.Contains(got, tc.refused) {
				t.Errorf("refused %q; want %q", got, tc.refused)
			}
		})
	}
	_, err = Parse([]byte(agentOrg + `
agents: [ { name: review, card_url: "https://review.example.com/card", token_env: REVIEW_TOKEN } ]
nodes: { mcp_allow: [] }
`))
	if err == nil || !strings.Contains(err.Error(), "agents[0].token_env: REVIEW_TOKEN is not allowed for card_url") {
		t.Errorf("a file whose own allow-list lacks its agent's token: %v", err)
	}
}
