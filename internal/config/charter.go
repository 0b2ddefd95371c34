package config

import (
	"path"
	"slices"
	"strings"

	"github.com/crewlet/crewlet"
)

// checkCharter adds the problems of a role's charter: blank for a role
// whose seats are agents (the charter is their system prompt, so a blank one
// leaves the model to guess what the seat is for), or naming a tool the
// role's seats do not have (the model is told to call what it is never
// offered).
func checkCharter(add func(key, format string, args ...any), c *Config, name string, r Role) {
	key := "roles." + name + ".charter"
	if strings.TrimSpace(r.Charter) == "" {
		if c.agentRole(name) {
			add(key, `required: it is the system prompt of the role's seats; write what the role is for and how its seats work, e.g. charter: "Triages new bug reports and files each in the tracker"`)
		}
		return
	}
	servers := make([]string, len(r.MCP))
	for i, s := range r.MCP {
		servers[i] = s.Name
	}
	slices.Sort(servers)
	mayTools := r.may().Tools
	seen := map[string]bool{}
	for _, ref := range charterToolRefs(r.Charter) {
		if seen[ref.name] {
			continue
		}
		seen[ref.name] = true
		switch {
		case !slices.Contains(servers, ref.server):
			have := "it has none"
			if len(servers) > 0 {
				have = "its servers are " + strings.Join(servers, ", ")
			}
			add(key, "names the tool %q, which the role does not have: no MCP server %q in roles.%s.mcp (%s); add the server there or change the charter", ref.name, ref.server, name, have)
		case ref.tool != "" && !slices.ContainsFunc(mayTools, func(g string) bool { ok, _ := path.Match(g, ref.name); return ok }):
			allowed := "none"
			if len(mayTools) > 0 {
				allowed = strings.Join(mayTools, ", ")
			}
			add(key, "names the tool %q, which roles.%s.may.tools (%s) does not let the role's seats call; allow it there or change the charter", ref.name, name, allowed)
		}
	}
}

// agentRole reports whether the role's charter is some agent's system
// prompt: an agent seat or a spawn pool names it. A role only human seats
// name, or none yet, has no prompt to be blank; a seat added to it is
// checked then.
func (c *Config) agentRole(name string) bool {
	for _, p := range c.Pools {
		if p.Role == name {
			return true
		}
	}
	for _, s := range c.Seats {
		if s.Role == name && s.kind() != string(crewlet.SeatHuman) {
			return true
		}
	}
	return false
}

// toolRef is a tool a charter names: server__tool, or server__ alone for
// every tool of server (as in "the tracker__* tools").
type toolRef struct{ name, server, tool string }

// charterToolRefs are the words of a charter that name an MCP tool the way
// the model sees it: a server name (as an MCP server may be named), "__",
// and the tool. Only "__" marks one, so prose never does; words that begin
// with "__" (Python's __init__, Markdown's __bold__) or whose part before it
// could be no server's name are not references. First-party tools
// (send_message, delegate) hold no "__" and are every seat's.
func charterToolRefs(charter string) []toolRef {
	words := strings.FieldsFunc(charter, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	})
	var refs []toolRef
	for _, w := range words {
		server, tool, ok := strings.Cut(w, "__")
		if !ok || !mcpNameRE.MatchString(server) {
			continue
		}
		if tool == "" {
			w = server + "__*"
		}
		refs = append(refs, toolRef{name: w, server: server, tool: tool})
	}
	return refs
}
