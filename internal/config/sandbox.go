package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Sandbox modes and network settings of roles.NAME.sandbox.
const (
	// SandboxLandlock confines a role's stdio MCP children with Linux
	// Landlock (internal/sandbox); the default.
	SandboxLandlock = "landlock"
	// SandboxNone runs them unconfined, as crewlet's user (or run_as):
	// only ever chosen explicitly.
	SandboxNone = "none"
	NetworkOpen = "open"
	NetworkNone = "none"
)

// Sandbox is how a role's stdio MCP children are confined
// (docs/operations.md, "What an MCP child can reach"). Kept from each
// process's own file like the nodes section: an apply cannot loosen it.
type Sandbox struct {
	// Mode is SandboxLandlock or SandboxNone.
	Mode string `mapstructure:"mode"`
	// Read are absolute paths a child may read and execute besides the
	// system's programs and libraries; Write paths it may also change,
	// besides its own workspace.
	Read  []string `mapstructure:"read"`
	Write []string `mapstructure:"write"`
	// Network is NetworkOpen or NetworkNone (no TCP at all).
	Network string `mapstructure:"network"`
}

// Confined reports whether the role's children run in the sandbox.
func (s Sandbox) Confined() bool { return s.Mode != SandboxNone }

// MCPAllow is one entry of nodes.mcp_allow: a stdio command (an argv prefix:
// [node, /srv/mcp/tracker.js] allows that script with any further
// arguments) or a url, and the environment variables that server may be
// handed (env_from for a command, headers_from for a url).
type MCPAllow struct {
	Command []string `mapstructure:"command"`
	URL     string   `mapstructure:"url"`
	Env     []string `mapstructure:"env"`
}

// MCPAllowed is the node's allow-list: nodes.mcp_allow as the file wrote
// it, or, where it did not, every MCP server the file names with the
// variables it reads, and every remote agent's card_url with its
// token_env (a url entry covers both). An apply checked against the list of the process it
// reaches can run nothing, and read no variable, that process's own file
// did not name.
func (c *Config) MCPAllowed() []MCPAllow {
	if c.Nodes.mcpAllowSet {
		return c.Nodes.MCPAllow
	}
	var out []MCPAllow
	for _, name := range sortedKeys(c.Roles) {
		for _, m := range c.Roles[name].MCP {
			switch {
			case len(m.Command) > 0:
				out = append(out, MCPAllow{Command: m.Command, Env: m.EnvFrom})
			case len(m.HeadersFrom) > 0:
				out = append(out, MCPAllow{URL: m.URL, Env: slices.Sorted(maps.Values(m.HeadersFrom))})
			}
		}
	}
	for _, a := range c.Agents {
		if a.TokenEnv != "" {
			out = append(out, MCPAllow{URL: a.CardURL, Env: []string{a.TokenEnv}})
		}
	}
	return out
}

// MCPNotAllowed lists the MCP servers of next that allow does not cover,
// one line each naming the key and the command or variable: the commands
// next would run and the variables it would read that the node was not
// started allowing. A remote agent's token_env is a url's variable like
// headers_from's: sent only to the card_url the node allows it for, so an
// apply cannot point a token at another host.
func MCPNotAllowed(allow []MCPAllow, next *Config) []string {
	var out []string
	for i, a := range next.Agents {
		if a.TokenEnv != "" && !anyAllowsEnv(urlEntries(allow, a.CardURL), a.TokenEnv) {
			out = append(out, fmt.Sprintf("agents[%d].token_env %s is not allowed for card_url %s by this node's nodes.mcp_allow", i, a.TokenEnv, a.CardURL))
		}
	}
	for _, name := range sortedKeys(next.Roles) {
		for i, m := range next.Roles[name].MCP {
			at := fmt.Sprintf("roles.%s.mcp[%d]", name, i)
			switch {
			case len(m.Command) > 0:
				entries := commandEntries(allow, m.Command)
				if len(entries) == 0 {
					out = append(out, fmt.Sprintf("%s.command %q is not on this node's nodes.mcp_allow", at, m.Command))
					continue
				}
				for _, v := range m.EnvFrom {
					if !anyAllowsEnv(entries, v) {
						out = append(out, fmt.Sprintf("%s.env_from %s is not allowed for that command by this node's nodes.mcp_allow", at, v))
					}
				}
			default:
				entries := urlEntries(allow, m.URL)
				for _, header := range sortedKeys(m.HeadersFrom) {
					if v := m.HeadersFrom[header]; !anyAllowsEnv(entries, v) {
						out = append(out, fmt.Sprintf("%s.headers_from.%s %s is not allowed for that url by this node's nodes.mcp_allow", at, header, v))
					}
				}
			}
		}
	}
	return out
}

func commandEntries(allow []MCPAllow, argv []string) []MCPAllow {
	var out []MCPAllow
	for _, a := range allow {
		if len(a.Command) > 0 && len(a.Command) <= len(argv) && slices.Equal(a.Command, argv[:len(a.Command)]) {
			out = append(out, a)
		}
	}
	return out
}

func urlEntries(allow []MCPAllow, url string) []MCPAllow {
	var out []MCPAllow
	for _, a := range allow {
		if a.URL != "" && a.URL == url {
			out = append(out, a)
		}
	}
	return out
}

func anyAllowsEnv(entries []MCPAllow, name string) bool {
	for _, a := range entries {
		if slices.Contains(a.Env, name) {
			return true
		}
	}
	return false
}

// checkMCPAllow checks nodes.mcp_allow, and that the file's own MCP
// servers are on it: a file that names a server its node would refuse is a
// mistake to report now.
func checkMCPAllow(add addFunc, c *Config) {
	for i, a := range c.Nodes.MCPAllow {
		at := fmt.Sprintf("nodes.mcp_allow[%d]", i)
		switch {
		case (len(a.Command) > 0) == (a.URL != ""):
			add(at, "set exactly one of command (an argv prefix) and url")
		case len(a.Command) > 0 && strings.TrimSpace(a.Command[0]) == "":
			add(at+".command[0]", "empty program name")
		}
		for j, name := range a.Env {
			if !envKeyRE.MatchString(name) {
				add(fmt.Sprintf("%s.env[%d]", at, j), "invalid environment variable name %q; must match %s", name, envKeyRE)
			}
		}
	}
	if c.Nodes.mcpAllowSet {
		for _, line := range MCPNotAllowed(c.Nodes.MCPAllow, c) {
			key, msg, _ := strings.Cut(line, " ")
			add(key, "%s; add it there, or remove it", msg)
		}
	}
}

// checkSandbox checks a role's sandbox: known values, absolute paths, and
// no path that would show a child what crewlet keeps (protected).
func checkSandbox(add addFunc, at string, s Sandbox, protected []string) {
	// "" is a role built without a file: the defaults.
	if s.Mode != "" && s.Mode != SandboxLandlock && s.Mode != SandboxNone {
		add(at+".mode", "unknown mode %q; use %s (the default) or %s (run MCP children unconfined)", s.Mode, SandboxLandlock, SandboxNone)
	}
	if s.Network != "" && s.Network != NetworkOpen && s.Network != NetworkNone {
		add(at+".network", "unknown network %q; use %s (the default) or %s", s.Network, NetworkOpen, NetworkNone)
	}
	for _, list := range []struct {
		key   string
		paths []string
	}{{"read", s.Read}, {"write", s.Write}} {
		for i, p := range list.paths {
			key := fmt.Sprintf("%s.%s[%d]", at, list.key, i)
			if !filepath.IsAbs(p) {
				add(key, "%q is not an absolute path", p)
				continue
			}
			if hidden := revealed(p, protected); hidden != "" {
				add(key, "%s would show the role's MCP children %s, which crewlet keeps from them; name a directory that does not hold it", p, hidden)
			}
		}
	}
}

// ProtectedPaths are the files no MCP child may see: the org file the
// process started with, the local token, TLS keys and certificates, and
// crewlet's own config directory (where the CLI keeps tokens).
func (c *Config) ProtectedPaths() []string {
	var out []string
	if c.file != "" {
		out = append(out, c.file)
	}
	if dir, err := os.UserConfigDir(); err == nil {
		out = append(out, filepath.Join(dir, "crewlet"))
	}
	if f := c.Auth.LocalTokenFile; f != "" {
		out = append(out, f)
	}
	for _, f := range []string{c.API.TLS.CertFile, c.API.TLS.KeyFile, c.Temporal.TLS.CAFile, c.Temporal.TLS.CertFile, c.Temporal.TLS.KeyFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// revealed returns the first of protected that granting p would show: p
// itself, or one beneath it; "" when none.
func revealed(p string, protected []string) string {
	granted := resolved(p)
	for _, q := range protected {
		if within(resolved(q), granted) {
			return q
		}
	}
	return ""
}

// resolved is p absolute, cleaned and with its symlinks followed as far as
// they exist.
func resolved(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return abs
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// WorkspaceRoot is the directory holding each seat's sandbox workspace:
// nodes.workspaces, or the state directory systemd gives the unit
// ($STATE_DIRECTORY), or $XDG_STATE_HOME, or ~/.local/state, each with
// crewlet/workspaces (workspaces for the first two).
func (n Nodes) WorkspaceRoot() (string, error) {
	switch {
	case n.Workspaces != "":
		return n.Workspaces, nil
	case os.Getenv("STATE_DIRECTORY") != "":
		first, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":")
		return filepath.Join(first, "workspaces"), nil
	case os.Getenv("XDG_STATE_HOME") != "":
		return filepath.Join(os.Getenv("XDG_STATE_HOME"), "crewlet", "workspaces"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("nodes.workspaces: no home directory to keep MCP workspaces in (%v); set nodes.workspaces", err)
	}
	return filepath.Join(home, ".local", "state", "crewlet", "workspaces"), nil
}
