package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/crewlet/crewlet"
)

// Agent is a remote A2A agent the org's seats may delegate to, as
// a2a:NAME: a ticket to it is served by the RemoteTicket workflow.
type Agent struct {
	// Name is what a2a:NAME and may.delegate call it.
	Name string `mapstructure:"name"`
	// CardURL is where its agent card is: the card names the endpoint.
	CardURL string `mapstructure:"card_url"`
	// TokenEnv names the environment variable holding the bearer token
	// sent to it; empty sends none. The token goes only to CardURL's
	// origin, and only while this process's own file (or nodes.mcp_allow)
	// allows that variable for that url.
	TokenEnv string `mapstructure:"token_env"`
}

// A2APrefix marks a ticket's target that is a remote agent of agents:.
const A2APrefix = "a2a:"

// RemoteAgent returns the agent a2a:NAME names; ok is false when to names
// no remote agent, known is false when it names one the org lacks.
func (c *Config) RemoteAgent(to string) (a Agent, remote, known bool) {
	name, remote := strings.CutPrefix(to, A2APrefix)
	if !remote {
		return Agent{}, false, false
	}
	for _, a := range c.Agents {
		if a.Name == name {
			return a, true, true
		}
	}
	return Agent{}, true, false
}

// AgentNames are the names of the org's remote agents, sorted.
func (c *Config) AgentNames() []string {
	var out []string
	for _, a := range c.Agents {
		out = append(out, a.Name)
	}
	slices.Sort(out)
	return out
}

// checkAgents checks agents: a unique name, an http(s) card_url without
// credentials, and a token_env that names a variable that is set.
func checkAgents(add addFunc, c *Config) {
	first := map[string]int{}
	for i, a := range c.Agents {
		base := fmt.Sprintf("agents[%d]", i)
		switch {
		case a.Name == "":
			add(base+".name", "required; names must be %s", crewlet.NamePattern)
		case !crewlet.ValidName(a.Name):
			add(base+".name", "invalid name %q; names must be %s", a.Name, crewlet.NamePattern)
		default:
			if j, dup := first[a.Name]; dup {
				add(base+".name", "duplicate name %q (also agents[%d])", a.Name, j)
			} else {
				first[a.Name] = i
			}
		}
		u, err := url.Parse(a.CardURL)
		switch {
		case a.CardURL == "":
			add(base+".card_url", "required; the URL of the agent's card, e.g. https://agent.example.com/.well-known/agent-card.json")
		case err == nil && u.User != nil:
			// Not shown: it holds a password or a token.
			add(base+".card_url", "must not hold credentials; name the variable holding the token in token_env")
		case err != nil && strings.Contains(a.CardURL, "@"):
			add(base+".card_url", "invalid URL; want an http or https URL, without credentials")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add(base+".card_url", "invalid URL %q; want an http or https URL", a.CardURL)
		}
		if a.TokenEnv != "" {
			checkEnvFrom(add, base+".token_env", a.TokenEnv)
		}
	}
}
